// Prefill GEMM (T > 8) on exact f16 weights, for block types with an integer decoder (imma.cuh).
//
// Weights: a decoder gives lane q of a warp the 8 weights 8q .. 8q+7 of a 32-column slab of rows
// g and g + 8 as signed bytes with an integer sub-block scale s; every q s is an integer of
// magnitude < 2048 (the bound is checked per type below), so it is exact in f16. The float that
// remains (the block scale d times a constant) multiplies the slab's f32 sums: one FMA per
// accumulator per slab. Activations (launch_gemm_act): per token, x 2^k = hi + lo in f16 (~2^-22
// relative, 2^k puts the token's largest |x| in [2^14, 2^15)), so a slab's sums are two
// m16n8k16 products per 16 columns with exact products in f32 accumulators (DESIGN.md, numerics).
//
// K order: lane q's A registers hold weights 8q .. 8q+3 (k16 step 0) and 8q+4 .. 8q+7 (step 1),
// which the mma reads as columns {2q, 2q+1, 2q+8, 2q+9}; B is read in the same permuted order,
// which makes lane (g, q)'s B the 16 contiguous bytes of token g's halves 8q .. 8q+7: one LDS.128
// per n8 tile, step and half (a sum does not care about order).
//
// Block: 4 warps (2 x 2) over 128 rows x 128 tokens, warp tile 64 x 64 (2 blocks per SM: the
// registers bound it; 64 x 32 warp tiles with 3 blocks per SM measured 10-25 % slower); K steps
// of one slab.
// Weights are staged one decoder unit at a time (256 columns, Q8_0 64) in a ring of unit slots,
// activations in a ring of kQgStages slabs, all by cp.async. Small grids split K over
// blockIdx.z; the partial sums are added in a fixed order (launch_gemm_reduce): deterministic.
#pragma once

#include <cuda_fp16.h>

#include <type_traits>

#include "backend/cuda/check.h"
#include "backend/cuda/imma.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mma.cuh"

namespace df::cuda {

inline constexpr int kQgThreads = 128, kQgBM = kQGemmTileRows, kQgBN = kQGemmTileTokens, kQgStages = 4;
inline constexpr int kQgNJ = kQgBN / 16;             // n8 tiles per warp
inline constexpr int kQgSlabBytes = kQgBN * 128;     // tokens x 32 columns x (hi, lo) halves
static_assert(kQgBM == 128 && kQgBN == 128, "2 x 2 warps of 64 x 64");

// (v, v) as f16 for 0 <= v < 1024: 0x6400 | v is 1024 + v, less 1024 exactly.
DF_DEV __half2 f16_pair_of_small_int(int v) {
    const uint32_t b = 0x64006400u | (static_cast<uint32_t>(v) * 0x00010001u);
    return __hsub2(*reinterpret_cast<const __half2*>(&b), __float2half2_rn(1024.f));
}
DF_DEV uint32_t f16_bits(__half2 h) { return *reinterpret_cast<const uint32_t*>(&h); }

// Four signed bytes times s as f16 pairs, exactly: 0x64XX is 1024 + XX in f16, so with
// u = b + 128 one FMA gives (1024 + u) s - 1152 s = b s (exact for |b s| < 2048; 1152 s is
// exact in f16 for s < 57, and the FMA rounds once).
DF_DEV void s8x4_to_f16(uint32_t w, __half2 s, __half2 c, uint32_t& h01, uint32_t& h23) {
    const uint32_t u = w ^ 0x80808080u;
    const uint32_t a = prmt(u, 0x64646464u, 0x5140u), b = prmt(u, 0x64646464u, 0x7362u);
    h01 = f16_bits(__hfma2(*reinterpret_cast<const __half2*>(&a), s, c));
    h23 = f16_bits(__hfma2(*reinterpret_cast<const __half2*>(&b), s, c));
}
// 8 bytes (weights 8q .. 8q+7) times the integer scale s as 4 f16 pairs: one FMA per pair for
// 0 <= s < 57; kWide (any s with |b s| < 2048, the K-quants' 6-bit scales) subtracts first
// (exact: b itself) and then multiplies (exact: the product fits).
template <bool kWide = false>
DF_DEV void s8x8_to_f16(uint32_t lo, uint32_t hi, int s, uint32_t (&h)[4]) {
    const __half2 s2 = f16_pair_of_small_int(s);
    if constexpr (kWide) {
        const __half2 one = __float2half2_rn(1.f), c2 = __float2half2_rn(-1152.f);
        s8x4_to_f16(lo, one, c2, h[0], h[1]);
        s8x4_to_f16(hi, one, c2, h[2], h[3]);
#pragma unroll
        for (int i = 0; i < 4; ++i) h[i] = f16_bits(__hmul2(*reinterpret_cast<const __half2*>(&h[i]), s2));
    } else {
        const __half2 c2 = __hmul2(s2, __float2half2_rn(-1152.f));
        s8x4_to_f16(lo, s2, c2, h[0], h[1]);
        s8x4_to_f16(hi, s2, c2, h[2], h[3]);
    }
}

// ---- decoders: GemmQ<T> gives, for a unit of kUnitCols columns of a row staged in shared memory
//   kBody, kCopy, kStride, kHead, head_src(u)  as Imma<T> (what is staged and how);
//   Tabs, load_tabs()                          its tables (4 copies: decoding is amortized over
//                                              128 tokens, so fewer copies than the matvec's);
//   slab(l, r, m, h)                           lane q's 8 weights of slab m as f16 pairs (times
//                                              the integer scale);
//   scale(r, hd, u, m)                         the float multiplying slab m's sums;
//   types with mins (kMins, w = d sc q - dmin m): slab() also gives the lane's min m as an f16
//   pair, whose products with the activations (a second set of mma) dmin_scale() multiplies.

template <Type T>
struct GemmQ {
    static constexpr bool kSupported = false;
};

// Decoders without lookup tables.
struct GemmQNoTabs {
    struct Tabs {
        uint32_t none[4];
    };
    static DF_DEV void load_tabs(Tabs&, const ImmaTables*) {}
    static DF_DEV ImmaLane lane(const Tabs&, int lane) { return imma_lane<1, 1>(0u, 0u, lane); }
};

inline constexpr int kQgTabR = 4;

// Copies `entries` table entries of R_src copies each, keeping the first R (2 or 4: 8 or 16 bytes).
template <int R_src, int R = kQgTabR>
DF_DEV void copy_table_rep(uint32_t* dst, const uint32_t* src, int entries) {
    static_assert(R_src >= R && R_src % R == 0 && (R == 2 || R == 4));
    for (int i = threadIdx.x; i < entries; i += blockDim.x) cp_async<4 * R>(dst + R * i, src + R_src * i);
}

// The weights d q s as f16 hi + lo from the exact integers q s (f16 pairs qf) and the f16 scale d
// (bits d16): q s has at most 11 significant bits and d 11, so d q s is a multiple of d's last bit
// (>= 2^-24) with at most 22; hi = d q s rounded and lo = d q s - hi (one FMA) are exact, as is
// hi + lo = d q s, unless |d q s| > 65504 (the caller folds the scales of such weights instead).
DF_DEV void scale_hi_lo(const uint32_t (&qf)[4], uint32_t d16, uint32_t (&hi)[4], uint32_t (&lo)[4]) {
    const __half2 d2 = __half2half2(__ushort_as_half(static_cast<unsigned short>(d16)));
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const __half2 q2 = *reinterpret_cast<const __half2*>(&qf[k]);
        const __half2 h = __hmul2(q2, d2);
        hi[k] = f16_bits(h);
        lo[k] = f16_bits(__hfma2(q2, d2, __hneg2(h)));
    }
}

// The IQ types; R copies of each table entry (the wgmma GEMM's 256-token form keeps 2 to fit two
// blocks per SM).
template <Type T, int R = kQgTabR>
struct GemmQIq {
    using I = Imma<T>;
    static constexpr bool kSupported = true;
    static constexpr int kUnitCols = 256, kBody = I::kBody, kCopy = I::kCopy, kStride = I::kStride, kHead = I::kHead;
    static constexpr int kGridN = sizeof(I::Tabs::grid) / 4 / I::kGridR;
    static constexpr int kSignN = sizeof(I::Tabs::sign) / 4 / I::kSignR;
    struct Tabs {
        uint32_t grid[kGridN * R];
        uint32_t sign[kSignN * R];
    };
    static DF_DEV void load_tabs(Tabs& t, const ImmaTables* g) {
        copy_table_rep<I::kGridR, R>(t.grid, I::grid_src(g), kGridN);
        copy_table_rep<I::kSignR, R>(t.sign, I::sign_src(g), kSignN);
    }
    static DF_DEV ImmaLane lane(const Tabs& t, int lane) { return imma_lane<R, R>(smem_addr(t.grid), smem_addr(t.sign), lane); }
    static DF_DEV size_t head_src(int u) { return I::head_src(u); }
    static DF_DEV void slab(const ImmaLane& l, const uint8_t* r, int m, uint32_t (&h)[4]) {
        uint32_t lo, hi;
        int s;
        if constexpr (I::kScale16) {
            int slo, shi;
            I::template row<R, R>(l, r, m, lo, hi, slo, shi);
            s = l.q < 2 ? slo : shi;  // lanes 0, 1 hold the slab's first 16 weights
        } else {
            I::template row<R, R>(l, r, m, lo, hi, s);
        }
        s8x8_to_f16(lo, hi, s, h);
    }
    static DF_DEV float scale(const uint8_t* r, const uint8_t* hd, int u, int) { return I::unit_scale(r, hd, u); }
    // The scales in the weights (gemm_wg.cuh's kInA): d q s as hi + lo, and the power of two
    // that unit_scale adds to d, applied to the results.
    static constexpr bool kScaleInA = true;
    static constexpr uint16_t kWideScaleBits = 0x5000;  // |d| >= 32 may overflow: |q s| < 2048
    static constexpr float kInAFactor = T == Type::IQ3_XXS ? 0.25f : T == Type::IQ3_S ? 1.f : 0.125f;
    static DF_DEV void slab_hl(const ImmaLane& l, const uint8_t* r, const uint8_t* hd, int u, int m, uint32_t (&hi)[4],
                               uint32_t (&lo)[4]) {
        uint32_t qf[4];
        slab(l, r, m, qf);
        scale_hi_lo(qf, lds_u16(hd + 2 * (u & 1)), hi, lo);
    }
};

// |q s| < 2048: IQ2 magnitudes <= 43 and IQ3 <= 62 (IQ3_S <= 15), odd scales 2 l + 1 <= 31.
template <> struct GemmQ<Type::IQ2_XXS> : GemmQIq<Type::IQ2_XXS> {};
template <> struct GemmQ<Type::IQ2_XS> : GemmQIq<Type::IQ2_XS> {};
template <> struct GemmQ<Type::IQ2_S> : GemmQIq<Type::IQ2_S> {};
template <> struct GemmQ<Type::IQ3_XXS> : GemmQIq<Type::IQ3_XXS> {};
template <> struct GemmQ<Type::IQ3_S> : GemmQIq<Type::IQ3_S> {};

// Q8_0: units of two blocks (64 columns); rows staged 96 bytes apart (the 4 rows of a half-warp's
// 8-byte loads then fall in distinct banks); the two f16 scales (4 bytes) from the head array.
template <>
struct GemmQ<Type::Q8_0> : GemmQNoTabs {
    static constexpr bool kSupported = true;
    static constexpr int kUnitCols = 64, kBody = 64, kCopy = 16, kStride = 96, kHead = 4;
    static DF_DEV size_t head_src(int u) { return 4 * static_cast<size_t>(u); }
    static DF_DEV void slab(const ImmaLane& l, const uint8_t* r, int m, uint32_t (&h)[4]) {
        const uint2 w = lds_u2(r + 32 * m + 8 * l.q);
        s8x8_to_f16(w.x, w.y, 1, h);
    }
    static DF_DEV float scale(const uint8_t*, const uint8_t* hd, int, int m) { return f16_bits_to_f32(lds_u16(hd + 2 * m)); }
    // The weights d q as f16 pairs hi + lo (the wgmma GEMM's form without a per-slab fold; exact
    // unless |d| >= 512, whose weights fold instead): scale_hi_lo.
    static constexpr bool kScaleInA = true;
    static constexpr uint16_t kWideScaleBits = 0x6000;  // |d| >= 512 may overflow: |q| <= 128
    static constexpr float kInAFactor = 1.f;
    static DF_DEV void slab_hl(const ImmaLane& l, const uint8_t* r, const uint8_t* hd, int, int m, uint32_t (&hi)[4],
                               uint32_t (&lo)[4]) {
        uint32_t qf[4];
        slab(l, r, m, qf);
        scale_hi_lo(qf, lds_u16(hd + 2 * m), hi, lo);
    }
};

// The decoder of the wgmma GEMM's form with the scales in the weights (gemm_wg.cuh's kInA): the
// IQ types with two table copies, Q8_0 as it is.
template <Type T>
using GemmQInA = std::conditional_t<requires { GemmQ<T>::kInAFactor; } && (T != Type::Q8_0), GemmQIq<T, 2>, GemmQ<T>>;

// K-quants with mins, units of one 256-element block staged whole (kHead 0). sc q <= 63 * 31,
// m <= 63: exact in f16.
template <Type T>
struct GemmQKBase : GemmQNoTabs {
    using I = Imma<T>;
    static constexpr bool kSupported = true, kMins = true;
    static constexpr int kUnitCols = 256, kBody = I::kBody, kCopy = I::kCopy, kStride = I::kStride, kHead = 0;
    static DF_DEV size_t head_src(int) { return 0; }
    static DF_DEV float scale(const uint8_t* r, const uint8_t*, int, int) { return I::unit_scale(r, nullptr, 0); }
    static DF_DEV float dmin_scale(const uint8_t* r) { return I::unit_min(r); }
};
// Q4_K, Q5_K: 32-element sub-blocks = slabs; quants unsigned (0..15 / 0..31), exact as int8.
template <Type T>
struct GemmQK32 : GemmQKBase<T> {
    using I = Imma<T>;
    static DF_DEV void slab(const ImmaLane& l, const uint8_t* r, int m, uint32_t (&h)[4], uint32_t& mn) {
        uint32_t lo, hi;
        int sc, mi;
        I::row(r, m, l.q, lo, hi, sc, mi);
        s8x8_to_f16<true>(lo, hi, sc, h);
        mn = f16_bits(f16_pair_of_small_int(mi));
    }
};
template <> struct GemmQ<Type::Q4_K> : GemmQK32<Type::Q4_K> {};
template <> struct GemmQ<Type::Q5_K> : GemmQK32<Type::Q5_K> {};
// Q2_K: 16-element sub-blocks, a scale byte each (scale low nibble, min high); lanes 0, 1 hold the
// slab's first 16 weights. q <= 3, so sc q <= 45.
template <>
struct GemmQ<Type::Q2_K> : GemmQKBase<Type::Q2_K> {
    static DF_DEV void slab(const ImmaLane& l, const uint8_t* r, int m, uint32_t (&h)[4], uint32_t& mn) {
        uint32_t lo, hi;
        I::quants(r, m, l.q, lo, hi);
        const uint32_t sb = r[2 * m + (l.q >> 1)];
        s8x8_to_f16(lo, hi, static_cast<int>(sb & 15u), h);
        mn = f16_bits(f16_pair_of_small_int(static_cast<int>(sb >> 4)));
    }
};

template <class G>
constexpr int qg_slabs_per_unit() { return G::kUnitCols / 32; }
// Unit slots: enough that the unit being filled kQgStages - 1 slabs ahead never overwrites one
// still read.
template <class G>
constexpr int qg_unit_slots() { return (kQgStages - 2 + qg_slabs_per_unit<G>()) / qg_slabs_per_unit<G>() + 1; }
template <class G>
constexpr int qg_unit_bytes() { return kQgBM * (G::kStride + G::kHead); }
template <class G>
constexpr int qg_tabs_bytes() { return (static_cast<int>(sizeof(typename G::Tabs)) + 15) / 16 * 16; }
template <class G>
constexpr int qg_smem_bytes() { return qg_tabs_bytes<G>() + qg_unit_slots<G>() * qg_unit_bytes<G>() + kQgStages * kQgSlabBytes; }

// Split-K: the units [u0, u1) of a `units`-unit row that block z of `splits` sums (both GEMM
// kernels; launch_gemm_reduce adds the splits' partial sums in z order).
struct QgUnitRange {
    int u0, u1;
};
DF_DEV QgUnitRange qg_unit_range(int units, int z, int splits) {
    return {static_cast<int>(static_cast<int64_t>(z) * units / splits),
            static_cast<int>((static_cast<int64_t>(z) + 1) * units / splits)};
}

// c += s (a0 (bh, bl) k16 step 0 + a1 (bh, bl) step 1) for one 16-row x 8-token tile of a slab:
// the hi and lo products in one f32 accumulator, then the slab's scale (rows g: s[0], g + 8: s[1]).
DF_DEV void slab_product(float (&c)[4], const uint32_t (&a0)[4], const uint32_t (&a1)[4], uint4 bh, uint4 bl,
                         const float (&s)[2]) {
    float t[4];
    mma_f16_first(t, a0, bh.x, bh.y);
    mma_f16(t, a0, bl.x, bl.y);
    mma_f16(t, a1, bh.z, bh.w);
    mma_f16(t, a1, bl.z, bl.w);
#pragma unroll
    for (int e = 0; e < 4; ++e) c[e] = fmaf(t[e], s[e >> 1], c[e]);
}

template <Type TY>
__global__ void __launch_bounds__(kQgThreads, kQGemmBlocksPerSm) qgemm_kernel(const QGemmArgs a) {
    using G = GemmQ<TY>;
    constexpr int S = kQgStages, SPU = qg_slabs_per_unit<G>(), US = qg_unit_slots<G>(), UB = qg_unit_bytes<G>();
    constexpr int BN = kQgBN, NJ = kQgNJ, kSlabBytes = kQgSlabBytes;
    constexpr int kPerRow = G::kBody / G::kCopy;
    extern __shared__ __align__(16) uint8_t smem[];
    auto& tabs = *reinterpret_cast<typename G::Tabs*>(smem);
    uint8_t* const units_smem = smem + qg_tabs_bytes<G>();
    uint8_t* const slabs_smem = units_smem + US * UB;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, q = lane & 3;
    const int rows = a.w.rows, T = a.T;
    const int m0 = blockIdx.x * kQgBM, n0 = blockIdx.y * BN;
    // This block's K range in units (split-K), as local slab indices 0 .. nk-1.
    const QgUnitRange ur = qg_unit_range(a.w.cols / G::kUnitCols, blockIdx.z, a.splits);
    const int u0 = ur.u0, nk = (ur.u1 - ur.u0) * SPU;

    pdl_trigger();
    G::load_tabs(tabs, a.itables);
    // Copy roles, fixed per thread so a step issues its copies with no index math: thread t
    // copies row t of every unit (kBody bytes, then its head) and, of every slab, chunk t % 8 of
    // tokens t / 8 + 16 k (k < BN / 16); tokens past T are zero-filled.
    static_assert(kQgBM == kQgThreads, "a thread per staged row");
    const uint8_t* const a_src = a.w.data + static_cast<size_t>(min(m0 + tid, rows - 1)) * a.w.row_stride;
    const int b_ch = tid & 7, b_n = tid >> 3;
    const size_t tok_halves = 2 * static_cast<size_t>(a.w.cols);
    const uint16_t* const b_src = a.xhl + static_cast<size_t>(n0 + b_n) * tok_halves + b_ch * 8;
    const int b_dst = b_n * 128 + ((b_ch ^ ((b_n & 1) << 2)) << 4);
    auto issue_unit = [&](int lu) {  // local unit lu into slot lu % US (weights: before pdl_wait too)
        const int u = u0 + lu;
        uint8_t* dst = units_smem + (lu % US) * UB;
        const uint8_t* src = a_src + static_cast<size_t>(u) * G::kBody;
#pragma unroll
        for (int j = 0; j < kPerRow; ++j) cp_async<G::kCopy>(dst + tid * G::kStride + j * G::kCopy, src + j * G::kCopy);
        if constexpr (G::kHead > 0)
            cp_async<G::kHead>(dst + kQgBM * G::kStride + tid * G::kHead, a_src + a.w.head_off + G::head_src(u));
    };
    // Slab i's activations into stage i % S (and the unit starting there); always commits a group,
    // so "all but the newest S - 2 groups are done" means "slab i has landed".
    auto issue = [&](int i) {
        if (i < nk) {
            if (i > 0 && i % SPU == 0) issue_unit(i / SPU);
            uint8_t* dst = slabs_smem + (i % S) * kSlabBytes + b_dst;
            const uint16_t* src = b_src + (static_cast<size_t>(u0) * SPU + i) * 64;  // halves: 32 hi + 32 lo per slab
#pragma unroll
            for (int k = 0; k < BN / 16; ++k) {
                const bool ok = n0 + b_n + 16 * k < T;
                cp_async16_or_zero(dst + k * 16 * 128, ok ? src + k * 16 * tok_halves : a.xhl, ok);
            }
        }
        cp_async_commit();
    };
    issue_unit(0);
    cp_async_commit();  // tables and the first unit
    pdl_wait();         // activations, partial sums and outputs from here
#pragma unroll
    for (int i = 0; i < S - 1; ++i) issue(i);

    const ImmaLane ln = G::lane(tabs, lane);
    const int wm = (warp & 1) * 64, wn = (warp >> 1) * 8 * NJ;
    float acc[4][NJ][4];
#pragma unroll
    for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int nj = 0; nj < NJ; ++nj)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mi][nj][e] = 0.f;
    const int swz = (g & 1) << 2;  // tokens wn + 8 nj + g: odd ones have their halves swapped

    for (int i = 0; i < nk; ++i) {
        cp_async_wait<S - 2>();
        __syncthreads();  // slab i visible to all; slab i - 1's stage and unit are free
        issue(i + S - 1);
        const int lu = i / SPU, m = i % SPU;
        const uint8_t* us = units_smem + (lu % US) * UB;
        const uint8_t* hs = us + kQgBM * G::kStride;
        const uint8_t* bs = slabs_smem + (i % S) * kSlabBytes;
        constexpr bool kMins = decoder_has_mins<G>();
        uint32_t af[4][2][4];
        float sc[4][2];
        uint32_t am[4][4];  // kMins: the rows' min pairs as an A fragment (same at both k16 steps)
        float sm[4][2];
#pragma unroll
        for (int mi = 0; mi < 4; ++mi) {
            const int r0 = wm + 16 * mi + g, r1 = r0 + 8;
            uint32_t h0[4], h1[4];
            if constexpr (kMins) {
                uint32_t m0, m1;
                G::slab(ln, us + r0 * G::kStride, m, h0, m0);
                G::slab(ln, us + r1 * G::kStride, m, h1, m1);
                am[mi][0] = m0; am[mi][1] = m1; am[mi][2] = m0; am[mi][3] = m1;
                sm[mi][0] = -G::dmin_scale(us + r0 * G::kStride);
                sm[mi][1] = -G::dmin_scale(us + r1 * G::kStride);
            } else {
                G::slab(ln, us + r0 * G::kStride, m, h0);
                G::slab(ln, us + r1 * G::kStride, m, h1);
            }
            af[mi][0][0] = h0[0]; af[mi][0][1] = h1[0]; af[mi][0][2] = h0[1]; af[mi][0][3] = h1[1];
            af[mi][1][0] = h0[2]; af[mi][1][1] = h1[2]; af[mi][1][2] = h0[3]; af[mi][1][3] = h1[3];
            sc[mi][0] = G::scale(us + r0 * G::kStride, hs + r0 * G::kHead, u0 + lu, m);
            sc[mi][1] = G::scale(us + r1 * G::kStride, hs + r1 * G::kHead, u0 + lu, m);
        }
#pragma unroll
        for (int nj = 0; nj < NJ; ++nj) {
            const uint8_t* bt = bs + (wn + 8 * nj + g) * 128;
            const uint4 bh = lds_u4(bt + ((q ^ swz) << 4)), bl = lds_u4(bt + (((4 + q) ^ swz) << 4));
#pragma unroll
            for (int mi = 0; mi < 4; ++mi) {
                slab_product(acc[mi][nj], af[mi][0], af[mi][1], bh, bl, sc[mi]);
                if constexpr (kMins) slab_product(acc[mi][nj], am[mi], am[mi], bh, bl, sm[mi]);  // - dmin sum_k m(k) x_k
            }
        }
    }
    cp_async_wait<0>();

    // c0, c1: row g, tokens 2q, 2q + 1; c2, c3: row g + 8. Split-K writes its partial sums.
    float* const dst = a.splits > 1 ? a.partial + static_cast<size_t>(blockIdx.z) * T * rows : a.out;
    const bool add = a.splits == 1 && a.accumulate;
#pragma unroll
    for (int nj = 0; nj < NJ; ++nj)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int t = n0 + wn + 8 * nj + 2 * q + h;
            if (t >= T) continue;
            const float inv = __ldg(a.xinv + t);
#pragma unroll
            for (int mi = 0; mi < 4; ++mi)
#pragma unroll
                for (int v = 0; v < 2; ++v) {
                    const int r = m0 + wm + 16 * mi + g + 8 * v;
                    if (r >= rows) continue;
                    float* o = dst + static_cast<size_t>(t) * rows + r;
                    const float y = acc[mi][nj][2 * v + h] * inv;
                    *o = add ? *o + y : y;
                }
        }
}

// A qgemm's arguments against the kernels' contract.
template <Type TY>
void qgemm_check(const QGemmArgs& a) {
    DF_CUDA_REQUIRE(a.T > 0 && a.w.cols % GemmQ<TY>::kUnitCols == 0, "qgemm: cols must be a multiple of the unit");
    DF_CUDA_REQUIRE(a.splits >= 1 && a.splits <= a.w.cols / GemmQ<TY>::kUnitCols && (a.splits == 1 || a.partial),
                    "qgemm: bad split");
}

// Checks a qgemm's arguments, raises the kernel's shared-memory limit on first use and launches
// it over blocks of bm rows x bn tokens (x splits).
template <Type TY, auto kKernel>
void qgemm_start(const QGemmArgs& a, int smem, int bm, int bn, int threads, cudaStream_t s) {
    qgemm_check<TY>(a);
    static bool attr_set = false;  // ops are issued from one thread
    if (!attr_set) {
        DF_CUDA_CHECK(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        attr_set = true;
    }
    const dim3 grid((a.w.rows + bm - 1) / bm, (a.T + bn - 1) / bn, a.splits);
    launch(kKernel, grid, threads, smem, s, a);
}

template <Type TY>
void qgemm_launch(const QGemmArgs& a, cudaStream_t s) {
    constexpr int smem = qg_smem_bytes<GemmQ<TY>>();
    static_assert(kQGemmBlocksPerSm * (smem + 1024) <= 228 * 1024, "qgemm: the blocks per SM must fit");
    DF_CUDA_REQUIRE(!a.wg_order, "qgemm: activations in the wgmma order (gemm_wg.cuh)");
    qgemm_start<TY, qgemm_kernel<TY>>(a, smem, kQgBM, kQgBN, kQgThreads, s);
}

}  // namespace df::cuda
