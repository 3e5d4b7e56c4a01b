// The type-independent kernels of the exact-f16 prefill GEMM (gemm_q.cuh): the activation
// conversion and the fixed-order split-K reduction.
#include <cuda_fp16.h>

#include <cmath>

#include "backend/cuda/check.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mma.cuh"

namespace df::cuda {
namespace {

constexpr int kActThreads = 256;

// A block per token: the row's largest |x| picks k, then 8 elements per thread and pass. With
// kSwiglu, the first pass forms x = silu(x) * up in place (the second reads it back after the
// block's barrier).
template <bool kSwiglu>
__global__ void __launch_bounds__(kActThreads) gemm_act_kernel(float* __restrict__ x, const float* __restrict__ up, int cols,
                                                               uint16_t* __restrict__ xhl, float* __restrict__ xinv,
                                                               bool wg_order) {
    pdl_begin();
    const int t = blockIdx.x, n4 = cols / 4;
    float4* const row = reinterpret_cast<float4*>(x + static_cast<size_t>(t) * cols);
    const float4* const up4 = kSwiglu ? reinterpret_cast<const float4*>(up + static_cast<size_t>(t) * cols) : nullptr;
    float mx = 0.f;
    // Four loads (of x and up) in flight per thread before their stores: a short prompt has a
    // block per token and little else to hide the latency with.
    constexpr int kBatch = 4;
    for (int i0 = threadIdx.x; i0 < n4; i0 += kBatch * kActThreads) {
        float4 v[kBatch], u[kBatch];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
            const int i = i0 + j * kActThreads;
            if (i < n4) {
                v[j] = row[i];
                if constexpr (kSwiglu) u[j] = up4[i];
            }
        }
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
            const int i = i0 + j * kActThreads;
            if (i >= n4) break;
            if constexpr (kSwiglu) {
                v[j] = make_float4(silu_f(v[j].x) * u[j].x, silu_f(v[j].y) * u[j].y, silu_f(v[j].z) * u[j].z,
                                   silu_f(v[j].w) * u[j].w);
                row[i] = v[j];
            }
            mx = fmaxf(mx, fmaxf(fmaxf(fabsf(v[j].x), fabsf(v[j].y)), fmaxf(fabsf(v[j].z), fabsf(v[j].w))));
        }
    }
    __shared__ float red[kActThreads / 32];
    mx = warp_max(mx);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = mx;
    __syncthreads();
    mx = red[0];
#pragma unroll
    for (int w = 1; w < kActThreads / 32; ++w) mx = fmaxf(mx, red[w]);
    // max = f 2^e with f in [0.5, 1): max 2^(15 - e) lies in [2^14, 2^15). Zero, inf and NaN rows
    // keep k = 0 (their products are then what f32 math gives: zeros, infs, NaNs); k is capped
    // so that 2^k stays a normal float.
    int e = 0;
    const bool finite = mx > 0.f && mx <= 3.4e38f;
    if (finite) frexpf(mx, &e);
    const int k = finite ? min(15 - e, 126) : 0;
    const float scale = ldexpf(1.f, k);
    if (threadIdx.x == 0) xinv[t] = ldexpf(1.f, -k);
    uint16_t* out = xhl + static_cast<size_t>(t) * 2 * cols;
    if (wg_order) {
        // A thread per chunk c of a slab: its columns 8i + 2c, 8i + 2c + 1 (i < 4) are 4 float2
        // loads, its hi and lo one 16-byte store each (4 threads write a slab's 64 hi bytes).
        const float2* row2 = reinterpret_cast<const float2*>(x + static_cast<size_t>(t) * cols);
#pragma unroll 2
        for (int j = threadIdx.x; j < cols / 8; j += kActThreads) {
            const int slab = j / 4, c = j % 4;
            uint32_t hi[4], lo[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float2 v = row2[slab * 16 + 4 * i + c];
                split_pair(v.x * scale, v.y * scale, hi[i], lo[i]);
            }
            uint4* o = reinterpret_cast<uint4*>(out + static_cast<size_t>(slab) * 64) + c;
            o[0] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
            o[4] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
        }
        return;
    }
#pragma unroll 2
    for (int i = threadIdx.x; i < cols / 8; i += kActThreads) {
        const float4 a = row[2 * i], b = row[2 * i + 1];
        const float v[8] = {a.x * scale, a.y * scale, a.z * scale, a.w * scale,
                            b.x * scale, b.y * scale, b.z * scale, b.w * scale};
        uint32_t hi[4], lo[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) split_pair(v[2 * j], v[2 * j + 1], hi[j], lo[j]);
        // Element 8i lies in slab 8i / 32 at offset 8i % 32: hi at slab * 64 + offset, lo 32 later.
        const size_t base = static_cast<size_t>(i / 4) * 64 + (i % 4) * 8;
        *reinterpret_cast<uint4*>(out + base) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
        *reinterpret_cast<uint4*>(out + base + 32) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
    }
}

__global__ void gemm_reduce_kernel(const float* partial, int splits, int64_t n, float* out, bool accumulate) {
    pdl_begin();
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        float y = accumulate ? out[i] : 0.f;
        for (int z = 0; z < splits; ++z) y += __ldcg(partial + z * n + i);
        out[i] = y;
    }
}

void check_act_args(const void* x, const void* up, int cols, const void* xhl) {
    DF_CUDA_REQUIRE(cols > 0 && cols % 32 == 0, "gemm_act: cols must be a multiple of 32");
    DF_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(up) % 16 == 0 &&
                        reinterpret_cast<uintptr_t>(xhl) % 16 == 0,
                    "gemm_act: x, up and xhl must be 16-byte aligned");
}

}  // namespace

void launch_gemm_act(const float* x, int T, int cols, uint16_t* xhl, float* xinv, bool wg_order, cudaStream_t s) {
    if (T <= 0) return;
    check_act_args(x, nullptr, cols, xhl);
    // The kernel writes x only when it forms the SwiGLU.
    launch(gemm_act_kernel<false>, T, kActThreads, 0, s, const_cast<float*>(x), nullptr, cols, xhl, xinv, wg_order);
}

void launch_swiglu_gemm_act(float* gate, const float* up, int T, int cols, uint16_t* xhl, float* xinv, bool wg_order,
                            cudaStream_t s) {
    if (T <= 0) return;
    check_act_args(gate, up, cols, xhl);
    launch(gemm_act_kernel<true>, T, kActThreads, 0, s, gate, up, cols, xhl, xinv, wg_order);
}

void launch_gemm_reduce(const float* partial, int splits, int64_t n, float* out, bool accumulate, cudaStream_t s) {
    if (n <= 0) return;
    const int blocks = static_cast<int>(std::min<int64_t>((n + 255) / 256, 4096));
    launch(gemm_reduce_kernel, blocks, 256, 0, s, partial, splits, n, out, accumulate);
}

}  // namespace df::cuda
