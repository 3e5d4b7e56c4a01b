// Device decoders of the native block types: one specialisation of Quant<T> per type.
//
// A row is consumed in "units" of kUnit elements (one lane's share of work at a time). Each type
// gives
//   Raw  load(body, head, u)          the bytes of unit u of a row, in registers (global loads);
//   float group(raw, g, w[8], tables) elements 8g .. 8g+7 of the unit: w[j] * returned scale is
//                                     the weight exactly as ggml dequantizes it (the scale is
//                                     kept apart so a dot product applies it once per 8).
// `body`/`head` point at the row's block bodies and split heads (layout.h). g must be a
// compile-time constant after unrolling (callers loop with #pragma unroll), so the register
// arrays in Raw are never indexed at run time.
// The expressions follow ggml's to_float order (e.g. (d*sc)*q, d1*q - m1 unfused) so that
// w[j] * scale equals the scalar reference bit for bit.
#pragma once

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/layout.h"
#include "backend/cuda/tables.h"
#include "quant/types.h"

namespace df::cuda {

template <quant::Type T>
struct Quant;

// Lookup tables a decoder reads (Quant<T>::kTables); kernels stage exactly these into shared
// memory first: gathers with random indices from shared memory cost a few bank conflicts, from
// L1 they saturated the load pipe (one wavefront per distinct line).
enum TableBits : unsigned {
    kTabIq2xxs = 1, kTabIq2xs = 2, kTabIq2s = 4, kTabIq3xxs = 8, kTabIq3s = 16, kTabIq4 = 32,
};
template <class Q>
constexpr unsigned tables_of() {
    if constexpr (requires { Q::kTables; }) return Q::kTables;
    else return 0u;
}

using quant::Type;

// Checks a specialisation against the type table and the host layout.
template <Type T>
constexpr bool quant_consistent() {
    using Q = Quant<T>;
    const auto& ti = quant::type_info(T);
    return Q::kHead == block_split(T).head && Q::kBody == static_cast<int>(ti.block_bytes) - Q::kHead &&
           Q::kBlock == static_cast<int>(ti.block_elems) && Q::kUnit % 8 == 0 &&
           (Q::kBlock % Q::kUnit == 0 || Q::kBlock == 1);
}

// ---- float types: 8 elements per unit ---------------------------------------------------------

template <>
struct Quant<Type::F32> {
    static constexpr int kBlock = 1, kUnit = 8, kHead = 0, kBody = 4;
    struct Raw { uint4 a, b; };
    static DF_DEV Raw load(const uint8_t* body, const uint8_t*, int u) {
        const uint8_t* p = body + static_cast<size_t>(u) * 32;
        return {ld_stream16(p), ld_stream16(p + 16)};
    }
    static DF_DEV float group(const Raw& r, int, float (&w)[8], const GridTables*) {
        w[0] = __uint_as_float(r.a.x); w[1] = __uint_as_float(r.a.y);
        w[2] = __uint_as_float(r.a.z); w[3] = __uint_as_float(r.a.w);
        w[4] = __uint_as_float(r.b.x); w[5] = __uint_as_float(r.b.y);
        w[6] = __uint_as_float(r.b.z); w[7] = __uint_as_float(r.b.w);
        return 1.f;
    }
};

template <>
struct Quant<Type::F16> {
    static constexpr int kBlock = 1, kUnit = 8, kHead = 0, kBody = 2;
    struct Raw { uint32_t v[4]; };
    static DF_DEV Raw load(const uint8_t* body, const uint8_t*, int u) {
        const uint4 a = ld_stream16(body + static_cast<size_t>(u) * 16);
        return {{a.x, a.y, a.z, a.w}};
    }
    static DF_DEV float group(const Raw& r, int, float (&w)[8], const GridTables*) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            w[2 * i] = f16_bits_to_f32(r.v[i]);
            w[2 * i + 1] = f16_bits_to_f32(r.v[i] >> 16);
        }
        return 1.f;
    }
};

template <>
struct Quant<Type::BF16> {
    static constexpr int kBlock = 1, kUnit = 8, kHead = 0, kBody = 2;
    struct Raw { uint32_t v[4]; };
    static DF_DEV Raw load(const uint8_t* body, const uint8_t*, int u) {
        const uint4 a = ld_stream16(body + static_cast<size_t>(u) * 16);
        return {{a.x, a.y, a.z, a.w}};
    }
    static DF_DEV float group(const Raw& r, int, float (&w)[8], const GridTables*) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            w[2 * i] = __uint_as_float(r.v[i] << 16);
            w[2 * i + 1] = __uint_as_float(r.v[i] & 0xFFFF0000u);
        }
        return 1.f;
    }
};

// ---- legacy 32-element blocks: low nibbles are elements 0..15, high nibbles 16..31 ----------

// Words (2 per group) and nibble shift of group g of a 16-byte nibble array.
DF_DEV int nib_word(int g) { return (g & 1) * 2; }
DF_DEV int nib_shift(int g) { return (g >> 1) * 4; }

template <>
struct Quant<Type::Q4_0> {
    static constexpr int kBlock = 32, kUnit = 32, kHead = 2, kBody = 16;
    struct Raw { uint32_t q[4]; float d; };
    static DF_DEV Raw load(const uint8_t* body, const uint8_t* head, int u) {
        const uint4 v = ld_stream16(body + static_cast<size_t>(u) * 16);
        return {{v.x, v.y, v.z, v.w}, f16_bits_to_f32(ldg_u16(head + 2 * static_cast<size_t>(u)))};
    }
    static DF_DEV float group(const Raw& r, int g, float (&w)[8], const GridTables*) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const uint32_t x = (r.q[nib_word(g) + i] >> nib_shift(g)) & 0x0F0F0F0Fu;
#pragma unroll
            for (int k = 0; k < 4; ++k) w[4 * i + k] = byte_to_f32(x, k, 8.f);
        }
        return r.d;
    }
};

template <>
struct Quant<Type::Q4_1> {
    static constexpr int kBlock = 32, kUnit = 32, kHead = 0, kBody = 20;
    struct Raw { uint32_t q[4]; float d, m; };
    static DF_DEV Raw load(const uint8_t* body, const uint8_t*, int u) {
        const uint8_t* p = body + static_cast<size_t>(u) * 20;
        const uint32_t dm = ldg_u32(p);
        return {{ld_stream4(p + 4), ld_stream4(p + 8), ld_stream4(p + 12), ld_stream4(p + 16)},
                f16_bits_to_f32(dm), f16_bits_to_f32(dm >> 16)};
    }
    static DF_DEV float group(const Raw& r, int g, float (&w)[8], const GridTables*) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const uint32_t x = (r.q[nib_word(g) + i] >> nib_shift(g)) & 0x0F0F0F0Fu;
#pragma unroll
            for (int k = 0; k < 4; ++k) w[4 * i + k] = __fadd_rn(__fmul_rn(byte_to_f32(x, k), r.d), r.m);
        }
        return 1.f;
    }
};

template <>
struct Quant<Type::Q5_0> {
    static constexpr int kBlock = 32, kUnit = 32, kHead = 2, kBody = 20;
    struct Raw { uint32_t qh, q[4]; float d; };
    static DF_DEV Raw load(const uint8_t* body, const uint8_t* head, int u) {
        const uint8_t* p = body + static_cast<size_t>(u) * 20;
        return {ld_stream4(p), {ld_stream4(p + 4), ld_stream4(p + 8), ld_stream4(p + 12), ld_stream4(p + 16)},
                f16_bits_to_f32(ldg_u16(head + 2 * static_cast<size_t>(u)))};
    }
    static DF_DEV float group(const Raw& r, int g, float (&w)[8], const GridTables*) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const uint32_t x = ((r.q[nib_word(g) + i] >> nib_shift(g)) & 0x0F0F0F0Fu) |
                               (spread4(r.qh >> (8 * g + 4 * i)) << 4);
#pragma unroll
            for (int k = 0; k < 4; ++k) w[4 * i + k] = byte_to_f32(x, k, 16.f);
        }
        return r.d;
    }
};

template <>
struct Quant<Type::Q5_1> {
    static constexpr int kBlock = 32, kUnit = 32, kHead = 0, kBody = 24;
    struct Raw { uint32_t qh, q[4]; float d, m; };
    static DF_DEV Raw load(const uint8_t* body, const uint8_t*, int u) {
        const uint8_t* p = body + static_cast<size_t>(u) * 24;
        const uint32_t dm = ldg_u32(p);
        return {ld_stream4(p + 4),
                {ld_stream4(p + 8), ld_stream4(p + 12), ld_stream4(p + 16), ld_stream4(p + 20)},
                f16_bits_to_f32(dm), f16_bits_to_f32(dm >> 16)};
    }
    static DF_DEV float group(const Raw& r, int g, float (&w)[8], const GridTables*) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const uint32_t x = ((r.q[nib_word(g) + i] >> nib_shift(g)) & 0x0F0F0F0Fu) |
                               (spread4(r.qh >> (8 * g + 4 * i)) << 4);
#pragma unroll
            for (int k = 0; k < 4; ++k) w[4 * i + k] = __fadd_rn(__fmul_rn(byte_to_f32(x, k), r.d), r.m);
        }
        return 1.f;
    }
};

// Q8_0: a unit is half a block (16 quants), so two units in flight cost 10 registers each.
template <>
struct Quant<Type::Q8_0> {
    static constexpr int kBlock = 32, kUnit = 16, kHead = 2, kBody = 32;
    struct Raw { uint32_t q[4]; float d; };
    static DF_DEV Raw load(const uint8_t* body, const uint8_t* head, int u) {
        const uint4 a = ld_stream16(body + static_cast<size_t>(u) * 16);
        return {{a.x, a.y, a.z, a.w}, f16_bits_to_f32(ldg_u16(head + 2 * static_cast<size_t>(u >> 1)))};
    }
    static DF_DEV float group(const Raw& r, int g, float (&w)[8], const GridTables*) {
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int k = 0; k < 4; ++k) w[4 * i + k] = sbyte_to_f32(r.q[2 * g + i], k);
        return r.d;
    }
};

// ---- K-quants (256-element super-blocks) ------------------------------------------------------

// Byte k (run-time index 0..11) of a 12-byte array held in three words.
DF_DEV uint32_t byte12(uint32_t s0, uint32_t s1, uint32_t s2, int k) {
    const uint32_t w = k < 4 ? s0 : (k < 8 ? s1 : s2);
    return byte_of(w, k & 3);
}

// Q2_K: a unit is one 128-element half (32 qs bytes, 2 bits per element, 8 scale bytes).
template <>
struct Quant<Type::Q2_K> {
    static constexpr int kBlock = 256, kUnit = 128, kHead = 0, kBody = 84;
    struct Raw { uint32_t q[8], sc[2]; float d, dmin; };
    static DF_DEV Raw load(const uint8_t* body, const uint8_t*, int u) {
        const uint8_t* p = body + static_cast<size_t>(u >> 1) * 84;
        const int n = u & 1;
        Raw r;
#pragma unroll
        for (int i = 0; i < 8; ++i) r.q[i] = ld_stream4(p + 16 + 32 * n + 4 * i);
        r.sc[0] = ldg_u32(p + 8 * n);
        r.sc[1] = ldg_u32(p + 8 * n + 4);
        const uint32_t dd = ldg_u32(p + 80);
        r.d = f16_bits_to_f32(dd);
        r.dmin = f16_bits_to_f32(dd >> 16);
        return r;
    }
    static DF_DEV float group(const Raw& r, int g, float (&w)[8], const GridTables*) {
        const int o = 8 * g, j = o >> 5, k = (o >> 4) & 1, wi = (16 * k + (o & 15)) / 4, si = 2 * j + k;
        const uint32_t sc = byte_of(r.sc[si >> 2], si & 3);
        const float dl = r.d * static_cast<float>(sc & 15), ml = r.dmin * static_cast<float>(sc >> 4);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const uint32_t x = (r.q[wi + i] >> (2 * j)) & 0x03030303u;
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) w[4 * i + kk] = __fsub_rn(__fmul_rn(dl, byte_to_f32(x, kk)), ml);
        }
        return 1.f;
    }
};

// Q3_K (head = d at the block's end): a unit is one 128-element half.
template <>
struct Quant<Type::Q3_K> {
    static constexpr int kBlock = 256, kUnit = 128, kHead = 2, kBody = 108;
    struct Raw { uint32_t q[8], hm[8], s[3]; int n; float d; };
    static DF_DEV Raw load(const uint8_t* body, const uint8_t* head, int u) {
        const size_t b = static_cast<size_t>(u >> 1);
        const uint8_t* p = body + b * 108;
        Raw r;
        r.n = u & 1;
#pragma unroll
        for (int i = 0; i < 8; ++i) r.q[i] = ld_stream4(p + 32 + 32 * r.n + 4 * i);
#pragma unroll
        for (int i = 0; i < 8; ++i) r.hm[i] = ldg_u32(p + 4 * i);
#pragma unroll
        for (int i = 0; i < 3; ++i) r.s[i] = ldg_u32(p + 96 + 4 * i);
        r.d = f16_bits_to_f32(ldg_u16(head + 2 * b));
        return r;
    }
    static DF_DEV float group(const Raw& r, int g, float (&w)[8], const GridTables*) {
        const int o = 8 * g, j = o >> 5, k = (o >> 4) & 1, wi = (16 * k + (o & 15)) / 4;
        const int sl = 2 * j + k;  // scale index within the half; the scale is is = 8n + sl
        const uint32_t b = byte_of(r.s[sl >> 2], sl & 3);
        const uint32_t low4 = r.n == 0 ? (b & 15) : (b >> 4);
        const uint32_t hi2 = (byte_of(r.s[2], sl & 3) >> (2 * (2 * r.n + (sl >> 2)))) & 3;
        const float dl = r.d * static_cast<float>(static_cast<int>(low4 | (hi2 << 4)) - 32);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const uint32_t x = ((r.q[wi + i] >> (2 * j)) & 0x03030303u) |
                               (((r.hm[wi + i] >> (4 * r.n + j)) & 0x01010101u) << 2);
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) w[4 * i + kk] = byte_to_f32(x, kk, 4.f);
        }
        return dl;
    }
};

// Scale and min of sub-block j (run-time 0..7) of Q4_K/Q5_K from the 12 packed bytes.
DF_DEV void scale_min_k4(uint32_t s0, uint32_t s1, uint32_t s2, int j, uint32_t& sc, uint32_t& m) {
    if (j < 4) {
        sc = byte12(s0, s1, s2, j) & 63;
        m = byte12(s0, s1, s2, j + 4) & 63;
    } else {
        sc = (byte12(s0, s1, s2, j + 4) & 15) | ((byte12(s0, s1, s2, j - 4) >> 6) << 4);
        m = (byte12(s0, s1, s2, j + 4) >> 4) | ((byte12(s0, s1, s2, j) >> 6) << 4);
    }
}

// Q4_K: a unit is one 64-element chunk (32 qs bytes; low nibbles then high nibbles).
template <>
struct Quant<Type::Q4_K> {
    static constexpr int kBlock = 256, kUnit = 64, kHead = 0, kBody = 144;
    struct Raw { uint32_t q[8]; float d1[2], m1[2]; };
    static DF_DEV Raw load(const uint8_t* body, const uint8_t*, int u) {
        const uint8_t* p = body + static_cast<size_t>(u >> 2) * 144;
        const int c = u & 3;
        const uint4 a = ld_stream16(p + 16 + 32 * c), b = ld_stream16(p + 32 + 32 * c);
        const uint4 h = ldg_u128(p);
        const float d = f16_bits_to_f32(h.x), dmin = f16_bits_to_f32(h.x >> 16);
        Raw r{{a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w}, {}, {}};
#pragma unroll
        for (int s = 0; s < 2; ++s) {
            uint32_t sc, m;
            scale_min_k4(h.y, h.z, h.w, 2 * c + s, sc, m);
            r.d1[s] = d * static_cast<float>(sc);
            r.m1[s] = dmin * static_cast<float>(m);
        }
        return r;
    }
    static DF_DEV float group(const Raw& r, int g, float (&w)[8], const GridTables*) {
        const int s = g >> 2, wi = 2 * (g & 3);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const uint32_t x = (r.q[wi + i] >> (4 * s)) & 0x0F0F0F0Fu;
#pragma unroll
            for (int k = 0; k < 4; ++k) w[4 * i + k] = __fsub_rn(__fmul_rn(r.d1[s], byte_to_f32(x, k)), r.m1[s]);
        }
        return 1.f;
    }
};

// Q5_K: as Q4_K plus a fifth bit per element from qh (bit 2c for the low half, 2c+1 high).
template <>
struct Quant<Type::Q5_K> {
    static constexpr int kBlock = 256, kUnit = 64, kHead = 0, kBody = 176;
    struct Raw { uint32_t q[8], qh[8]; int c; float d1[2], m1[2]; };
    static DF_DEV Raw load(const uint8_t* body, const uint8_t*, int u) {
        const uint8_t* p = body + static_cast<size_t>(u >> 2) * 176;
        const int c = u & 3;
        const uint4 a = ld_stream16(p + 48 + 32 * c), b = ld_stream16(p + 64 + 32 * c);
        const uint4 h = ldg_u128(p), qa = ldg_u128(p + 16), qb = ldg_u128(p + 32);
        const float d = f16_bits_to_f32(h.x), dmin = f16_bits_to_f32(h.x >> 16);
        Raw r{{a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w}, {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w}, c, {}, {}};
#pragma unroll
        for (int s = 0; s < 2; ++s) {
            uint32_t sc, m;
            scale_min_k4(h.y, h.z, h.w, 2 * c + s, sc, m);
            r.d1[s] = d * static_cast<float>(sc);
            r.m1[s] = dmin * static_cast<float>(m);
        }
        return r;
    }
    static DF_DEV float group(const Raw& r, int g, float (&w)[8], const GridTables*) {
        const int s = g >> 2, wi = 2 * (g & 3);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const uint32_t x = ((r.q[wi + i] >> (4 * s)) & 0x0F0F0F0Fu) |
                               (((r.qh[wi + i] >> (2 * r.c + s)) & 0x01010101u) << 4);
#pragma unroll
            for (int k = 0; k < 4; ++k) w[4 * i + k] = __fsub_rn(__fmul_rn(r.d1[s], byte_to_f32(x, k)), r.m1[s]);
        }
        return 1.f;
    }
};

// Q6_K (head = d at the block's end): a unit is one 128-element half.
template <>
struct Quant<Type::Q6_K> {
    static constexpr int kBlock = 256, kUnit = 128, kHead = 2, kBody = 208;
    struct Raw { uint32_t ql[16], qh[8], sc[2]; float d; };
    static DF_DEV Raw load(const uint8_t* body, const uint8_t* head, int u) {
        const size_t b = static_cast<size_t>(u >> 1);
        const int n = u & 1;
        const uint8_t* p = body + b * 208;
        Raw r;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const uint4 v = ld_stream16(p + 64 * n + 16 * i);
            r.ql[4 * i] = v.x; r.ql[4 * i + 1] = v.y; r.ql[4 * i + 2] = v.z; r.ql[4 * i + 3] = v.w;
        }
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const uint4 v = ld_stream16(p + 128 + 32 * n + 16 * i);
            r.qh[4 * i] = v.x; r.qh[4 * i + 1] = v.y; r.qh[4 * i + 2] = v.z; r.qh[4 * i + 3] = v.w;
        }
        const uint2 s = ldg_u64(p + 192 + 8 * n);
        r.sc[0] = s.x;
        r.sc[1] = s.y;
        r.d = f16_bits_to_f32(ldg_u16(head + 2 * b));
        return r;
    }
    static DF_DEV float group(const Raw& r, int g, float (&w)[8], const GridTables*) {
        const int o = 8 * g, qq = o >> 5, l0 = o & 31;
        const int lw = ((qq & 1) * 32 + l0) / 4, ns = (qq >> 1) * 4, hw = l0 / 4, si = l0 / 16 + 2 * qq;
        const int sc = static_cast<int8_t>(byte_of(r.sc[si >> 2], si & 3));
        const float dl = r.d * static_cast<float>(sc);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const uint32_t x = ((r.ql[lw + i] >> ns) & 0x0F0F0F0Fu) | (((r.qh[hw + i] >> (2 * qq)) & 0x03030303u) << 4);
#pragma unroll
            for (int k = 0; k < 4; ++k) w[4 * i + k] = byte_to_f32(x, k, 32.f);
        }
        return dl;
    }
};

// ---- IQ types: 8 grid magnitudes per lookup, signs from ksigns or explicit bytes ------------

// Signs applied in the integer domain, 4 elements per word: with m = 0xFF in the bytes of
// negative elements, (g ^ m ^ 0x80) + (m & 1) is 128 - g or 128 + g per byte (grid bytes are
// 1..127, so no byte carries), i.e. the signed value offset by 128, which byte_to_f32 turns into
// the exact float. The byte masks come from the sign bits by arithmetic (no table gather: the
// shared-memory pipe is the busy one): (s & 15) * 0x10204080 puts sign bit k at bit 7 of byte
// k, and PRMT's sign-replicate mode turns each byte into 0x00 or 0xFF.
DF_DEV uint32_t sign_bytes(uint32_t s4) {
    uint32_t m;  // raw PTX: __byte_perm ignores the selector's sign-replicate bit
    asm("prmt.b32 %0, %1, 0, 0xBA98;" : "=r"(m) : "r"((s4 & 15u) * 0x10204080u));
    return m;
}
DF_DEV uint32_t apply_signs(uint32_t g, uint32_t m) { return (g ^ m ^ 0x80808080u) + (m & 0x01010101u); }

// The 8 sign bits of a ksigns index: bit 7 makes the parity even.
DF_DEV uint32_t ksigns8(uint32_t s7) { return s7 | ((__popc(s7) & 1u) << 7); }

// w[0..7] = the grid magnitudes of words e0 (elements 0..3) and e1 (4..7), signed by bits s8.
DF_DEV void signed_grid8(uint32_t e0, uint32_t e1, uint32_t s8, float (&w)[8]) {
    const uint32_t s0 = apply_signs(e0, sign_bytes(s8)), s1 = apply_signs(e1, sign_bytes(s8 >> 4));
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        w[k] = byte_to_f32(s0, k, 128.f);
        w[4 + k] = byte_to_f32(s1, k, 128.f);
    }
}
// Tables are read from the block's shared-memory copy (see stage_tables).
DF_DEV uint2 grid_u64(const uint64_t* grid, uint32_t i) { return reinterpret_cast<const uint2*>(grid)[i]; }

template <>
struct Quant<Type::IQ2_XXS> {
    static constexpr int kBlock = 256, kUnit = 32, kHead = 2, kBody = 64;
    static constexpr unsigned kTables = kTabIq2xxs;
    struct Raw { uint2 q; float d; };
    static DF_DEV Raw load(const uint8_t* body, const uint8_t* head, int u) {
        const size_t b = static_cast<size_t>(u >> 3);
        return {ld_stream8(body + b * 64 + 8 * (u & 7)), f16_bits_to_f32(ldg_u16(head + 2 * b))};
    }
    static DF_DEV float group(const Raw& r, int l, float (&w)[8], const GridTables* t) {
        const uint2 e = grid_u64(t->iq2xxs, byte_of(r.q.x, l));
        signed_grid8(e.x, e.y, ksigns8((r.q.y >> (7 * l)) & 127), w);
        return r.d * (0.5f + static_cast<float>(r.q.y >> 28)) * 0.25f;
    }
};

template <>
struct Quant<Type::IQ2_XS> {
    static constexpr int kBlock = 256, kUnit = 32, kHead = 2, kBody = 72;
    static constexpr unsigned kTables = kTabIq2xs;
    struct Raw { uint2 q; uint32_t sc; float d; };
    static DF_DEV Raw load(const uint8_t* body, const uint8_t* head, int u) {
        const size_t b = static_cast<size_t>(u >> 3);
        const uint8_t* p = body + b * 72;
        return {ld_stream8(p + 8 * (u & 7)), ldg_u8(p + 64 + (u & 7)), f16_bits_to_f32(ldg_u16(head + 2 * b))};
    }
    static DF_DEV float group(const Raw& r, int l, float (&w)[8], const GridTables* t) {
        const uint32_t q = ((l < 2 ? r.q.x : r.q.y) >> (16 * (l & 1))) & 0xFFFFu;
        const uint2 e = grid_u64(t->iq2xs, q & 511);
        signed_grid8(e.x, e.y, ksigns8(q >> 9), w);
        const uint32_t s = (l < 2 ? r.sc : r.sc >> 4) & 15;
        return r.d * (0.5f + static_cast<float>(s)) * 0.25f;
    }
};

template <>
struct Quant<Type::IQ2_S> {
    static constexpr int kBlock = 256, kUnit = 32, kHead = 2, kBody = 80;
    static constexpr unsigned kTables = kTabIq2s;
    struct Raw { uint32_t idx, signs, qh, sc; float d; };
    static DF_DEV Raw load(const uint8_t* body, const uint8_t* head, int u) {
        const size_t b = static_cast<size_t>(u >> 3);
        const int ib = u & 7;
        const uint8_t* p = body + b * 80;
        return {ld_stream4(p + 4 * ib), ld_stream4(p + 32 + 4 * ib), ldg_u8(p + 64 + ib), ldg_u8(p + 72 + ib),
                f16_bits_to_f32(ldg_u16(head + 2 * b))};
    }
    static DF_DEV float group(const Raw& r, int l, float (&w)[8], const GridTables* t) {
        const uint32_t gi = byte_of(r.idx, l) | ((r.qh << (8 - 2 * l)) & 0x300u);
        const uint2 e = grid_u64(t->iq2s, gi);
        signed_grid8(e.x, e.y, byte_of(r.signs, l), w);
        const uint32_t s = (l < 2 ? r.sc : r.sc >> 4) & 15;
        return r.d * (0.5f + static_cast<float>(s)) * 0.25f;
    }
};

template <>
struct Quant<Type::IQ3_XXS> {
    static constexpr int kBlock = 256, kUnit = 32, kHead = 2, kBody = 96;
    static constexpr unsigned kTables = kTabIq3xxs;
    struct Raw { uint2 q; uint32_t aux; float d; };
    static DF_DEV Raw load(const uint8_t* body, const uint8_t* head, int u) {
        const size_t b = static_cast<size_t>(u >> 3);
        const uint8_t* p = body + b * 96;
        return {ld_stream8(p + 8 * (u & 7)), ld_stream4(p + 64 + 4 * (u & 7)), f16_bits_to_f32(ldg_u16(head + 2 * b))};
    }
    static DF_DEV float group(const Raw& r, int l, float (&w)[8], const GridTables* t) {
        const uint32_t qw = l < 2 ? r.q.x : r.q.y;
        const uint32_t e1 = t->iq3xxs[byte_of(qw, 2 * (l & 1))];
        const uint32_t e2 = t->iq3xxs[byte_of(qw, 2 * (l & 1) + 1)];
        signed_grid8(e1, e2, ksigns8((r.aux >> (7 * l)) & 127), w);
        return r.d * (0.5f + static_cast<float>(r.aux >> 28)) * 0.5f;
    }
};

template <>
struct Quant<Type::IQ3_S> {
    static constexpr int kBlock = 256, kUnit = 32, kHead = 2, kBody = 108;
    static constexpr unsigned kTables = kTabIq3s;
    struct Raw { uint32_t q0, q1, qh, signs; float db; };
    static DF_DEV Raw load(const uint8_t* body, const uint8_t* head, int u) {
        const size_t b = static_cast<size_t>(u >> 3);
        const int ib = u & 7;
        const uint8_t* p = body + b * 108;
        const uint32_t sc = (ldg_u8(p + 104 + ib / 2) >> (4 * (ib & 1))) & 15;
        const float d = f16_bits_to_f32(ldg_u16(head + 2 * b));
        return {ld_stream4(p + 8 * ib), ld_stream4(p + 8 * ib + 4), ldg_u8(p + 64 + ib),
                ld_stream4(p + 72 + 4 * ib), d * static_cast<float>(1 + 2 * static_cast<int>(sc))};
    }
    static DF_DEV float group(const Raw& r, int l, float (&w)[8], const GridTables* t) {
        const uint32_t qw = l < 2 ? r.q0 : r.q1;
        const uint32_t i1 = byte_of(qw, 2 * (l & 1)) | ((r.qh << (8 - 2 * l)) & 256u);
        const uint32_t i2 = byte_of(qw, 2 * (l & 1) + 1) | ((r.qh << (7 - 2 * l)) & 256u);
        signed_grid8(t->iq3s[i1], t->iq3s[i2], byte_of(r.signs, l), w);
        return r.db;
    }
};

// IQ4 codebook lookups: elements of one group are nibbles of two words.
DF_DEV void iq4_group(const uint32_t* q, int g, float (&w)[8], const GridTables* t) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const uint32_t x = (q[nib_word(g) + i] >> nib_shift(g)) & 0x0F0F0F0Fu;
#pragma unroll
        for (int k = 0; k < 4; ++k) w[4 * i + k] = t->iq4nl[byte_of(x, k)];
    }
}

template <>
struct Quant<Type::IQ4_NL> {
    static constexpr int kBlock = 32, kUnit = 32, kHead = 2, kBody = 16;
    static constexpr unsigned kTables = kTabIq4;
    struct Raw { uint32_t q[4]; float d; };
    static DF_DEV Raw load(const uint8_t* body, const uint8_t* head, int u) {
        const uint4 v = ld_stream16(body + static_cast<size_t>(u) * 16);
        return {{v.x, v.y, v.z, v.w}, f16_bits_to_f32(ldg_u16(head + 2 * static_cast<size_t>(u)))};
    }
    static DF_DEV float group(const Raw& r, int g, float (&w)[8], const GridTables* t) {
        iq4_group(r.q, g, w, t);
        return r.d;
    }
};

template <>
struct Quant<Type::IQ4_XS> {
    static constexpr int kBlock = 256, kUnit = 32, kHead = 0, kBody = 136;
    static constexpr unsigned kTables = kTabIq4;
    struct Raw { uint32_t q[4]; float dl; };
    static DF_DEV Raw load(const uint8_t* body, const uint8_t*, int u) {
        const int ib = u & 7;
        const uint8_t* p = body + static_cast<size_t>(u >> 3) * 136;
        const uint2 h = ldg_u64(p);  // d, scales_h, scales_l[4]
        const uint2 a = ld_stream8(p + 8 + 16 * ib), b = ld_stream8(p + 16 + 16 * ib);
        const uint32_t ls = ((byte_of(h.y, ib / 2) >> (4 * (ib & 1))) & 15) | (((h.x >> (16 + 2 * ib)) & 3) << 4);
        return {{a.x, a.y, b.x, b.y}, f16_bits_to_f32(h.x) * static_cast<float>(static_cast<int>(ls) - 32)};
    }
    static DF_DEV float group(const Raw& r, int g, float (&w)[8], const GridTables* t) {
        iq4_group(r.q, g, w, t);
        return r.dl;
    }
};

// Copies the tables Q reads into `dst` (shared memory) with every thread of the block, then
// syncs; returns dst (or nullptr when Q needs none, without syncing).
template <class Q>
DF_DEV const GridTables* stage_tables(GridTables* dst, const GridTables* src) {
    constexpr unsigned bits = tables_of<Q>();
    if constexpr (bits == 0) {
        return nullptr;
    } else {
        auto copy = [&](void* d, const void* sp, int bytes) {
            for (int i = threadIdx.x; i < bytes / 16; i += blockDim.x)
                reinterpret_cast<uint4*>(d)[i] = __ldg(reinterpret_cast<const uint4*>(sp) + i);
        };
        if (bits & kTabIq2xxs) copy(dst->iq2xxs, src->iq2xxs, sizeof src->iq2xxs);
        if (bits & kTabIq2xs) copy(dst->iq2xs, src->iq2xs, sizeof src->iq2xs);
        if (bits & kTabIq2s) copy(dst->iq2s, src->iq2s, sizeof src->iq2s);
        if (bits & kTabIq3xxs) copy(dst->iq3xxs, src->iq3xxs, sizeof src->iq3xxs);
        if (bits & kTabIq3s) copy(dst->iq3s, src->iq3s, sizeof src->iq3s);
        if (bits & kTabIq4) copy(dst->iq4nl, src->iq4nl, sizeof src->iq4nl);
        __syncthreads();
        return dst;
    }
}

// Shared-memory bytes a kernel reserves for Q's tables.
template <class Q>
constexpr int table_smem_bytes() { return tables_of<Q>() ? static_cast<int>(sizeof(GridTables)) : 16; }

}  // namespace df::cuda
