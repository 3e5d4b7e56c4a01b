// row_dot decoders for the K-quants (256-element super-blocks, 8 groups of 32).
//
// Sub-block scales are formed in scalar code exactly as the reference forms them. Types with a
// min produce the weights (scale * q - min, the reference's single rounding); Q3_K and Q6_K keep
// their per-16 scale factored (kScale 2).
#include "backend/cpu/dot_kernel.h"
#include "quant/dequant_impl.h"

namespace df::cpu::detail {
namespace {

using quant::detail::scale_min_k4;

DF_DOT_INLINE __m256i load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

struct DecQ2_K {
    static constexpr int kElems = 256, kBytes = 84, kScale = 0;
    struct State {
        float dl[16], ml[16];
        const uint8_t* qs;
    };
    static DF_DOT_INLINE void load(State& s, const uint8_t* b) {
        const float d = load_f16(b + 80), dmin = load_f16(b + 82);
        for (int i = 0; i < 16; ++i) {
            s.dl[i] = d * static_cast<float>(b[i] & 0xF);
            s.ml[i] = dmin * static_cast<float>(b[i] >> 4);
        }
        s.qs = b + 16;
    }
    template <int G>
    static DF_DOT_INLINE void group(const State& s, W32& w) {
        constexpr int half = G / 4, j = G % 4, is = 8 * half + 2 * j;  // 16 values per scale
        const __m256i q = _mm256_and_si256(_mm256_srli_epi16(load32(s.qs + 32 * half), 2 * j), _mm256_set1_epi8(3));
        i8x32_to_f32(q, w);
        for (int k = 0; k < 4; ++k)
            w.v[k] = _mm256_fmsub_ps(w.v[k], _mm256_set1_ps(s.dl[is + k / 2]), _mm256_set1_ps(s.ml[is + k / 2]));
    }
};

struct DecQ3_K {
    static constexpr int kElems = 256, kBytes = 110, kScale = 2;
    struct State {
        float dl[16];
        const uint8_t* b;
    };
    static DF_DOT_INLINE void load(State& s, const uint8_t* b) {
        const float d = load_f16(b + 108);
        const uint8_t* sc = b + 96;
        for (int i = 0; i < 16; ++i) {
            const int lo = i < 8 ? sc[i] & 0xF : sc[i - 8] >> 4;
            const int hi = (sc[8 + i % 4] >> (2 * (i / 4))) & 3;
            s.dl[i] = d * static_cast<float>((lo | (hi << 4)) - 32);
        }
        s.b = b;
    }
    template <int G>
    static DF_DOT_INLINE void group(const State& s, W32& w) {
        constexpr int half = G / 4, j = G % 4, is = 8 * half + 2 * j;
        const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(load32(s.b + 32 + 32 * half), 2 * j), _mm256_set1_epi8(3));
        // The third bit is stored inverted: clear means "minus 4".
        const __m256i m = _mm256_set1_epi8(static_cast<char>(1 << (4 * half + j)));
        const __m256i clear = _mm256_cmpeq_epi8(_mm256_and_si256(load32(s.b), m), _mm256_setzero_si256());
        i8x32_to_f32(_mm256_sub_epi8(lo, _mm256_and_si256(clear, _mm256_set1_epi8(4))), w);
        w.s[0] = _mm256_set1_ps(s.dl[is]);
        w.s[1] = _mm256_set1_ps(s.dl[is + 1]);
    }
};

// Q4_K and Q5_K: 8 sub-blocks of 32 with a 6-bit scale and min each.
template <bool kFifthBit>
struct DecQ45_K {
    static constexpr int kElems = 256, kBytes = kFifthBit ? 176 : 144, kScale = 0;
    struct State {
        float d1[8], m1[8];
        const uint8_t* qh;
        const uint8_t* qs;
    };
    static DF_DOT_INLINE void load(State& s, const uint8_t* b) {
        const float d = load_f16(b), dmin = load_f16(b + 2);
        for (int j = 0; j < 8; ++j) {
            uint8_t sc, m;
            scale_min_k4(j, b + 4, sc, m);
            s.d1[j] = d * static_cast<float>(sc);
            s.m1[j] = dmin * static_cast<float>(m);
        }
        s.qh = b + 16;
        s.qs = b + (kFifthBit ? 48 : 16);
    }
    template <int G>
    static DF_DOT_INLINE void group(const State& s, W32& w) {
        const uint8_t* q = s.qs + 32 * (G / 2);  // low nibbles: even group, high: odd
        const __m256 d1 = _mm256_set1_ps(s.d1[G]), m1 = _mm256_set1_ps(s.m1[G]);
        for (int k = 0; k < 4; ++k) {
            __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + 8 * k)));
            v = G % 2 ? _mm256_srli_epi32(v, 4) : _mm256_and_si256(v, _mm256_set1_epi32(0xF));
            if constexpr (kFifthBit) {
                const __m256i h = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s.qh + 8 * k)));
                v = _mm256_or_si256(v, _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, G), _mm256_set1_epi32(1)), 4));
            }
            w.v[k] = _mm256_fmsub_ps(_mm256_cvtepi32_ps(v), d1, m1);
        }
    }
};

struct DecQ6_K {
    static constexpr int kElems = 256, kBytes = 210, kScale = 2;
    struct State {
        float s[16];
        const uint8_t* b;
    };
    static DF_DOT_INLINE void load(State& s, const uint8_t* b) {
        const float d = load_f16(b + 208);
        for (int i = 0; i < 16; ++i) s.s[i] = d * static_cast<float>(static_cast<int8_t>(b[192 + i]));
        s.b = b;
    }
    template <int G>
    static DF_DOT_INLINE void group(const State& s, W32& w) {
        constexpr int half = G / 4, j = G % 4, is = 8 * half + 2 * j;
        const __m256i l = load32(s.b + 64 * half + 32 * (j % 2));  // ql: low nibbles for j < 2
        const __m256i h = load32(s.b + 128 + 32 * half);           // qh: 2 bits per group j
        const __m256i nib = j < 2 ? _mm256_and_si256(l, _mm256_set1_epi8(0xF))
                                  : _mm256_and_si256(_mm256_srli_epi16(l, 4), _mm256_set1_epi8(0xF));
        // Bits 2j, 2j+1 of qh to bits 4, 5 (16-bit shifts: bits crossing bytes fall outside the mask).
        const __m256i hs = j == 0   ? _mm256_slli_epi16(h, 4)
                           : j == 1 ? _mm256_slli_epi16(h, 2)
                           : j == 2 ? h
                                    : _mm256_srli_epi16(h, 2);
        const __m256i q = _mm256_or_si256(nib, _mm256_and_si256(hs, _mm256_set1_epi8(0x30)));
        i8x32_to_f32(_mm256_sub_epi8(q, _mm256_set1_epi8(32)), w);
        w.s[0] = _mm256_set1_ps(s.s[is]);
        w.s[1] = _mm256_set1_ps(s.s[is + 1]);
    }
};

}  // namespace

Kernel kernel_k(quant::Type t) {
    switch (t) {
        case quant::Type::Q2_K: return make_kernel<DecQ2_K>();
        case quant::Type::Q3_K: return make_kernel<DecQ3_K>();
        case quant::Type::Q4_K: return make_kernel<DecQ45_K<false>>();
        case quant::Type::Q5_K: return make_kernel<DecQ45_K<true>>();
        case quant::Type::Q6_K: return make_kernel<DecQ6_K>();
        default: return {};
    }
}

}  // namespace df::cpu::detail
