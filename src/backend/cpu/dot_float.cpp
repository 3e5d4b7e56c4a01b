// row_dot decoders for F32, F16 and BF16 rows, taken 32 elements at a time.
#include "backend/cpu/dot_kernel.h"

namespace df::cpu::detail {
namespace {

struct DecF16 {
    static constexpr int kElems = 32, kBytes = 64, kScale = 0;
    struct State {
        const uint8_t* p;
    };
    static DF_DOT_INLINE void load(State& s, const uint8_t* b) { s.p = b; }
    template <int G>
    static DF_DOT_INLINE void group(const State& s, W32& w) {
        for (int k = 0; k < 4; ++k)
            w.v[k] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s.p + 16 * k)));
    }
};

struct DecBF16 {
    static constexpr int kElems = 32, kBytes = 64, kScale = 0;
    struct State {
        const uint8_t* p;
    };
    static DF_DOT_INLINE void load(State& s, const uint8_t* b) { s.p = b; }
    template <int G>
    static DF_DOT_INLINE void group(const State& s, W32& w) {
        for (int k = 0; k < 4; ++k) {
            const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s.p + 16 * k)));
            w.v[k] = _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
        }
    }
};

}  // namespace

Kernel kernel_float(quant::Type t) {
    switch (t) {
        case quant::Type::F32: return make_kernel<DecF32>();
        case quant::Type::F16: return make_kernel<DecF16>();
        case quant::Type::BF16: return make_kernel<DecBF16>();
        default: return {};
    }
}

}  // namespace df::cpu::detail
