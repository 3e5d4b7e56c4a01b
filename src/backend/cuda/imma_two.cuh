// Two imma matmuls over the same activations as one launch: blocks [0, a.blocks) run matrix a
// (type TA), the rest matrix b (type TB), each part its own stream-K split over its blocks and its
// own scratch. Why: a persistent imma grid fills every SM, so two such matmuls on parallel
// streams ran one after another (the second found room only as the first drained, after a
// graph event edge), each paying its ramp and fix-up; as parts of one grid they start together
// behind the same programmatic edge (the 27B's GDN q/k/v and z gate). One instantiation per type
// pair: generated translation units for the pairs in DF_CUDA_IMMA_TWO (CMakeLists.txt).
#pragma once

#include <algorithm>

#include "backend/cuda/imma.cuh"

namespace df::cuda {

template <Type TA, Type TB, int NT, bool kOne>
__global__ void __launch_bounds__(kImmaThreads, kImmaBlocksPerSm) imma_two_kernel(const ImmaArgs a, const ImmaArgs b) {
    const uint32_t na = static_cast<uint32_t>(a.blocks);
    if (blockIdx.x < na)
        imma_body<TA, NT, false, kOne>(a, blockIdx.x, na);
    else
        imma_body<TB, NT, false, kOne>(b, blockIdx.x - na, static_cast<uint32_t>(b.blocks));
}

template <Type TA, Type TB, int NT, bool kOne = false>
void imma_two_launch_nt(const ImmaArgs& a, const ImmaArgs& b, cudaStream_t s) {
    constexpr int smem = std::max(imma_smem_bytes<Imma<TA>, 1>(), imma_smem_bytes<Imma<TB>, 1>());
    static bool attr_set = false;  // ops are issued from one thread
    if (!attr_set) {
        DF_CUDA_CHECK(cudaFuncSetAttribute(imma_two_kernel<TA, TB, NT, kOne>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        attr_set = true;
    }
    launch(imma_two_kernel<TA, TB, NT, kOne>, a.blocks + b.blocks, kImmaThreads, smem, s, a, b);
}

template <Type TA, Type TB>
void imma_two_launch(const ImmaArgs& a, const ImmaArgs& b, cudaStream_t s) {
    static_assert(Imma<TA>::kSupported && Imma<TB>::kSupported, "imma_two: both types need imma decoders");
    DF_CUDA_REQUIRE(a.T >= 1 && a.T <= 8 && b.T == a.T && b.xq == a.xq && b.xe == a.xe,
                    "imma two: one set of activations for T in 1..8");
    DF_CUDA_REQUIRE(a.w.cols % kImmaUnit == 0 && b.w.cols == a.w.cols, "imma two: equal widths, a multiple of 256");
    DF_CUDA_REQUIRE(!a.up && !b.up, "imma two: no fused gate/up");
    DF_CUDA_REQUIRE(a.blocks >= 1 && b.blocks >= 1 && a.partial && a.counters && b.partial && b.counters &&
                        a.partial != b.partial && a.counters != b.counters,
                    "imma two: a grid and separate scratch for each part");
    if (a.T == 1 && (imma_halves<Imma<TA>>() || imma_halves<Imma<TB>>()))  // as imma_launch
        imma_two_launch_nt<TA, TB, 1, true>(a, b, s);
    else if (a.T <= 2)
        imma_two_launch_nt<TA, TB, 1>(a, b, s);
    else if (a.T <= 4)
        imma_two_launch_nt<TA, TB, 2>(a, b, s);
    else
        imma_two_launch_nt<TA, TB, 4>(a, b, s);
}

}  // namespace df::cuda

// Defines the launcher of one type pair (the generated imma_two_<A>_<B>.cu files).
#define DF_CUDA_DEFINE_IMMA_TWO(A, B)                                                           \
    namespace df::cuda {                                                                      \
    extern const ImmaTwoFn kImmaTwo_##A##_##B;                                                \
    const ImmaTwoFn kImmaTwo_##A##_##B = imma_two_launch<Type::A, Type::B>;                   \
    }
