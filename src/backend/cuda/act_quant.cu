// Activations for the integer tensor-core matvec (imma.cuh): per token and 256-column unit, a
// power-of-two exponent and four int8 limbs per element, stored as the kernels' B fragments.
#include <cmath>

#include "backend/cuda/imma.cuh"

namespace df::cuda {
namespace {

// One block per (unit, token), one element per thread.
__global__ void __launch_bounds__(kImmaUnit) act_quant_kernel(const float* x, int cols, uint8_t* xq, float* xe) {
    const int u = blockIdx.x, tok = blockIdx.y, i = threadIdx.x;
    const int n_units = gridDim.x, slabs = cols / 32;
    const float v = x[static_cast<size_t>(tok) * cols + static_cast<size_t>(u) * kImmaUnit + i];
    __shared__ float wmax[kImmaUnit / 32];
    __shared__ int wbad[kImmaUnit / 32];
    // fmaxf drops NaN: non-finite inputs are tracked apart and poison the unit's exponent.
    const float m = warp_max(fabsf(v));
    const int bad = __any_sync(0xffffffffu, !isfinite(v));
    if ((i & 31) == 0) {
        wmax[i >> 5] = m;
        wbad[i >> 5] = bad;
    }
    __syncthreads();
    float mx = 0.f;
    int any_bad = 0;
#pragma unroll
    for (int w = 0; w < kImmaUnit / 32; ++w) {
        mx = fmaxf(mx, wmax[w]);
        any_bad |= wbad[w];
    }
    // x = 2^E * q with |q| <= 2^30: E = exponent(max) - 30 (max < 2^exponent).
    int ex = 0;
    frexpf(mx, &ex);
    const int E = mx > 0.f ? ex - 30 : 0;
    const int qv = any_bad ? 0 : __float2int_rn(ldexpf(v, -E));
    if (i == 0) xe[static_cast<size_t>(tok) * n_units + u] = any_bad ? __int_as_float(0x7fc00000) : ldexpf(1.f, E);
    // Balanced base-256 digits: each limb in [-128, 127], the top one |l3| <= 65.
    int r = qv;
    const int s = (i & 255) >> 5, q = (i & 31) >> 3, j = i & 7;
    const int nt = tok >> 1;
    uint8_t* dst = xq + (static_cast<size_t>(nt * slabs + u * 8 + s) * 32) * 8 + j;
#pragma unroll
    for (int limb = 0; limb < 4; ++limb) {
        const int d = limb < 3 ? static_cast<int>(static_cast<int8_t>(r & 255)) : r;
        r = (r - d) >> 8;
        const int lane = (4 * (tok & 1) + limb) * 4 + q;
        dst[lane * 8] = static_cast<uint8_t>(d);
    }
}

}  // namespace

size_t act_quant_xq_bytes(int cols) { return static_cast<size_t>(4) * (cols / 32) * 32 * 8; }

void launch_act_quant(const float* x, int T, int cols, uint2* xq, float* xe, cudaStream_t s) {
    DF_CUDA_REQUIRE(T >= 1 && T <= 8 && cols > 0 && cols % kImmaUnit == 0, "act_quant: T in 1..8, cols a multiple of 256");
    act_quant_kernel<<<dim3(cols / kImmaUnit, T), kImmaUnit, 0, s>>>(x, cols, reinterpret_cast<uint8_t*>(xq), xe);
    DF_CUDA_LAUNCH_CHECK();
}

size_t imma_scratch_bytes(int blocks) { return sizeof(float) * imma_scratch_floats(blocks * kImmaWarps); }

}  // namespace df::cuda
