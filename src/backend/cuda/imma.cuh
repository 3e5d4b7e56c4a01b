// Matrix-vector products on the integer tensor cores, for T <= 8 tokens (decode and verify).
//
// Why: turning a 2-bit IQ weight into a float and multiplying it by an f32 activation costs ~6
// instructions; decode of the 27B preset was bound by instruction issue at ~13 % of bandwidth.
// Here weights stay small integers (grid magnitudes with their signs, as int8) and activations
// become integers that are exact enough (act_quant.cu):
//   per token and 256-column unit u, x = e_u * v, e_u a power of two, v an integer with
//   |v| <= 2^30 (rounding error <= 2^-30 of the unit's largest |x|), v split into four signed
//   bytes ("limbs"), v = l0 + 2^8 l1 + 2^16 l2 + 2^24 l3.
// One mma.m16n8k32.s8 multiplies 16 weight rows by 32 columns for 8 "columns" = 2 tokens x 4
// limbs, exactly, in int32. Integer sub-block scales multiply the int32 sums (still exact); once
// per unit the sums become float, times the block scale and e_u; at the end the limbs are
// recombined. Rounding: f32 accumulation over units and the activations' 2^-30, both below
// the f32-FMA path's (DESIGN.md, numerics).
//
// Activation layout (written by act_quant.cu): for n-tile nt (tokens 2nt, 2nt+1), 32-column
// slab s and lane l = 4c + q (c = 4 (token & 1) + limb, q = lane within its quad), the 8 bytes
// xq[(nt * slabs + s) * 32 + l] hold that limb of elements 32s + 8q .. 32s + 8q + 7: the B
// fragment of lane l as it is, one 8-byte load. The mma's K order is permuted to match: lane
// q's A bytes are the weights 8q .. 8q+7 of the slab (a sum does not care about order).
//
// Work split: stream-K over 16-row tiles (see the kernel); each warp streams its weight bytes
// with cp.async through a private multi-stage ring in shared memory, and lanes read their rows'
// bytes from there.
#pragma once

#include <algorithm>

#include "backend/cuda/check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/quant_traits.cuh"

namespace df::cuda {

inline constexpr int kImmaThreads = 32 * kImmaWarps;
inline constexpr int kImmaUnit = 256;  // columns per unit (one exponent per token and unit)

// Exact int -> float for |v| < 2^22 with two full-rate instructions (I2F is quarter rate).
DF_DEV float small_int_to_f32(int v) { return __int_as_float(v + 0x4B400000) - 12582912.f; }

DF_DEV uint4 lds_u4(const uint8_t* p) { return *reinterpret_cast<const uint4*>(p); }
DF_DEV uint2 lds_u2(const uint8_t* p) { return *reinterpret_cast<const uint2*>(p); }
DF_DEV uint32_t lds_u32(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }
DF_DEV uint32_t lds_u16(const uint8_t* p) { return *reinterpret_cast<const unsigned short*>(p); }

// PRMT with a run-time selector: CUDA's __byte_perm masks the selector first (an extra LOP per
// call); every selector here has its nibbles' bit 3 clear, as the default mode needs.
DF_DEV uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
    uint32_t d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
    return d;
}

// Replicated tables (tables.h, ImmaTables): lane l reads copy l % R of entry i, at byte offset
// i * 4R + 4 (l % R) (ImmaLane holds the lane part): one multiply-add and one LDS.
template <int R>
DF_DEV uint32_t rep(uint32_t t, uint32_t i) {
    uint32_t v;  // a 32-bit shared address: no generic-to-shared base add per gather
    asm("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(t + i * (4u * R)));  // tables are constant once staged
    return v;
}

// Entry (word >> 7q) & 127 of a 32-fold replicated table of 7-bit indices (entries 128 bytes
// apart) at t0, the lane's copy at byte lane4 = 4 (lane % 32) of the entry: the rotation puts
// the index at bit 7, one LOP3 masks it and ORs the lane's offset in (disjoint bits), and the
// table's base stays in the load's address (a uniform register): no add per gather.
DF_DEV uint32_t rep_sign7(uint32_t t0, uint32_t lane4, uint32_t word, uint32_t rot7) {
    uint32_t v;
    const uint32_t off = (__funnelshift_r(word, word, rot7) & (127u << 7)) | lane4;
    asm("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(t0 + off));
    return v;
}

// Copies `bytes` (a multiple of 16) from global to shared memory with the whole block.
DF_DEV void copy_table_async(void* dst, const void* src, int bytes) {
    for (int i = threadIdx.x; i < bytes / 16; i += blockDim.x)
        cp_async<16>(static_cast<uint8_t*>(dst) + 16 * i, static_cast<const uint8_t*>(src) + 16 * i);
}

// IQ2 grids hold only the magnitudes 8, 25, 43: one PRMT turns a selector of level codes with
// the sign at bit 2 of each nibble into 4 signed int8 weights (bytes 0..3: +8, +25, +43;
// bytes 4..7: -8, -25, -43).
inline constexpr uint32_t kIq2Pos = 0x002B1908u, kIq2Neg = 0x00D5E7F8u;
// `pos` is kIq2Pos held in a register (ImmaLane): as an immediate the compiler re-creates it
// before every PRMT.
DF_DEV void iq2_bytes(uint32_t pos, uint32_t sel, uint32_t& lo, uint32_t& hi) {
    lo = prmt(pos, kIq2Neg, sel);
    hi = prmt(pos, kIq2Neg, sel >> 16);
}
// Any magnitudes 1..127 (IQ3 grids): byte j comes from g or from its negation; sel is a
// selector word of the *_sel sign tables (0x3210 plus 4 at each negative byte).
DF_DEV uint32_t signed4(uint32_t g, uint32_t sel) { return prmt(g, ~g + 0x01010101u, sel); }

// Per-lane constants of a decoder: table bases offset by the lane's replica, q-dependent shifts.
struct ImmaLane {
    uint32_t grid, sign;    // shared addresses of the tables plus the lane's replica offset
    uint32_t sign0, lane4;  // the sign table's address and 4 (lane % 32) (rep_sign7)
    uint32_t byte_sel;      // PRMT selector: byte q of a word to byte 0, zeros above
    uint32_t shift7;        // 7 q
    uint32_t rot7;          // (7 q - 7) mod 32: rotating right by it moves bits 7q.. to bit 7
    uint32_t pos;           // kIq2Pos
    int q;
};

// Per-unit partial sums of one warp: exact int32 (integer-scaled types) or f32 (types whose
// scale per 32 is a float, applied per mma).
template <int NT>
struct ImmaPartial {
    int i[NT][4];
    int mn[NT][4];  // min-weighted activation sums (types with mins)
    float f[NT][4];
};

template <int NT>
DF_DEV void imma_add_int(ImmaPartial<NT>& p, int nt, const int (&c)[4], int s0, int s1) {
    p.i[nt][0] += c[0] * s0;
    p.i[nt][1] += c[1] * s0;
    p.i[nt][2] += c[2] * s1;
    p.i[nt][3] += c[3] * s1;
}

// The same for the min-weighted activation sums (types with mins).
template <int NT>
DF_DEV void imma_add_min(ImmaPartial<NT>& p, int nt, const int (&c)[4], int m0, int m1) {
    p.mn[nt][0] += c[0] * m0;
    p.mn[nt][1] += c[1] * m0;
    p.mn[nt][2] += c[2] * m1;
    p.mn[nt][3] += c[3] * m1;
}

template <int NT>
DF_DEV void imma_mma_int(const uint32_t (&a)[4], const uint2 (&b)[NT], int s0, int s1, ImmaPartial<NT>& p) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        int c[4];
        mma_s8(c, a, b[nt]);
        imma_add_int(p, nt, c, s0, s1);
    }
}

// Types whose scale changes every 16 columns: the slab's lanes 0,1 (groups 0,1) and 2,3
// (groups 2,3) are multiplied separately by zeroing the other half's activations.
template <int NT>
DF_DEV void imma_mma_int16(const uint32_t (&a)[4], const uint2 (&b)[NT], int q, const int (&s)[4], ImmaPartial<NT>& p) {
    const bool lo = q < 2;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        const uint2 z = make_uint2(0u, 0u);
        int c[4];
        mma_s8(c, a, lo ? b[nt] : z);
        imma_add_int(p, nt, c, s[0], s[2]);
        mma_s8(c, a, lo ? z : b[nt]);
        imma_add_int(p, nt, c, s[1], s[3]);
    }
}

// The same at T = 1 with one mma ("halves" launches, imma_body's kHalves): the B fragment's
// columns 0-3 hold the token's limbs over the slab's first 16 columns, columns 4-7 (token 1's,
// unused at T = 1) its limbs over the last 16, so lanes q < 2 get the first half's sums and
// lanes q >= 2 the second's: each lane scales its half, and the unit's end adds lanes q and
// q ^ 2 (exact integers: the same sums as imma_mma_int16).
DF_DEV void imma_mma_half(const uint32_t (&a)[4], uint2 b, int q, const int (&s)[4], ImmaPartial<1>& p) {
    const bool lo = q < 2;
    int c[4];
    mma_s8(c, a, b);
    imma_add_int(p, 0, c, lo ? s[0] : s[1], lo ? s[2] : s[3]);
}

// ---- decoders: Imma<T> gives, for a 256-column unit of a row staged in shared memory,
//   kBody   bytes of the unit in the row (block bodies), copied kCopy bytes at a time;
//   kStride the staged row stride (bank-conflict free for the 8 rows a load instruction reads);
//   kHead   bytes of split heads staged per row, from head_src(u) in the row's head array;
//   Tabs    its shared-memory tables, load_tabs() starts copying them (cp.async);
//   sub()   the mma of 32-column slab m for rows r0 (g) and r1 (g + 8), lane q;
//   unit_scale() the float that multiplies the unit's integer sums (from the staged row r or
//           its heads h); types with mins (kMins) also unit_min() for the min-weighted sums.

template <Type T>
struct Imma {
    static constexpr bool kSupported = false;
};

struct ImmaNoTabs {
    static constexpr int kGridR = 1, kSignR = 1;
    struct Tabs { uint32_t grid[1], sign[1]; };
};

// Whether a decoder (Imma<T>, GemmQ<T>) has mins: w = d sc q - dmin m.
template <class D>
constexpr bool decoder_has_mins() {
    if constexpr (requires { D::kMins; }) return D::kMins;
    else return false;
}

template <class I>
constexpr bool imma_has_tabs() { return requires(const ImmaTables* g) { I::grid_src(g); }; }
// Whether a decoder with 16-column scales has the one-token halves form (imma_mma_half's layout).
template <class I>
constexpr bool imma_halves() {
    return requires(const uint8_t* r, const ImmaLane& l, uint2 b, ImmaPartial<1>& p) { I::sub_halves(r, r, r, r, 0, l, b, p); };
}

// Starts copying the decoder's tables (replicated kGridR / kSignR times) into shared memory.
template <class I>
DF_DEV void imma_load_tabs(typename I::Tabs& t, const ImmaTables* g) {
    if constexpr (imma_has_tabs<I>()) {
        copy_table_async(t.grid, I::grid_src(g), sizeof t.grid);
        copy_table_async(t.sign, I::sign_src(g), sizeof t.sign);
    }
}

// The lane constants of a decoder whose tables in shared memory (at grid, sign) hold GR / SR copies.
template <int GR, int SR>
DF_DEV ImmaLane imma_lane(uint32_t grid, uint32_t sign, int lane) {
    uint32_t pos;
    asm volatile("mov.b32 %0, %1;" : "=r"(pos) : "n"(kIq2Pos));  // opaque: stays in a register
    const uint32_t q = static_cast<uint32_t>(lane & 3);
    return {grid + 4u * static_cast<uint32_t>(lane & (GR - 1)), sign + 4u * static_cast<uint32_t>(lane & (SR - 1)),
            sign, 4u * static_cast<uint32_t>(lane & 31), 0x4440u | q, 7u * q, (7u * q + 25u) & 31u, pos,
            static_cast<int>(q)};
}

template <>
struct Imma<Type::Q8_0> : ImmaNoTabs {
    static constexpr bool kSupported = true;
    static constexpr int kBody = 256, kCopy = 16, kStride = 288, kHead = 16, kStages = 2;
    static DF_DEV size_t head_src(int u) { return 16 * static_cast<size_t>(u); }
    static DF_DEV float unit_scale(const uint8_t*, const uint8_t*, int) { return 0.f; }
    template <int NT>
    static DF_DEV void sub(const uint8_t* r0, const uint8_t* r1, const uint8_t* h0, const uint8_t* h1, int m,
                           const ImmaLane& l, const uint2 (&b)[NT], ImmaPartial<NT>& p) {
        const uint2 w0 = lds_u2(r0 + 32 * m + 8 * l.q), w1 = lds_u2(r1 + 32 * m + 8 * l.q);
        const uint32_t a[4] = {w0.x, w1.x, w0.y, w1.y};
        const float d0 = f16_bits_to_f32(lds_u16(h0 + 2 * m)), d1 = f16_bits_to_f32(lds_u16(h1 + 2 * m));
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            int c[4];
            mma_s8(c, a, b[nt]);  // |c| <= 32 * 128 * 128 < 2^22
            p.f[nt][0] = fmaf(small_int_to_f32(c[0]), d0, p.f[nt][0]);
            p.f[nt][1] = fmaf(small_int_to_f32(c[1]), d0, p.f[nt][1]);
            p.f[nt][2] = fmaf(small_int_to_f32(c[2]), d1, p.f[nt][2]);
            p.f[nt][3] = fmaf(small_int_to_f32(c[3]), d1, p.f[nt][3]);
        }
    }
};

// The IQ types keep one f16 per 256-block in the split-head array; two neighbours are copied
// (4 bytes, aligned) and the unit's is picked.
struct ImmaIqHead {
    static constexpr int kHead = 4;
    static DF_DEV size_t head_src(int u) { return 2 * static_cast<size_t>(u & ~1); }
    static DF_DEV float head(const uint8_t* h, int u) { return f16_bits_to_f32(lds_u16(h + 2 * (u & 1))); }
};

// Rows of the IQ types: `row` fills a[0], a[2] (row g) or a[1], a[3] (row g + 8) and the scales.
template <class D, int NT>
DF_DEV void imma_iq_sub(const uint8_t* r0, const uint8_t* r1, int m, const ImmaLane& l, const uint2 (&b)[NT],
                        ImmaPartial<NT>& p) {
    uint32_t a[4];
    if constexpr (D::kScale16) {
        int s[4];
        D::row(l, r0, m, a[0], a[2], s[0], s[1]);
        D::row(l, r1, m, a[1], a[3], s[2], s[3]);
        imma_mma_int16(a, b, l.q, s, p);
    } else {
        int s0, s1;
        D::row(l, r0, m, a[0], a[2], s0);
        D::row(l, r1, m, a[1], a[3], s1);
        imma_mma_int(a, b, s0, s1, p);
    }
}

// The one-token halves of the IQ types with 16-column scales (imma_mma_half's layout): D::row_half
// decodes a row's weights and only the lane's half's scale, so imma_mma_int applies it.
template <class D>
DF_DEV void imma_iq_sub_halves(const uint8_t* r0, const uint8_t* r1, int m, const ImmaLane& l, uint2 b, ImmaPartial<1>& p) {
    uint32_t a[4];
    int s0, s1;
    D::row_half(l, r0, m, a[0], a[2], s0);
    D::row_half(l, r1, m, a[1], a[3], s1);
    const uint2 bs[1] = {b};
    imma_mma_int(a, bs, s0, s1, p);
}

#define DF_IMMA_IQ_SUB                                                                                   \
    template <int NT>                                                                                    \
    static DF_DEV void sub(const uint8_t* r0, const uint8_t* r1, const uint8_t*, const uint8_t*, int m, \
                           const ImmaLane& l, const uint2 (&b)[NT], ImmaPartial<NT>& p) {               \
        imma_iq_sub<Imma, NT>(r0, r1, m, l, b, p);                                                       \
    }

// The IQ decoders with 16-column scales give sub_halves through their row_half.
#define DF_IMMA_IQ_SUB_HALVES                                                                            \
    static DF_DEV void sub_halves(const uint8_t* r0, const uint8_t* r1, const uint8_t*, const uint8_t*,  \
                                  int m, const ImmaLane& l, uint2 b, ImmaPartial<1>& p) {              \
        imma_iq_sub_halves<Imma>(r0, r1, m, l, b, p);                                                    \
    }

template <>
struct Imma<Type::IQ2_XXS> : ImmaIqHead {
    static constexpr bool kSupported = true, kScale16 = false;
    static constexpr int kBody = 64, kCopy = 16, kStride = 80, kStages = 4;
    struct Tabs { uint32_t grid[256 * 32]; uint32_t sign[128 * 32]; };
    static DF_DEV const uint32_t* grid_src(const ImmaTables* g) { return g->iq2xxs_sel; }
    static DF_DEV const uint32_t* sign_src(const ImmaTables* g) { return g->sign7; }
    static DF_DEV float unit_scale(const uint8_t*, const uint8_t* h, int u) { return head(h, u) * 0.125f; }  // d (0.5 + s) / 4
    static constexpr int kGridR = 32, kSignR = 32;
    template <int GR = kGridR, int SR = kSignR>  // table replication (GEMM stages fewer copies)
    static DF_DEV void row(const ImmaLane& l, const uint8_t* r, int m, uint32_t& lo, uint32_t& hi, int& s) {
        const uint2 w = lds_u2(r + 8 * m);
        uint32_t sg;
        if constexpr (SR == 32)
            sg = rep_sign7(l.sign0, l.lane4, w.y, l.rot7);
        else
            sg = rep<SR>(l.sign, (w.y >> l.shift7) & 127u);
        iq2_bytes(l.pos, rep<GR>(l.grid, prmt(w.x, 0u, l.byte_sel)) | sg, lo, hi);
        s = 2 * static_cast<int>(w.y >> 28) + 1;
    }
    DF_IMMA_IQ_SUB
};

// The one-token halves of IQ2_XS and IQ2_S: 2 sc + 1 for lane q's half (nibble q / 2) of scale
// byte m % 4 of scw; the four slabs' values come from one word (no carries: each byte <= 31),
// which ptxas computes once and reuses, then slab m's byte is picked.
DF_DEV int imma_half_scale(uint32_t scw, int q, int m) {
    const uint32_t s4 = ((scw >> ((q & 2) << 1)) & 0x0F0F0F0Fu) * 2u + 0x01010101u;
    return static_cast<int>(prmt(s4, 0u, 0x4440u | static_cast<uint32_t>(m & 3)));
}

template <>
struct Imma<Type::IQ2_XS> : ImmaIqHead {
    static constexpr bool kSupported = true, kScale16 = true;
    static constexpr int kBody = 72, kCopy = 8, kStride = 80, kStages = 4;
    struct Tabs { uint32_t grid[512 * 16]; uint32_t sign[128 * 32]; };
    static DF_DEV const uint32_t* grid_src(const ImmaTables* g) { return g->iq2xs_sel; }
    static DF_DEV const uint32_t* sign_src(const ImmaTables* g) { return g->sign7; }
    static DF_DEV float unit_scale(const uint8_t*, const uint8_t* h, int u) { return head(h, u) * 0.125f; }
    static constexpr int kGridR = 16, kSignR = 32;
    template <int GR = kGridR, int SR = kSignR>  // table replication (GEMM stages fewer copies)
    static DF_DEV void row(const ImmaLane& l, const uint8_t* r, int m, uint32_t& lo, uint32_t& hi, int& slo, int& shi) {
        const uint32_t w = lds_u16(r + 8 * m + 2 * l.q), sc = r[64 + m];
        iq2_bytes(l.pos, rep<GR>(l.grid, w & 511u) | rep<SR>(l.sign, w >> 9), lo, hi);
        slo = 2 * static_cast<int>(sc & 15u) + 1;
        shi = 2 * static_cast<int>(sc >> 4) + 1;
    }
    DF_IMMA_IQ_SUB
    // The one-token form: only the lane's half's scale, the scale bytes a word at a time (rows
    // are 8-byte aligned in the window).
    static DF_DEV void row_half(const ImmaLane& l, const uint8_t* r, int m, uint32_t& lo, uint32_t& hi, int& s) {
        const uint32_t w = lds_u16(r + 8 * m + 2 * l.q), scw = lds_u32(r + 64 + 4 * (m >> 2));
        iq2_bytes(l.pos, rep<kGridR>(l.grid, w & 511u) | rep<kSignR>(l.sign, w >> 9), lo, hi);
        s = imma_half_scale(scw, l.q, m);
    }
    DF_IMMA_IQ_SUB_HALVES
};

template <>
struct Imma<Type::IQ2_S> : ImmaIqHead {
    static constexpr bool kSupported = true, kScale16 = true;
    static constexpr int kBody = 80, kCopy = 16, kStride = 80, kStages = 4;
    struct Tabs { uint32_t grid[1024 * 8]; uint32_t sign[256 * 16]; };
    static DF_DEV const uint32_t* grid_src(const ImmaTables* g) { return g->iq2s_sel; }
    static DF_DEV const uint32_t* sign_src(const ImmaTables* g) { return g->sign8; }
    static DF_DEV float unit_scale(const uint8_t*, const uint8_t* h, int u) { return head(h, u) * 0.125f; }
    static constexpr int kGridR = 8, kSignR = 16;
    template <int GR = kGridR, int SR = kSignR>  // table replication (GEMM stages fewer copies)
    static DF_DEV void row(const ImmaLane& l, const uint8_t* r, int m, uint32_t& lo, uint32_t& hi, int& slo, int& shi) {
        const uint32_t qh = r[64 + m], sc = r[72 + m];
        const uint32_t gi = r[4 * m + l.q] | ((qh << (8 - 2 * l.q)) & 0x300u);
        iq2_bytes(l.pos, rep<GR>(l.grid, gi) | rep<SR>(l.sign, r[32 + 4 * m + l.q]), lo, hi);
        slo = 2 * static_cast<int>(sc & 15u) + 1;
        shi = 2 * static_cast<int>(sc >> 4) + 1;
    }
    DF_IMMA_IQ_SUB
    // The one-token form (imma_iq_sub_halves) reads a row's bytes a word at a time (ptxas merges a
    // row's slabs into 16-byte loads: 5 instead of 32 byte loads a row and unit) and decodes
    // only the lane's half's scale.
    static DF_DEV void row_half(const ImmaLane& l, const uint8_t* r, int m, uint32_t& lo, uint32_t& hi, int& s) {
        const uint32_t qs = lds_u32(r + 4 * m), sg = lds_u32(r + 32 + 4 * m);
        const uint32_t qh = lds_u32(r + 64 + 4 * (m >> 2)) >> (8 * (m & 3)), scw = lds_u32(r + 72 + 4 * (m >> 2));
        const uint32_t gi = prmt(qs, 0u, l.byte_sel) | ((qh << (8 - 2 * l.q)) & 0x300u);  // bits 2q, 2q+1 of qh[m]
        iq2_bytes(l.pos, rep<kGridR>(l.grid, gi) | rep<kSignR>(l.sign, prmt(sg, 0u, l.byte_sel)), lo, hi);
        s = imma_half_scale(scw, l.q, m);
    }
    DF_IMMA_IQ_SUB_HALVES
};

template <>
struct Imma<Type::IQ3_XXS> : ImmaIqHead {
    static constexpr bool kSupported = true, kScale16 = false;
    static constexpr int kBody = 96, kCopy = 16, kStride = 112, kStages = 4;
    struct Tabs { uint32_t grid[256 * 32]; uint32_t sign[128 * 32]; };
    static DF_DEV const uint32_t* grid_src(const ImmaTables* g) { return g->iq3xxs; }
    static DF_DEV const uint32_t* sign_src(const ImmaTables* g) { return g->sign7_sel; }
    static DF_DEV float unit_scale(const uint8_t*, const uint8_t* h, int u) { return head(h, u) * 0.25f; }  // d (0.5 + s) / 2
    static constexpr int kGridR = 32, kSignR = 32;
    template <int GR = kGridR, int SR = kSignR>  // table replication (GEMM stages fewer copies)
    static DF_DEV void row(const ImmaLane& l, const uint8_t* r, int m, uint32_t& lo, uint32_t& hi, int& s) {
        const uint32_t gi = lds_u16(r + 8 * m + 2 * l.q), aux = lds_u32(r + 64 + 4 * m);
        const uint32_t sg = SR == 32 ? rep_sign7(l.sign0, l.lane4, aux, l.rot7) : rep<SR>(l.sign, (aux >> l.shift7) & 127u);
        lo = signed4(rep<GR>(l.grid, gi & 255u), sg);
        hi = signed4(rep<GR>(l.grid, gi >> 8), sg >> 16);
        s = 2 * static_cast<int>(aux >> 28) + 1;
    }
    DF_IMMA_IQ_SUB
};

template <>
struct Imma<Type::IQ3_S> : ImmaIqHead {
    static constexpr bool kSupported = true, kScale16 = false;
    static constexpr int kBody = 108, kCopy = 4, kStride = 112, kStages = 4;
    struct Tabs { uint32_t grid[512 * 16]; uint32_t sign[256 * 16]; };
    static DF_DEV const uint32_t* grid_src(const ImmaTables* g) { return g->iq3s; }
    static DF_DEV const uint32_t* sign_src(const ImmaTables* g) { return g->sign8_sel; }
    static DF_DEV float unit_scale(const uint8_t*, const uint8_t* h, int u) { return head(h, u); }  // d (1 + 2 s)
    static constexpr int kGridR = 16, kSignR = 16;
    template <int GR = kGridR, int SR = kSignR>  // table replication (GEMM stages fewer copies)
    static DF_DEV void row(const ImmaLane& l, const uint8_t* r, int m, uint32_t& lo, uint32_t& hi, int& s) {
        const uint32_t gi = lds_u16(r + 8 * m + 2 * l.q), qh = r[64 + m];
        const uint32_t i1 = (gi & 255u) | ((qh << (8 - 2 * l.q)) & 256u), i2 = (gi >> 8) | ((qh << (7 - 2 * l.q)) & 256u);
        const uint32_t sg = rep<SR>(l.sign, r[72 + 4 * m + l.q]);
        lo = signed4(rep<GR>(l.grid, i1), sg);
        hi = signed4(rep<GR>(l.grid, i2), sg >> 16);
        s = 1 + 2 * static_cast<int>((r[104 + m / 2] >> (4 * (m & 1))) & 15u);
    }
    DF_IMMA_IQ_SUB
};

#undef DF_IMMA_IQ_SUB
#undef DF_IMMA_IQ_SUB_HALVES

// Types with no split heads.
struct ImmaNoHead {
    static constexpr int kHead = 0;
    static DF_DEV size_t head_src(int) { return 0; }
};

// Q4_K and Q5_K: w = d sc q - dmin m per 32-element sub-block, with d, dmin and the 12 packed
// scale bytes at the start of the block; D::quants gives the unsigned quants of lane q (exact
// int8). The activation sums the mins multiply come from a second mma with all-ones weights.
template <class D>
struct ImmaKQuant : ImmaNoTabs, ImmaNoHead {
    static constexpr bool kSupported = true, kMins = true;
    static DF_DEV float unit_scale(const uint8_t* r, const uint8_t*, int) { return f16_bits_to_f32(lds_u16(r)); }
    static DF_DEV float unit_min(const uint8_t* r) { return f16_bits_to_f32(lds_u16(r + 2)); }
    static DF_DEV void row(const uint8_t* r, int m, int q, uint32_t& lo, uint32_t& hi, int& sc, int& mn) {
        D::quants(r, m, q, lo, hi);
        const uint4 h = *reinterpret_cast<const uint4*>(r);  // d, dmin, the 12 scale bytes
        uint32_t s, mm;
        scale_min_k4(h.y, h.z, h.w, m, s, mm);
        sc = static_cast<int>(s);
        mn = static_cast<int>(mm);
    }
    template <int NT>
    static DF_DEV void sub(const uint8_t* r0, const uint8_t* r1, const uint8_t*, const uint8_t*, int m,
                           const ImmaLane& l, const uint2 (&b)[NT], ImmaPartial<NT>& p) {
        uint32_t a[4];
        int s0, s1, m0, m1;
        row(r0, m, l.q, a[0], a[2], s0, m0);
        row(r1, m, l.q, a[1], a[3], s1, m1);
        const uint32_t ones[4] = {0x01010101u, 0x01010101u, 0x01010101u, 0x01010101u};
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            int c[4];
            mma_s8(c, a, b[nt]);
            imma_add_int(p, nt, c, s0, s1);
            mma_s8(c, ones, b[nt]);  // every row: the slab's activation sum of the column
            imma_add_min(p, nt, c, m0, m1);
        }
    }
};

// Q4_K: the quants are nibbles (low for even sub-blocks, high for odd).
template <>
struct Imma<Type::Q4_K> : ImmaKQuant<Imma<Type::Q4_K>> {
    static constexpr int kBody = 144, kCopy = 16, kStride = 160, kStages = 4;
    static DF_DEV void quants(const uint8_t* r, int m, int q, uint32_t& lo, uint32_t& hi) {
        const uint2 w = lds_u2(r + 16 + 32 * (m >> 1) + 8 * q);
        const int sh = 4 * (m & 1);
        lo = (w.x >> sh) & 0x0F0F0F0Fu;
        hi = (w.y >> sh) & 0x0F0F0F0Fu;
    }
};

// Q5_K: Q4_K with a fifth bit per element (bit m of qh[l] for sub-block m).
template <>
struct Imma<Type::Q5_K> : ImmaKQuant<Imma<Type::Q5_K>> {
    static constexpr int kBody = 176, kCopy = 16, kStride = 176, kStages = 4;
    static DF_DEV void quants(const uint8_t* r, int m, int q, uint32_t& lo, uint32_t& hi) {
        const uint2 w = lds_u2(r + 48 + 32 * (m >> 1) + 8 * q), h5 = lds_u2(r + 16 + 8 * q);
        const int sh = 4 * (m & 1);
        lo = ((w.x >> sh) & 0x0F0F0F0Fu) | (((h5.x >> m) & 0x01010101u) << 4);
        hi = ((w.y >> sh) & 0x0F0F0F0Fu) | (((h5.y >> m) & 0x01010101u) << 4);
    }
};

// Q2_K: w = d (sc & 15) q - dmin (sc >> 4) per 16 elements, q 2-bit. Halves of a slab have their
// own scale and min: values and all-ones mmas run once per half (the other half's activations
// zeroed).
template <>
struct Imma<Type::Q2_K> : ImmaNoTabs, ImmaNoHead {
    static constexpr bool kSupported = true, kMins = true;
    static constexpr int kBody = 84, kCopy = 4, kStride = 88, kStages = 4;  // 8-byte aligned rows
    static DF_DEV float unit_scale(const uint8_t* r, const uint8_t*, int) { return f16_bits_to_f32(lds_u16(r + 80)); }
    static DF_DEV float unit_min(const uint8_t* r) { return f16_bits_to_f32(lds_u16(r + 82)); }
    // The 2-bit quants of elements 8q .. 8q+7 of 32-element slab m, as bytes. The matvec stages
    // rows 4-byte aligned only (ImmaWindow), so it reads two words.
    template <bool kAligned8 = true>
    static DF_DEV void quants(const uint8_t* r, int m, int q, uint32_t& lo, uint32_t& hi) {
        const int sh = 2 * (m & 3);
        const uint8_t* p = r + 16 + 32 * (m >> 2) + 8 * q;
        const uint2 w = kAligned8 ? lds_u2(p) : make_uint2(lds_u32(p), lds_u32(p + 4));
        lo = (w.x >> sh) & 0x03030303u;
        hi = (w.y >> sh) & 0x03030303u;
    }
    template <int NT>
    static DF_DEV void sub(const uint8_t* r0, const uint8_t* r1, const uint8_t*, const uint8_t*, int m,
                           const ImmaLane& l, const uint2 (&b)[NT], ImmaPartial<NT>& p) {
        uint32_t a[4];
        quants<false>(r0, m, l.q, a[0], a[2]);
        quants<false>(r1, m, l.q, a[1], a[3]);
        const uint32_t ones[4] = {0x01010101u, 0x01010101u, 0x01010101u, 0x01010101u};
        const uint32_t s0 = lds_u16(r0 + 2 * m), s1 = lds_u16(r1 + 2 * m);  // scale bytes of the two halves
        const bool lo = l.q < 2;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            const uint2 z = make_uint2(0u, 0u);
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const uint2 bh = (hf == 0) == lo ? b[nt] : z;
                const int sc0 = static_cast<int>((s0 >> (8 * hf)) & 15u), sc1 = static_cast<int>((s1 >> (8 * hf)) & 15u);
                const int mn0 = static_cast<int>((s0 >> (8 * hf + 4)) & 15u), mn1 = static_cast<int>((s1 >> (8 * hf + 4)) & 15u);
                int c[4];
                mma_s8(c, a, bh);
                imma_add_int(p, nt, c, sc0, sc1);
                mma_s8(c, ones, bh);
                imma_add_min(p, nt, c, mn0, mn1);
            }
        }
    }
    // T = 1: each lane's half at once (imma_mma_half).
    static DF_DEV void sub_halves(const uint8_t* r0, const uint8_t* r1, const uint8_t*, const uint8_t*, int m,
                                  const ImmaLane& l, uint2 b, ImmaPartial<1>& p) {
        uint32_t a[4];
        quants<false>(r0, m, l.q, a[0], a[2]);
        quants<false>(r1, m, l.q, a[1], a[3]);
        const uint32_t ones[4] = {0x01010101u, 0x01010101u, 0x01010101u, 0x01010101u};
        const uint32_t sh = 8u * static_cast<uint32_t>(l.q >> 1);  // the lane's half's scale byte
        const uint32_t s0 = lds_u16(r0 + 2 * m) >> sh, s1 = lds_u16(r1 + 2 * m) >> sh;
        int c[4];
        mma_s8(c, a, b);
        imma_add_int(p, 0, c, static_cast<int>(s0 & 15u), static_cast<int>(s1 & 15u));
        mma_s8(c, ones, b);
        imma_add_min(p, 0, c, static_cast<int>((s0 >> 4) & 15u), static_cast<int>((s1 >> 4) & 15u));
    }
};

// Q6_K: w = d sc q, q = 6 bits (4 from ql, 2 from qh) minus 32, sc int8 per 16 elements.
template <>
struct Imma<Type::Q6_K> : ImmaNoTabs, ImmaIqHead {
    static constexpr bool kSupported = true;
    static constexpr int kBody = 208, kCopy = 16, kStride = 224, kStages = 3;  // 4 overflows smem when paired
    static DF_DEV float unit_scale(const uint8_t*, const uint8_t* h, int u) { return head(h, u); }
    // Elements 8q .. 8q+7 of sub-block m: 128-element half m / 4, quarter k = m % 4.
    static DF_DEV uint32_t quants(uint32_t ql, uint32_t qh, int k) {
        const uint32_t q6 = ((ql >> (4 * (k >> 1))) & 0x0F0F0F0Fu) | (((qh >> (2 * k)) & 0x03030303u) << 4);
        const uint32_t b = q6 ^ 0x20202020u;      // q - 32 in 6-bit two's complement
        return b | ((b & 0x20202020u) * 6u);      // sign-extended to 8 bits (no carries)
    }
    static DF_DEV void row(const uint8_t* r, int m, int q, uint32_t& lo, uint32_t& hi, int& slo, int& shi) {
        const int hf = m >> 2, k = m & 3;
        const uint2 ql = lds_u2(r + 64 * hf + 32 * (k & 1) + 8 * q), qh = lds_u2(r + 128 + 32 * hf + 8 * q);
        lo = quants(ql.x, qh.x, k);
        hi = quants(ql.y, qh.y, k);
        const uint32_t sc = lds_u16(r + 192 + 8 * hf + 2 * k);
        slo = static_cast<int8_t>(sc & 255u);
        shi = static_cast<int8_t>(sc >> 8);
    }
    template <int NT>
    static DF_DEV void sub(const uint8_t* r0, const uint8_t* r1, const uint8_t*, const uint8_t*, int m,
                           const ImmaLane& l, const uint2 (&b)[NT], ImmaPartial<NT>& p) {
        uint32_t a[4];
        int s[4];
        row(r0, m, l.q, a[0], a[2], s[0], s[1]);
        row(r1, m, l.q, a[1], a[3], s[2], s[3]);
        imma_mma_int16(a, b, l.q, s, p);
    }
    static DF_DEV void sub_halves(const uint8_t* r0, const uint8_t* r1, const uint8_t*, const uint8_t*, int m,
                                  const ImmaLane& l, uint2 b, ImmaPartial<1>& p) {
        uint32_t a[4];
        int s[4];
        row(r0, m, l.q, a[0], a[2], s[0], s[1]);
        row(r1, m, l.q, a[1], a[3], s[2], s[3]);
        imma_mma_half(a, b, l.q, s, p);
    }
};

// ---- the kernel --------------------------------------------------------------------------
//
// Stream-K: the (tile, unit) pairs of the matrix, tile-major, are cut into one contiguous range
// per warp of a fixed grid (kImmaBlocksPerSm blocks of kImmaWarps warps per SM, a function of
// the device only, so a token's sums never depend on T). A warp streams its range through its
// cp.async ring across tile boundaries. A tile covered by one warp is written directly;
// otherwise each contributor stores its partial sums (slot 0: the warp's first tile, slot 1: its last), and the last one to arrive
// (a per-tile counter) adds them in contributor order, so results are deterministic. A deferred
// launch (ImmaArgs::defer) stores its shares uncounted and leaves the sum to the next reader
// (imma_deferred.cuh), which loads the output anyway.


// How the matvec stages a row's unit. Bodies that are a multiple of 16 bytes are copied as they
// are (cp.async.cg, 16 bytes, L1 bypassed). Others (IQ2_XS 72, IQ3_S 108, Q2_K 84 bytes) would
// need 8- or 4-byte copies, which go through L1 (cp.async.ca) and evict the activations every
// warp reads from there, and cost 4.5-13.5 copies per lane and unit: they copy the 16-byte
// aligned window around the body instead, at most kChunks chunks (only those the body
// touches), and the decoder reads the row from the body's offset in the window. The stride is
// an odd number of chunks, so the 8 rows one load instruction reads fall in distinct banks.
template <class I>
struct ImmaWindow {
    static constexpr bool kOn = I::kBody % 16 != 0;
    static constexpr int kAlign = (I::kBody & -I::kBody) < 16 ? (I::kBody & -I::kBody) : 16;  // of body offsets
    static constexpr int kChunks = (16 - kAlign + I::kBody + 15) / 16;
    static constexpr int kCopy = kOn ? 16 : I::kCopy;
    static constexpr int kPerRow = kOn ? kChunks : I::kBody / I::kCopy;
    static constexpr int kStride = kOn ? 16 * (kChunks | 1) : I::kStride;
    static DF_DEV uint32_t offset(int u) { return kOn ? (static_cast<uint32_t>(u) * I::kBody) & 15u : 0u; }
    static DF_DEV size_t start(int u) { return static_cast<size_t>(u) * I::kBody - offset(u); }
};

template <class I, int kMats>
constexpr int imma_stage_bytes() { return kMats * (16 * ImmaWindow<I>::kStride + 16 * I::kHead); }
template <class I>
constexpr int imma_tabs_bytes() { return (static_cast<int>(sizeof(typename I::Tabs)) + 15) / 16 * 16; }
// Ring stages: the decoder's own, at most kImmaMaxStages[kMats - 1], or fewer where the grid's
// blocks would not fit an SM's shared memory (228 KB, 1 KB of it reserved per block); the
// stream-K split assumes them all resident. Shared memory and L1 share 256 KB per SM, and L1 is
// where every warp finds the activations (B fragments, read per unit): 3 stages instead of 4
// (paired gate/up 177 instead of 220 KB, singles 112 instead of 134 KB) made the 27B's decode
// 8 % faster (session 20), 8 stages 3 % slower (session 19).
#ifndef DF_IMMA_MAX_STAGES_SINGLE  // build-time knobs for A/B builds (bench/experiments)
#define DF_IMMA_MAX_STAGES_SINGLE 3
#endif
#ifndef DF_IMMA_MAX_STAGES_PAIR
#define DF_IMMA_MAX_STAGES_PAIR 3
#endif
inline constexpr int kImmaMaxStages[2] = {DF_IMMA_MAX_STAGES_SINGLE, DF_IMMA_MAX_STAGES_PAIR};
template <class I, int kMats>
constexpr int imma_stages() {
    auto fits = [](int s) {
        return kImmaBlocksPerSm * (imma_tabs_bytes<I>() + kImmaWarps * s * imma_stage_bytes<I, kMats>() + 1024) <= 228 * 1024;
    };
    for (int s = std::min(I::kStages, kImmaMaxStages[kMats - 1]); s >= 2; --s)
        if (fits(s)) return s;
    return 1;  // no overlap of copies and math (paired Q8_0 and Q6_K with 16 warps, both off by default)
}
template <class I, int kMats>
constexpr int imma_smem_bytes() { return imma_tabs_bytes<I>() + kImmaWarps * imma_stages<I, kMats>() * imma_stage_bytes<I, kMats>(); }

// Floats of one warp's partial sums (per slot), and of the whole scratch for `warps` warps.
template <int NT, int kMats>
constexpr int imma_partial_floats() { return kMats * NT * 4 * 32; }
inline size_t imma_scratch_floats(int warps) { return static_cast<size_t>(warps) * 2 * imma_partial_floats<4, 2>(); }
static_assert(ImmaDeferred::kSlotFloats == imma_partial_floats<4, 2>() && ImmaDeferred::kSlotFloats >= 2 * 8 * 16,
              "a deferred slot is one scratch slot");

// Warp w owns units [start(w), start(w + 1)); with warps <= units no range is empty, so the
// owners of a tile are consecutive warps. units * warps < 2^32 (checked by the launcher).
struct ImmaSplit {
    uint32_t units;  // (tile, unit) pairs
    uint32_t warps;  // min(warps of the grid, units)
    DF_DEV uint32_t start(uint32_t w) const { return w * units / warps; }
    DF_DEV uint32_t warp_of(uint32_t x) const { return ((x + 1) * warps - 1) / units; }
};

// Recombines the limbs of a tile's sums v and writes the outputs (lane q holds columns 2q, 2q+1:
// limbs 0,1 (q even) or 2,3 (q odd) of token 2nt + q/2, rows g and g + 8).
template <int NT, int kMats>
DF_DEV void imma_write(const ImmaArgs& a, int tile, int lane, const float (&v)[kMats][NT][4]) {
    const int g = lane >> 2, q = lane & 3, rows = a.w.rows;
    const bool odd = q & 1;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        const int tok = 2 * nt + (q >> 1);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float y[kMats];
#pragma unroll
            for (int mt = 0; mt < kMats; ++mt) {
                const float c0 = v[mt][nt][2 * h], c1 = v[mt][nt][2 * h + 1];
                const float part = odd ? fmaf(16777216.f, c1, 65536.f * c0) : fmaf(256.f, c1, c0);
                const float other = __shfl_xor_sync(0xffffffffu, part, 1);
                y[mt] = odd ? other + part : part + other;
            }
            const int row = tile * 16 + g + 8 * h;
            if (odd || tok >= a.T || row >= rows) continue;
            float* o = a.out + static_cast<size_t>(tok) * rows + row;
            if constexpr (kMats == 2)
                *o = silu_f(y[0]) * y[1];
            else
                *o = a.accumulate ? *o + y[0] : y[0];
        }
    }
}

// A deferred launch's share of a tile (ImmaArgs::defer): its limbs recombined as imma_write
// does, stored in ImmaDeferred's layout for the conversion after it; no count, no fence.
template <int NT, int kMats>
DF_DEV void imma_store_deferred(const ImmaArgs& a, int slot, uint32_t w, int lane, const float (&v)[kMats][NT][4]) {
    const int g = lane >> 2, q = lane & 3;
    const bool odd = q & 1;
    float* mine = a.partial + (static_cast<size_t>(w) * 2 + slot) * ImmaDeferred::kSlotFloats;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        const int tok = 2 * nt + (q >> 1);
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int mt = 0; mt < kMats; ++mt) {
                const float c0 = v[mt][nt][2 * h], c1 = v[mt][nt][2 * h + 1];
                const float part = odd ? fmaf(16777216.f, c1, 65536.f * c0) : fmaf(256.f, c1, c0);
                const float other = __shfl_xor_sync(0xffffffffu, part, 1);
                if (!odd && tok < a.T) __stcg(mine + (8 * mt + tok) * 16 + g + 8 * h, part + other);
            }
    }
}

// A warp's sums for one tile: written directly when the warp covered the whole tile, else
// through the partial-sum slots (the last contributor adds them up in contributor order).
template <int NT, int kMats>
DF_DEV void imma_finish(const ImmaArgs& a, const ImmaSplit& split, int tile, bool whole, int slot, uint32_t w, int lane,
                        const float (&acc)[kMats][NT][4]) {
    if (whole) {
        imma_write<NT, kMats>(a, tile, lane, acc);
        return;
    }
    if (a.defer) {
        imma_store_deferred<NT, kMats>(a, slot, w, lane, acc);
        return;
    }
    constexpr int kP = imma_partial_floats<NT, kMats>();
    float* mine = a.partial + (static_cast<size_t>(w) * 2 + slot) * kP;
#pragma unroll
    for (int mt = 0; mt < kMats; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int j = 0; j < 4; ++j) __stcg(mine + ((mt * NT + nt) * 4 + j) * 32 + lane, acc[mt][nt][j]);
    // The partial sums before the count: the warp's barrier orders its lanes' stores before lane
    // 0's release atomic. A fence in every lane (as before) also acquires, which invalidates the
    // SM's L1 (CCTL.IVALL) with every warp's cached activations; only the last contributor needs
    // the acquire (27B decode +1.2 %, session 24).
    __syncwarp();
    // The tile's contributors are the owners of its units; the first may have begun earlier.
    const uint32_t upt = static_cast<uint32_t>(a.w.cols / kImmaUnit);
    const uint32_t first = static_cast<uint32_t>(tile) * upt;
    const uint32_t c0 = split.warp_of(first), c1 = split.warp_of(first + upt - 1);
    unsigned prev = 0;
    if (lane == 0) prev = atomic_add_release_gpu(a.counters + tile, 1u);
    prev = __shfl_sync(0xffffffffu, prev, 0);
    if (prev != c1 - c0) return;
    fence_acq_rel_gpu();  // acquire: the other contributors' partial sums after their counts
    float v[kMats][NT][4];
#pragma unroll
    for (int mt = 0; mt < kMats; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int j = 0; j < 4; ++j) v[mt][nt][j] = 0.f;
    for (uint32_t c = c0; c <= c1; ++c) {
        const int cslot = c == c0 && split.start(c0) < first ? 1 : 0;  // slot 0: c's first tile
        const float* pc = a.partial + (static_cast<size_t>(c) * 2 + cslot) * kP;
#pragma unroll
        for (int mt = 0; mt < kMats; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int j = 0; j < 4; ++j) v[mt][nt][j] += __ldcg(pc + ((mt * NT + nt) * 4 + j) * 32 + lane);
    }
    if (lane == 0) a.counters[tile] = 0u;  // ready for the next call on this stream
    imma_write<NT, kMats>(a, tile, lane, v);
}

// The kernel's work as block `block` of a grid of `blocks` (imma_kernel's whole grid, or one part
// of a two-matrix launch: imma_two.cuh).
template <Type TY, int NT, bool kPair, bool kOne = false>
DF_DEV void imma_body(const ImmaArgs& a, uint32_t block, uint32_t blocks) {
    using I = Imma<TY>;
    // A one-token launch (kOne: T = 1) of a decoder with 16-column scales: one mma a slab
    // (imma_mma_half).
    constexpr bool kHalves = kOne && NT == 1 && imma_halves<I>();
    constexpr int kMats = kPair ? 2 : 1, S = imma_stages<I, kMats>(), kStage = imma_stage_bytes<I, kMats>();
    using Win = ImmaWindow<I>;
    constexpr int kStride = Win::kStride, kMatStage = 16 * kStride + 16 * I::kHead;
    constexpr int kPerRow = Win::kPerRow, kCopies = (16 * kPerRow + 31) / 32;
    extern __shared__ __align__(16) uint8_t smem[];
    auto& tabs = *reinterpret_cast<typename I::Tabs*>(smem);
    pdl_trigger();  // pdl_wait() comes after the tables and the first weight stages are issued
    imma_load_tabs<I>(tabs, a.itables);
    cp_async_commit();

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int rows = a.w.rows, upt = a.w.cols / kImmaUnit, slabs = a.w.cols / 32, tiles = (rows + 15) / 16;
    const uint32_t units = static_cast<uint32_t>(tiles) * upt;
    const ImmaSplit split{units, min(blocks * kImmaWarps, units)};
    const uint32_t w = block * kImmaWarps + warp;
    const uint32_t x0 = w < split.warps ? split.start(w) : units;
    const int cnt = w < split.warps ? static_cast<int>(split.start(w + 1) - x0) : 0;
    uint8_t* const ring = smem + imma_tabs_bytes<I>() + warp * S * kStage;
    const size_t row_stride = a.w.row_stride;

    // Issue cursor: copies unit i of the range into ring slot i % S (issue_slot); always commits a group
    // (maybe empty), so "all but the newest S - 1 groups are done" means "unit i has landed".
    // The lane's copy sources are set once per tile (rows clamped to the matrix) and offset by
    // the unit.
    const int first_tile = static_cast<int>(x0 / upt), first_unit = static_cast<int>(x0 - static_cast<uint32_t>(first_tile) * upt);
    int it = first_tile, iu = first_unit;
    uint32_t dst_off[kCopies];
    uint32_t chunk_lo[kCopies];  // the copy's first byte in the window (Win::kOn)
    const uint8_t* src[kMats][kCopies];
    const uint8_t* hsrc[kMats];
    auto aim = [&](int tile) {
#pragma unroll
        for (int mt = 0; mt < kMats; ++mt) {
            const uint8_t* mat = mt ? a.up : a.w.data;
#pragma unroll
            for (int k = 0; k < kCopies; ++k) {
                const int c = lane + 32 * k, r = min(c / kPerRow, 15);
                src[mt][k] = mat + static_cast<size_t>(min(tile * 16 + r, rows - 1)) * row_stride + (c % kPerRow) * Win::kCopy;
            }
            hsrc[mt] = mat + static_cast<size_t>(min(tile * 16 + (lane & 15), rows - 1)) * row_stride + a.w.head_off;
        }
    };
#pragma unroll
    for (int k = 0; k < kCopies; ++k) {
        const int c = lane + 32 * k;
        dst_off[k] = c < 16 * kPerRow ? (c / kPerRow) * kStride + (c % kPerRow) * Win::kCopy : ~0u;
        chunk_lo[k] = (c % kPerRow) * Win::kCopy;
    }
    aim(it);
    const uint32_t ring_addr = smem_addr(ring);
    // Ring slot offsets of the next unit to issue and to use, i % S stages kept by increments
    // (a % 3 costs a multiply-high, a shift and a multiply-add per use).
    uint32_t issue_slot = 0, use_slot = 0;
    auto next_slot = [](uint32_t& slot) { slot = slot == (S - 1) * kStage ? 0u : slot + kStage; };
    auto issue = [&](int i) {
        if (i < cnt) {
            const size_t uoff = Win::start(iu);
            const uint32_t wend = Win::offset(iu) + I::kBody;  // the window's chunks past it stay uncopied
#pragma unroll
            for (int mt = 0; mt < kMats; ++mt) {
                const uint32_t dst = ring_addr + issue_slot + mt * kMatStage;
#pragma unroll
                for (int k = 0; k < kCopies; ++k)
                    if (dst_off[k] != ~0u && (!Win::kOn || chunk_lo[k] < wend))
                        cp_async<Win::kCopy>(dst + dst_off[k], src[mt][k] + uoff);
                if constexpr (I::kHead > 0)
                    if (lane < 16) cp_async<I::kHead>(dst + 16 * kStride + lane * I::kHead, hsrc[mt] + I::head_src(iu));
            }
            if (++iu == upt) {
                iu = 0;
                aim(++it);
            }
        }
        cp_async_commit();
        next_slot(issue_slot);
    };
#pragma unroll
    for (int i = 0; i < S - 1; ++i) issue(i);
    cp_async_wait<S - 1>();  // the tables (the oldest group)
    __syncthreads();

    const ImmaLane ln = imma_lane<I::kGridR, I::kSignR>(smem_addr(tabs.grid), smem_addr(tabs.sign), lane);

    float acc[kMats][NT][4];
    auto clear = [&] {
#pragma unroll
        for (int mt = 0; mt < kMats; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[mt][nt][j] = 0.f;
    };
    clear();
    int ct = first_tile, cu = first_unit;
    bool seg_whole = first_unit == 0;  // the current tile segment started at the tile's unit 0

    // The B fragment of lane l holds token 2 nt + l / 16; columns of tokens >= T hold stale
    // limbs and their sums are never written. At T = 1 lanes 16-31 load lanes 0-15's words (the
    // same sectors in one instruction: no L2 traffic for them), so the loads need no predicate
    // and share one address (a predicated load re-derived its address each time: 3 instructions).
    // The exponents likewise: a token past T reads token T - 1's.
    const int b_lane = NT == 1 && a.T == 1 ? lane & 15 : lane;
    // kHalves: lanes 0-15 keep the first 16 columns of a slab (q < 2), lanes 16-31 the last 16.
    const uint32_t half_mask = (lane >> 4) == (q >> 1) ? ~0u : 0u;
    auto load_b_all = [&](int u, uint2 (&b)[8][NT], float (&e)[NT]) {
        const uint2* xq = a.xq + static_cast<size_t>(u) * 8 * 32 + b_lane;  // slab 8u
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int m = 0; m < 8; ++m) {
                b[m][nt] = __ldg(xq + (static_cast<size_t>(nt) * slabs + m) * 32);
                if constexpr (kHalves) b[m][nt] = make_uint2(b[m][nt].x & half_mask, b[m][nt].y & half_mask);
            }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) e[nt] = __ldg(a.xe + static_cast<size_t>(min(2 * nt + (q >> 1), a.T - 1)) * upt + u);
    };
    pdl_wait();  // activations, counters, partial sums and outputs from here

    for (int i = 0; i < cnt; ++i) {
        issue(i + S - 1);
        // The unit's activations (B fragments, exponents), requested before the wait for its
        // weights: L1/L2 hits whose latency passes while the first slabs are decoded (loading
        // them a unit ahead cost 16 moves and 16 registers; prefetching the next unit's lines
        // into L1 lost 0.8 %: the first mma's wait for them is L1 queueing, not misses).
        uint2 b[8][NT];
        float e[NT];
        load_b_all(cu, b, e);
        cp_async_wait<S - 1>();
        __syncwarp();
#pragma unroll
        for (int mt = 0; mt < kMats; ++mt) {
            const uint8_t* sb = ring + use_slot + mt * kMatStage;
            const uint8_t *r0 = sb + g * kStride + Win::offset(cu), *r1 = sb + (g + 8) * kStride + Win::offset(cu);
            const uint8_t *h0 = sb + 16 * kStride + g * I::kHead, *h1 = sb + 16 * kStride + (g + 8) * I::kHead;
            ImmaPartial<NT> p;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    p.i[nt][j] = 0;
                    p.mn[nt][j] = 0;
                    p.f[nt][j] = 0.f;
                }
            if constexpr (kHalves) {
#pragma unroll
                for (int m = 0; m < kImmaUnit / 32; ++m) I::sub_halves(r0, r1, h0, h1, m, ln, b[m][0], p);
#pragma unroll
                for (int j = 0; j < 4; ++j) {  // the two halves' sums, exact (lanes q ^ 2 hold token 1's: unused)
                    p.i[0][j] += __shfl_xor_sync(~0u, p.i[0][j], 2);
                    if constexpr (decoder_has_mins<I>()) p.mn[0][j] += __shfl_xor_sync(~0u, p.mn[0][j], 2);
                }
            } else {
#pragma unroll
                for (int m = 0; m < kImmaUnit / 32; ++m) I::template sub<NT>(r0, r1, h0, h1, m, ln, b[m], p);
            }
            const float us0 = I::unit_scale(r0, h0, cu), us1 = I::unit_scale(r1, h1, cu);
            if constexpr (decoder_has_mins<I>()) {
                const float um0 = I::unit_min(r0), um1 = I::unit_min(r1);
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        const float us = j < 2 ? us0 : us1, um = j < 2 ? um0 : um1;
                        const float v = fmaf(us, static_cast<float>(p.i[nt][j]), -(um * static_cast<float>(p.mn[nt][j])));
                        acc[mt][nt][j] = fmaf(e[nt], v, acc[mt][nt][j]);
                    }
            } else {
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    acc[mt][nt][0] = fmaf(e[nt], fmaf(us0, static_cast<float>(p.i[nt][0]), p.f[nt][0]), acc[mt][nt][0]);
                    acc[mt][nt][1] = fmaf(e[nt], fmaf(us0, static_cast<float>(p.i[nt][1]), p.f[nt][1]), acc[mt][nt][1]);
                    acc[mt][nt][2] = fmaf(e[nt], fmaf(us1, static_cast<float>(p.i[nt][2]), p.f[nt][2]), acc[mt][nt][2]);
                    acc[mt][nt][3] = fmaf(e[nt], fmaf(us1, static_cast<float>(p.i[nt][3]), p.f[nt][3]), acc[mt][nt][3]);
                }
            }
        }
        __syncwarp();  // the slot is refilled by the next issue
        next_slot(use_slot);
        if (cu == upt - 1 || i == cnt - 1) {
            imma_finish<NT, kMats>(a, split, ct, seg_whole && cu == upt - 1, ct == first_tile ? 0 : 1, w, lane, acc);
            clear();
            seg_whole = true;
        }
        if (++cu == upt) {
            cu = 0;
            ++ct;
        }
    }
    cp_async_wait<0>();
    trace_block_end();
}

template <Type TY, int NT, bool kPair, bool kOne>
__global__ void __launch_bounds__(kImmaThreads, kImmaBlocksPerSm) imma_kernel(const ImmaArgs a) {
    imma_body<TY, NT, kPair, kOne>(a, blockIdx.x, gridDim.x);
}

template <Type TY, int NT, bool kPair, bool kOne>
void imma_launch_kernel(const ImmaArgs& a, cudaStream_t s) {
    constexpr int smem = imma_smem_bytes<Imma<TY>, kPair ? 2 : 1>();
    static_assert(smem <= 227 * 1024, "imma: the block's shared memory exceeds the sm_90 limit");
    static bool attr_set = false;  // ops are issued from one thread
    if (!attr_set) {
        DF_CUDA_CHECK(cudaFuncSetAttribute(imma_kernel<TY, NT, kPair, kOne>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        attr_set = true;
    }
    launch(imma_kernel<TY, NT, kPair, kOne>, a.blocks, kImmaThreads, smem, s, a);
}

template <Type TY, int NT, bool kOne = false>
void imma_launch_nt(const ImmaArgs& a, cudaStream_t s) {
    if (a.up)
        imma_launch_kernel<TY, NT, true, kOne>(a, s);
    else
        imma_launch_kernel<TY, NT, false, kOne>(a, s);
}

template <Type TY>
void imma_launch(const ImmaArgs& a, cudaStream_t s) {
    DF_CUDA_REQUIRE(a.T >= 1 && a.T <= 8, "imma matvec: T must be in 1..8");
    DF_CUDA_REQUIRE(a.w.cols % kImmaUnit == 0, "imma matvec: cols must be a multiple of 256");
    DF_CUDA_REQUIRE(!a.up || !a.accumulate, "imma matvec: fused gate/up does not accumulate");
    DF_CUDA_REQUIRE(a.blocks >= 1 && a.partial && a.counters, "imma matvec: no grid or scratch");
    if (a.T == 1 && imma_halves<Imma<TY>>())  // imma_two.cuh maps T the same way
        imma_launch_nt<TY, 1, true>(a, s);
    else if (a.T <= 2)
        imma_launch_nt<TY, 1>(a, s);
    else if (a.T <= 4)
        imma_launch_nt<TY, 2>(a, s);
    else
        imma_launch_nt<TY, 4>(a, s);
}

template <Type TY>
constexpr auto imma_entry() -> void (*)(const ImmaArgs&, cudaStream_t) {
    if constexpr (Imma<TY>::kSupported)
        return imma_launch<TY>;
    else
        return nullptr;
}

}  // namespace df::cuda
