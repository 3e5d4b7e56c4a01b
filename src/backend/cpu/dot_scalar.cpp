// row_dot for the types without a SIMD decoder (TQ1_0; any new type until it gets one): each
// block is dequantized by the scalar reference into a stack buffer, then read back.
#include "backend/cpu/dot_kernel.h"
#include "quant/dequant_impl.h"

namespace df::cpu::detail {
namespace {

template <quant::DequantFn kFn, int Elems, int Bytes>
struct DecScalar {
    static constexpr int kElems = Elems, kBytes = Bytes, kScale = 0;
    struct State {
        alignas(32) float w[Elems];
    };
    static DF_DOT_INLINE void load(State& s, const uint8_t* b) { kFn(b, s.w, Elems); }
    template <int G>
    static DF_DOT_INLINE void group(const State& s, W32& w) {
        for (int k = 0; k < 4; ++k) w.v[k] = _mm256_load_ps(s.w + 32 * G + 8 * k);
    }
};

template <quant::DequantFn kFn, quant::Type kType>
constexpr Kernel scalar_kernel() {
    constexpr auto& ti = quant::type_info(kType);
    return make_kernel<DecScalar<kFn, ti.block_elems, ti.block_bytes>>();
}

}  // namespace

Kernel kernel_scalar(quant::Type t) {
    using namespace quant::detail;
    using quant::Type;
    switch (t) {
        case Type::TQ1_0: return scalar_kernel<dequant_tq1_0, Type::TQ1_0>();
        default: return {};
    }
}

}  // namespace df::cpu::detail
