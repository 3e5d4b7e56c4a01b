// row_dot decoders for the IQ types: IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_XS.
//
// A weight is (group scale) * (grid magnitude with its sign bit flipped where the sign mask says):
// the scale stays factored (kScale 1, or 2 where each half group has its own); their product is
// the reference's (scale * grid) * (+/-1). The grids (except IQ2_S's 1024 rows, which would not
// fit L1) are expanded once to f32 rows, so 8 weights cost one or two loads instead of a byte
// expansion and a convert; sign masks come from tables of sign-bit vectors.
#include "backend/cpu/dot_kernel.h"
#include "quant/grids.h"

namespace df::cpu::detail {
namespace {

using quant::ksigns_iq2xs;

struct Tables {
    alignas(32) uint32_t sign7[128][8];  // kSignMasks row of a 7-bit ksigns index (parity bit added)
    alignas(32) float iq2xxs[256][8];
    alignas(32) float iq2xs[512][8];
    alignas(16) float iq3xxs[256][4];
    alignas(16) float iq3s[512][4];
    float half_scale[16];                // (0.5 + s) / 4: d * this is exact, as d * (0.5 + s) * 0.25
    Tables() {
        for (int i = 0; i < 128; ++i)
            for (int j = 0; j < 8; ++j) sign7[i][j] = kSignMasks.m[ksigns_iq2xs[i]][j];
        for (int i = 0; i < 16; ++i) half_scale[i] = (0.5f + static_cast<float>(i)) * 0.25f;
        for (int i = 0; i < 256; ++i)
            for (int j = 0; j < 8; ++j) iq2xxs[i][j] = quant::grid_byte(quant::iq2xxs_grid[i], j);
        for (int i = 0; i < 512; ++i)
            for (int j = 0; j < 8; ++j) iq2xs[i][j] = quant::grid_byte(quant::iq2xs_grid[i], j);
        for (int i = 0; i < 256; ++i)
            for (int j = 0; j < 4; ++j) iq3xxs[i][j] = quant::grid_byte(quant::iq3xxs_grid[i], j);
        for (int i = 0; i < 512; ++i)
            for (int j = 0; j < 4; ++j) iq3s[i][j] = quant::grid_byte(quant::iq3s_grid[i], j);
    }
};
// The grids are constant-initialized data, so building from them at static-init time is safe.
const Tables kTables;

DF_DOT_INLINE __m256 with_signs(__m256 grid, uint8_t signs) { return flip_signs(grid, signs); }
DF_DOT_INLINE __m256 with_signs7(__m256 grid, uint32_t ksigns_index) {
    return _mm256_xor_ps(grid, _mm256_load_ps(reinterpret_cast<const float*>(kTables.sign7[ksigns_index])));
}

// Two 4-value grid rows of f32 as one group of 8.
DF_DOT_INLINE __m256 grid4x2(const float* a, const float* b) {
    return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_load_ps(a)), _mm_load_ps(b), 1);
}

// The IQ2 group scale d * (0.5 + s) * 0.25 (both products exact, so one multiply gives it).
DF_DOT_INLINE float iq2_scale(float d, int s) { return d * kTables.half_scale[s]; }

struct DecIQ2_XXS {
    static constexpr int kElems = 256, kBytes = 66, kScale = 1;
    struct State {
        float d;
        const uint8_t* q;
    };
    static DF_DOT_INLINE void load(State& s, const uint8_t* b) {
        s.d = load_f16(b);
        s.q = b + 2;
    }
    template <int G>
    static DF_DOT_INLINE void group(const State& s, W32& w) {
        const uint8_t* q = s.q + 8 * G;  // 4 grid index bytes, then 4 x 7-bit sign index + 4-bit scale
        const uint32_t aux = load_u32(q + 4);
        w.s[0] = _mm256_set1_ps(iq2_scale(s.d, static_cast<int>(aux >> 28)));
        for (int l = 0; l < 4; ++l) w.v[l] = with_signs7(_mm256_load_ps(kTables.iq2xxs[q[l]]), (aux >> (7 * l)) & 127);
    }
};

struct DecIQ2_XS {
    static constexpr int kElems = 256, kBytes = 74, kScale = 2;
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
        const uint8_t sc = s.b[66 + G];
        w.s[0] = _mm256_set1_ps(iq2_scale(s.d, sc & 0xF));
        w.s[1] = _mm256_set1_ps(iq2_scale(s.d, sc >> 4));
        for (int l = 0; l < 4; ++l) {
            const uint16_t q = load_u16(s.b + 2 + 2 * (4 * G + l));  // 9-bit grid index, 7-bit sign index
            w.v[l] = with_signs7(_mm256_load_ps(kTables.iq2xs[q & 511]), q >> 9);
        }
    }
};

struct DecIQ2_S {
    static constexpr int kElems = 256, kBytes = 82, kScale = 2;
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
        const uint8_t* qs = s.b + 2;
        const uint8_t qh = s.b[66 + G], sc = s.b[74 + G];
        w.s[0] = _mm256_set1_ps(iq2_scale(s.d, sc & 0xF));
        w.s[1] = _mm256_set1_ps(iq2_scale(s.d, sc >> 4));
        for (int l = 0; l < 4; ++l) {
            const int idx = qs[4 * G + l] | ((qh << (8 - 2 * l)) & 0x300);
            w.v[l] = with_signs(u8x8_to_f32(quant::iq2s_grid[idx]), qs[32 + 4 * G + l]);
        }
    }
};

struct DecIQ3_XXS {
    static constexpr int kElems = 256, kBytes = 98, kScale = 1;
    struct State {
        float d;
        const uint8_t* q;
    };
    static DF_DOT_INLINE void load(State& s, const uint8_t* b) {
        s.d = load_f16(b);
        s.q = b + 2;
    }
    template <int G>
    static DF_DOT_INLINE void group(const State& s, W32& w) {
        const uint32_t aux = load_u32(s.q + 64 + 4 * G);
        w.s[0] = _mm256_set1_ps(s.d * (2.0f * kTables.half_scale[aux >> 28]));  // d * (0.5 + s) * 0.5, exact
        for (int l = 0; l < 4; ++l) {
            const __m256 grid = grid4x2(kTables.iq3xxs[s.q[8 * G + 2 * l]], kTables.iq3xxs[s.q[8 * G + 2 * l + 1]]);
            w.v[l] = with_signs7(grid, (aux >> (7 * l)) & 127);
        }
    }
};

struct DecIQ3_S {
    static constexpr int kElems = 256, kBytes = 110, kScale = 1;
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
        const uint8_t* qs = s.b + 2 + 8 * G;
        const int qh = s.b[66 + G];
        const int sc = G % 2 ? s.b[106 + G / 2] >> 4 : s.b[106 + G / 2] & 0xF;
        w.s[0] = _mm256_set1_ps(s.d * static_cast<float>(1 + 2 * sc));
        for (int l = 0; l < 4; ++l) {
            const int i0 = qs[2 * l] | ((qh << (8 - 2 * l)) & 256);
            const int i1 = qs[2 * l + 1] | ((qh << (7 - 2 * l)) & 256);
            w.v[l] = with_signs(grid4x2(kTables.iq3s[i0], kTables.iq3s[i1]), s.b[74 + 4 * G + l]);
        }
    }
};

struct DecIQ4_XS {
    static constexpr int kElems = 256, kBytes = 136, kScale = 1;
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
        const int ls = ((s.b[4 + G / 2] >> (4 * (G % 2))) & 0xF) | (((load_u16(s.b + 2) >> (2 * G)) & 3) << 4);
        w.s[0] = _mm256_set1_ps(s.d * static_cast<float>(ls - 32));
        const __m256i table =
            _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(quant::kvalues_iq4nl)));
        const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s.b + 8 + 16 * G));
        i8x32_to_f32(_mm256_shuffle_epi8(table, nibbles_lo_hi(qs)), w);
    }
};

}  // namespace

Kernel kernel_iq(quant::Type t) {
    switch (t) {
        case quant::Type::IQ2_XXS: return make_kernel<DecIQ2_XXS>();
        case quant::Type::IQ2_XS: return make_kernel<DecIQ2_XS>();
        case quant::Type::IQ2_S: return make_kernel<DecIQ2_S>();
        case quant::Type::IQ3_XXS: return make_kernel<DecIQ3_XXS>();
        case quant::Type::IQ3_S: return make_kernel<DecIQ3_S>();
        case quant::Type::IQ4_XS: return make_kernel<DecIQ4_XS>();
        default: return {};
    }
}

}  // namespace df::cpu::detail
