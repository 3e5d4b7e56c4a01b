// row_dot decoders for the 32-element block types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4.
//
// Each weight is the reference's exact product d * q (kept factored: v = q, s = d) or, with a
// min, d * q + m (one rounding: an FMA of an exact product rounds the same as the reference).
#include "backend/cpu/dot_kernel.h"
#include "quant/dequant_impl.h"
#include "quant/grids.h"

namespace df::cpu::detail {
namespace {

template <int Bytes, int Scale>
struct Dec32 {
    static constexpr int kElems = 32, kBytes = Bytes, kScale = Scale;
};

struct DecQ8_0 : Dec32<34, 1> {
    struct State {
        __m256 d;
        const uint8_t* q;
    };
    static DF_DOT_INLINE void load(State& s, const uint8_t* b) {
        s.d = _mm256_set1_ps(load_f16(b));
        s.q = b + 2;
    }
    template <int G>
    static DF_DOT_INLINE void group(const State& s, W32& w) {
        for (int k = 0; k < 4; ++k) {
            const __m128i q8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s.q + 8 * k));
            w.v[k] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8));
        }
        w.s[0] = s.d;
    }
};

// 32 small integers in q (element order): factored scale d ...
DF_DOT_INLINE void scaled_i8(__m256i q, __m256 d, W32& w) {
    i8x32_to_f32(q, w);
    w.s[0] = d;
}

// ... or the weights d * q + m themselves.
DF_DOT_INLINE void affine_i8(__m256i q, __m256 d, __m256 m, W32& w) {
    i8x32_to_f32(q, w);
    for (int k = 0; k < 4; ++k) w.v[k] = _mm256_fmadd_ps(w.v[k], d, m);
}

DF_DOT_INLINE __m128i load16(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }

struct DecQ4_0 : Dec32<18, 1> {
    struct State {
        __m256 d;
        const uint8_t* q;
    };
    static DF_DOT_INLINE void load(State& s, const uint8_t* b) {
        s.d = _mm256_set1_ps(load_f16(b));
        s.q = b + 2;
    }
    template <int G>
    static DF_DOT_INLINE void group(const State& s, W32& w) {
        const __m256i q = _mm256_sub_epi8(nibbles_lo_hi(load16(s.q)), _mm256_set1_epi8(8));
        scaled_i8(q, s.d, w);
    }
};

struct DecQ4_1 : Dec32<20, 0> {
    struct State {
        __m256 d, m;
        const uint8_t* q;
    };
    static DF_DOT_INLINE void load(State& s, const uint8_t* b) {
        s.d = _mm256_set1_ps(load_f16(b));
        s.m = _mm256_set1_ps(load_f16(b + 2));
        s.q = b + 4;
    }
    template <int G>
    static DF_DOT_INLINE void group(const State& s, W32& w) {
        affine_i8(nibbles_lo_hi(load16(s.q)), s.d, s.m, w);
    }
};

// 0x10 in byte j where bit j of qh is set.
DF_DOT_INLINE __m256i fifth_bits(uint32_t qh) {
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(static_cast<int>(qh)),
        _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000));
    const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

struct DecQ5_0 : Dec32<22, 1> {
    struct State {
        __m256 d;
        const uint8_t* b;
    };
    static DF_DOT_INLINE void load(State& s, const uint8_t* b) {
        s.d = _mm256_set1_ps(load_f16(b));
        s.b = b;
    }
    template <int G>
    static DF_DOT_INLINE void group(const State& s, W32& w) {
        const __m256i q5 = _mm256_or_si256(nibbles_lo_hi(load16(s.b + 6)), fifth_bits(load_u32(s.b + 2)));
        scaled_i8(_mm256_sub_epi8(q5, _mm256_set1_epi8(16)), s.d, w);
    }
};

struct DecQ5_1 : Dec32<24, 0> {
    struct State {
        __m256 d, m;
        const uint8_t* b;
    };
    static DF_DOT_INLINE void load(State& s, const uint8_t* b) {
        s.d = _mm256_set1_ps(load_f16(b));
        s.m = _mm256_set1_ps(load_f16(b + 2));
        s.b = b;
    }
    template <int G>
    static DF_DOT_INLINE void group(const State& s, W32& w) {
        const __m256i q5 = _mm256_or_si256(nibbles_lo_hi(load16(s.b + 8)), fifth_bits(load_u32(s.b + 4)));
        affine_i8(q5, s.d, s.m, w);
    }
};

// Codebook types: a nibble picks an int8 from a 16-entry table (one byte shuffle per 16).
template <const int8_t* kTable, int Bytes, float (*Scale)(const uint8_t*)>
struct DecCodebook : Dec32<Bytes, 1> {
    struct State {
        __m256 d;
        const uint8_t* q;
    };
    static DF_DOT_INLINE void load(State& s, const uint8_t* b) {
        s.d = _mm256_set1_ps(Scale(b));
        s.q = b + Bytes - 16;
    }
    template <int G>
    static DF_DOT_INLINE void group(const State& s, W32& w) {
        const __m256i table = _mm256_broadcastsi128_si256(load16(reinterpret_cast<const uint8_t*>(kTable)));
        scaled_i8(_mm256_shuffle_epi8(table, nibbles_lo_hi(load16(s.q))), s.d, w);
    }
};

float scale_f16(const uint8_t* b) { return load_f16(b); }
float scale_e8m0(const uint8_t* b) { return quant::detail::e8m0_to_f32_half(b[0]); }

using DecIQ4_NL = DecCodebook<quant::kvalues_iq4nl, 18, scale_f16>;
using DecMXFP4 = DecCodebook<quant::kvalues_fp4, 17, scale_e8m0>;

}  // namespace

Kernel kernel_legacy(quant::Type t) {
    switch (t) {
        case quant::Type::Q8_0: return make_kernel<DecQ8_0>();
        case quant::Type::Q4_0: return make_kernel<DecQ4_0>();
        case quant::Type::Q4_1: return make_kernel<DecQ4_1>();
        case quant::Type::Q5_0: return make_kernel<DecQ5_0>();
        case quant::Type::Q5_1: return make_kernel<DecQ5_1>();
        case quant::Type::IQ4_NL: return make_kernel<DecIQ4_NL>();
        case quant::Type::MXFP4: return make_kernel<DecMXFP4>();
        default: return {};
    }
}

}  // namespace df::cpu::detail
