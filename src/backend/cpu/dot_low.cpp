// row_dot decoders for the 1- and 2-bit types: IQ1_S, IQ1_M, TQ2_0, Q1_0, Q2_0, and NVFP4.
//
// All keep the group scale factored; the values v are small exact floats (grid + delta, q - 1,
// +/-1, codebook entries) whose products with the scale are exact, as in the reference.
#include "backend/cpu/dot_kernel.h"
#include "quant/dequant_impl.h"
#include "quant/grids.h"

namespace df::cpu::detail {
namespace {

// 8 int8 lattice values of an iq1s_grid row, plus the group's +/-1/8 shift (exact).
DF_DOT_INLINE __m256 iq1_row(int index, float delta) {
    const __m128i g = _mm_cvtsi64_si128(static_cast<long long>(quant::iq1s_grid[index]));
    return _mm256_add_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(g)), _mm256_set1_ps(delta));
}

struct DecIQ1_S {
    static constexpr int kElems = 256, kBytes = 50, kScale = 1;
    struct State {
        float d;
        const uint8_t* b;
    };
    static DF_DOT_INLINE void load(State& s, const uint8_t* b) {
        s.d = load_f16(b);
        s.b = b;
    }
    template <int G>
    static DF_DOT_INLINE void group(const State& s, W32& w) {
        const uint16_t h = load_u16(s.b + 34 + 2 * G);  // 3 high index bits per 8, scale, delta sign
        const float delta = h & 0x8000 ? -quant::kIq1Delta : quant::kIq1Delta;
        w.s[0] = _mm256_set1_ps(s.d * static_cast<float>(2 * ((h >> 12) & 7) + 1));
        for (int l = 0; l < 4; ++l) w.v[l] = iq1_row(s.b[2 + 4 * G + l] | (((h >> (3 * l)) & 7) << 8), delta);
    }
};

struct DecIQ1_M {
    static constexpr int kElems = 256, kBytes = 56, kScale = 2;
    struct State {
        float d;
        uint16_t sc[4];
        const uint8_t* b;
    };
    static DF_DOT_INLINE void load(State& s, const uint8_t* b) {
        std::memcpy(s.sc, b + 48, 8);
        // The f16 super-scale is spread over the top nibbles of the four scale words.
        const auto bits = static_cast<uint16_t>((s.sc[0] >> 12) | ((s.sc[1] >> 8) & 0x00F0) |
                                                ((s.sc[2] >> 4) & 0x0F00) | (s.sc[3] & 0xF000));
        s.d = _cvtsh_ss(bits);
        s.b = b;
    }
    template <int G>
    static DF_DOT_INLINE void group(const State& s, W32& w) {
        constexpr int sh = 6 * (G % 2);
        w.s[0] = _mm256_set1_ps(s.d * static_cast<float>(2 * ((s.sc[G / 2] >> sh) & 7) + 1));
        w.s[1] = _mm256_set1_ps(s.d * static_cast<float>(2 * ((s.sc[G / 2] >> (sh + 3)) & 7) + 1));
        const uint8_t* qs = s.b + 4 * G;
        const uint8_t* qh = s.b + 32 + 2 * G;
        for (int l = 0; l < 4; ++l) {
            const int h = qh[l / 2] >> (4 * (l % 2));  // index bits 0-2, delta sign bit 3
            w.v[l] = iq1_row(qs[l] | ((h & 7) << 8), h & 8 ? -quant::kIq1Delta : quant::kIq1Delta);
        }
    }
};

struct DecTQ2_0 {
    static constexpr int kElems = 256, kBytes = 66, kScale = 1;
    struct State {
        __m256 d;
        const uint8_t* b;
    };
    static DF_DOT_INLINE void load(State& s, const uint8_t* b) {
        s.d = _mm256_set1_ps(load_f16(b + 64));
        s.b = b;
    }
    template <int G>
    static DF_DOT_INLINE void group(const State& s, W32& w) {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s.b + 32 * (G / 4)));
        const __m256i t = _mm256_and_si256(_mm256_srli_epi16(q, 2 * (G % 4)), _mm256_set1_epi8(3));
        i8x32_to_f32(_mm256_sub_epi8(t, _mm256_set1_epi8(1)), w);
        w.s[0] = s.d;
    }
};

struct DecQ1_0 {
    static constexpr int kElems = 128, kBytes = 18, kScale = 1;
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
        for (int k = 0; k < 4; ++k) w.v[k] = flip_signs(_mm256_set1_ps(-1.0f), s.q[4 * G + k]);  // set bit: +1
        w.s[0] = s.d;
    }
};

struct DecQ2_0 {
    static constexpr int kElems = 64, kBytes = 18, kScale = 1;
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
        const __m256i shifts = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
        for (int k = 0; k < 4; ++k) {  // 8 two-bit fields, LSB first, in two bytes
            const __m256i f = _mm256_srlv_epi32(_mm256_set1_epi32(load_u16(s.q + 8 * G + 2 * k)), shifts);
            const __m256i q = _mm256_sub_epi32(_mm256_and_si256(f, _mm256_set1_epi32(3)), _mm256_set1_epi32(1));
            w.v[k] = _mm256_cvtepi32_ps(q);
        }
        w.s[0] = s.d;
    }
};

// NVFP4 sub-block scales for every byte, from the reference decoder (it calls ldexp).
struct Ue4m3Table {
    float v[256];
    Ue4m3Table() {
        for (int i = 0; i < 256; ++i) v[i] = quant::detail::ue4m3_to_f32_half(static_cast<uint8_t>(i));
    }
};
const Ue4m3Table kUe4m3;

struct DecNVFP4 {
    static constexpr int kElems = 64, kBytes = 36, kScale = 2;
    struct State {
        float d[4];
        const uint8_t* q;
    };
    static DF_DOT_INLINE void load(State& s, const uint8_t* b) {
        for (int i = 0; i < 4; ++i) s.d[i] = kUe4m3.v[b[i]];
        s.q = b + 4;
    }
    template <int G>
    static DF_DOT_INLINE void group(const State& s, W32& w) {
        // Two 16-element sub-blocks of 8 bytes each: low nibbles are elements 0..7, high 8..15.
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s.q + 16 * G));
        const __m128i m = _mm_set1_epi8(0x0F);
        const __m128i lo = _mm_and_si128(q, m), hi = _mm_and_si128(_mm_srli_epi16(q, 4), m);
        const __m256i idx = _mm256_set_m128i(_mm_unpackhi_epi64(lo, hi), _mm_unpacklo_epi64(lo, hi));
        const __m256i table =
            _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(quant::kvalues_fp4)));
        i8x32_to_f32(_mm256_shuffle_epi8(table, idx), w);
        w.s[0] = _mm256_set1_ps(s.d[2 * G]);
        w.s[1] = _mm256_set1_ps(s.d[2 * G + 1]);
    }
};

}  // namespace

Kernel kernel_low(quant::Type t) {
    switch (t) {
        case quant::Type::IQ1_S: return make_kernel<DecIQ1_S>();
        case quant::Type::IQ1_M: return make_kernel<DecIQ1_M>();
        case quant::Type::TQ2_0: return make_kernel<DecTQ2_0>();
        case quant::Type::Q1_0: return make_kernel<DecQ1_0>();
        case quant::Type::Q2_0: return make_kernel<DecQ2_0>();
        case quant::Type::NVFP4: return make_kernel<DecNVFP4>();
        default: return {};
    }
}

}  // namespace df::cpu::detail
