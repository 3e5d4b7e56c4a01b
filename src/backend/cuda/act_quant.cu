// Activations for the integer tensor-core matvec (imma.cuh): per token and 256-column unit, a
// power-of-two exponent and four int8 limbs per element, stored as the kernels' B fragments.
#include <cstdlib>

#include "backend/cuda/act_quant.cuh"
#include "backend/cuda/imma_deferred.cuh"
#include "backend/cuda/launch.cuh"

namespace df::cuda {
namespace {

// A warp per (unit, token).
__global__ void __launch_bounds__(256) act_quant_kernel(const float* x, int cols, uint2* xq, float* xe) {
    pdl_begin();
    const int lane = threadIdx.x & 31, unit = blockIdx.x * 8 + (threadIdx.x >> 5), tok = blockIdx.y;
    const int n_units = cols / kImmaUnit;
    if (unit >= n_units) return;
    const float4* p = reinterpret_cast<const float4*>(x + static_cast<size_t>(tok) * cols + static_cast<size_t>(unit) * kImmaUnit) + 2 * lane;
    const float4 a = p[0], b = p[1];
    const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    act_quant_unit(v, tok, unit, n_units, cols / 32, xq, xe, lane);
}

// Writes a deferred launch's shared tiles into its output as floats (so that any later reader
// finds the whole output), and with kConvert also converts it as launch_act_quant does. A warp
// per (unit, token), blockDim.x / 32 units a block. kKind: deferred_rows's (kDeferPair: the fused
// gate/up's output, the conversion for down).
template <bool kConvert, int kKind = kDeferAny>
__global__ void __launch_bounds__(256) deferred_kernel(const ImmaDeferred d, uint2* xq, float* xe) {
    pdl_begin();
    const int lane = threadIdx.x & 31, unit = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), tok = blockIdx.y;
    const int n_units = d.rows / kImmaUnit;
    if (unit >= n_units) return;
    const int e0 = unit * kImmaUnit + 8 * lane;
    float v[8];
    bool whole;
    deferred_rows<kKind>(d, tok, e0, v, whole);
    if (!whole) store8<true>(d.out + static_cast<size_t>(tok) * d.rows + e0, v);
    if constexpr (kConvert) act_quant_unit(v, tok, unit, n_units, d.rows / 32, xq, xe, lane);
}

}  // namespace

size_t act_quant_xq_bytes(int cols) { return static_cast<size_t>(4) * (cols / 32) * 32 * 8; }

void launch_act_quant(const float* x, int T, int cols, uint2* xq, float* xe, cudaStream_t s) {
    DF_CUDA_REQUIRE(T >= 1 && T <= 8 && cols > 0 && cols % kImmaUnit == 0, "act_quant: T in 1..8, cols a multiple of 256");
    DF_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(x) % 16 == 0, "act_quant: x must be 16-byte aligned");
    launch(act_quant_kernel, dim3((cols / kImmaUnit + 7) / 8, T), 256, 0, s, x, cols, xq, xe);
}

void launch_act_quant_deferred(const ImmaDeferred& d, int T, uint2* xq, float* xe, cudaStream_t s) {
    DF_CUDA_REQUIRE(T >= 1 && T <= 8 && d.rows > 0 && d.rows % kImmaUnit == 0 && d.cols % kImmaUnit == 0 && d.warps > 0,
                    "act_quant (deferred): T in 1..8, rows and cols multiples of 256");
    DF_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(d.out) % 16 == 0 && d.partial, "act_quant (deferred): out 16-byte aligned, scratch");
    static const int warps = [] {  // DF_CUDA_DEFER_CONVERT_WARPS=1/2/4/8: units a block (A/B runs)
        const char* e = std::getenv("DF_CUDA_DEFER_CONVERT_WARPS");
        const int w = e ? std::atoi(e) : 8;
        return w == 1 || w == 2 || w == 4 ? w : 8;
    }();
    // The pair's own instantiation (103 registers against 112): alone -0.5 % in the 27B's decode,
    // +0.5 % beside the deferred norm's lean form (session 53, H100).
    auto* kernel = d.pair ? deferred_kernel<true, kDeferPair> : deferred_kernel<true>;
    launch(kernel, dim3((d.rows / kImmaUnit + warps - 1) / warps, T), 32 * warps, 0, s, d, xq, xe);
}

void launch_imma_deferred_write(const ImmaDeferred& d, int T, cudaStream_t s) {
    DF_CUDA_REQUIRE(T >= 1 && T <= 8 && d.rows % kImmaUnit == 0 && d.partial, "imma deferred write: T in 1..8");
    launch(deferred_kernel<false>, dim3((d.rows / kImmaUnit + 7) / 8, T), 256, 0, s, d, static_cast<uint2*>(nullptr),
           static_cast<float*>(nullptr));
}

size_t imma_scratch_bytes(int blocks) { return sizeof(float) * imma_scratch_floats(blocks * kImmaWarps); }

}  // namespace df::cuda
