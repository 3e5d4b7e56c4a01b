// Activations for the integer tensor-core matvec (imma.cuh): per token and 256-column unit, a
// power-of-two exponent and four int8 limbs per element, stored as the kernels' B fragments.
#include "backend/cuda/act_quant.cuh"
#include "backend/cuda/imma.cuh"
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

}  // namespace

size_t act_quant_xq_bytes(int cols) { return static_cast<size_t>(4) * (cols / 32) * 32 * 8; }

void launch_act_quant(const float* x, int T, int cols, uint2* xq, float* xe, cudaStream_t s) {
    DF_CUDA_REQUIRE(T >= 1 && T <= 8 && cols > 0 && cols % kImmaUnit == 0, "act_quant: T in 1..8, cols a multiple of 256");
    DF_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(x) % 16 == 0, "act_quant: x must be 16-byte aligned");
    launch(act_quant_kernel, dim3((cols / kImmaUnit + 7) / 8, T), 256, 0, s, x, cols, xq, xe);
}

size_t imma_scratch_bytes(int blocks) { return sizeof(float) * imma_scratch_floats(blocks * kImmaWarps); }

}  // namespace df::cuda
