// RMSNorm, per-head norm + NeoX RoPE, gated RMSNorm. Sums of squares in double and products
// rounded one at a time (no fused multiply-add) so results match the CPU reference to the
// last bit where the summation order allows.
#include "backend/cuda/act_quant.cuh"
#include "backend/cuda/check.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"

namespace df::cuda {
namespace {

constexpr int kNormThreads = 256;

// Sum over the block of per-thread doubles; every thread gets the total.
__device__ double block_sum(double v) {
    __shared__ double part[kNormThreads / 32];
    __shared__ double total;
    v = warp_sum(v);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        double s = lane < static_cast<int>(blockDim.x >> 5) ? part[lane] : 0.0;
        s = warp_sum(s);
        if (lane == 0) total = s;
    }
    __syncthreads();
    const double r = total;
    __syncthreads();  // part/total may be reused by a following call
    return r;
}

__device__ float rms_scale(double sumsq, int n, float eps) {
    const float mean = static_cast<float>(sumsq / n);
    return 1.0f / sqrtf(mean + eps);
}

// One row by the whole block (out may alias x).
__device__ void rmsnorm_row(const float* xr, const float* w, int n, float eps, float* o) {
    double s = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += static_cast<double>(__fmul_rn(xr[i], xr[i]));
    const float scale = rms_scale(block_sum(s), n, eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float y = __fmul_rn(xr[i], scale);
        o[i] = w ? __fmul_rn(y, w[i]) : y;
    }
}

__global__ void __launch_bounds__(kNormThreads) rmsnorm_kernel(const float* x, int64_t xs, const float* w, int n,
                                                               float eps, float* out, int64_t os) {
    pdl_begin();
    rmsnorm_row(x + blockIdx.x * xs, w, n, eps, out + blockIdx.x * os);
}

// RMSNorm of up to 8 rows that also writes the rows in the imma activation format (the matvecs
// that read them then skip their own conversion): a warp per 256-column unit reads back the
// stored outputs (out may alias x).
__global__ void __launch_bounds__(kNormThreads) rmsnorm_quant_kernel(const float* x, int64_t xs, const float* w, int n,
                                                                     float eps, float* out, uint2* xq, float* xe) {
    pdl_begin();
    const int row = blockIdx.x;
    float* o = out + static_cast<int64_t>(row) * n;
    rmsnorm_row(x + row * xs, w, n, eps, o);
    __syncthreads();
    const int lane = threadIdx.x & 31, n_units = n / 256;
    for (int u = threadIdx.x >> 5; u < n_units; u += kNormThreads / 32) {
        float v[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = o[u * 256 + 8 * lane + j];
        act_quant_unit(v, row, u, n_units, n / 32, xq, xe, lane);
    }
}

// One block per (head, token); head_dim <= 2 * blockDim.
__global__ void __launch_bounds__(128) head_norm_rope_kernel(float* x, int heads, int head_dim, int head_stride,
                                                             int row, const float* norm_w, float eps, int n_rot,
                                                             float theta_scale, const int32_t* pos) {
    pdl_begin();
    const int h = blockIdx.x, t = blockIdx.y;
    float* v = x + static_cast<int64_t>(t) * row + static_cast<int64_t>(h) * head_stride;
    __shared__ float buf[512];
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) buf[i] = v[i];
    __syncthreads();
    if (norm_w) {
        double s = 0;
        for (int i = threadIdx.x; i < head_dim; i += blockDim.x) s += static_cast<double>(__fmul_rn(buf[i], buf[i]));
        __shared__ double part[4];
        s = warp_sum(s);
        if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = s;
        __syncthreads();
        const double tot = part[0] + part[1] + part[2] + part[3];
        const float scale = rms_scale(tot, head_dim, eps);
        for (int i = threadIdx.x; i < head_dim; i += blockDim.x) buf[i] = __fmul_rn(__fmul_rn(buf[i], scale), norm_w[i]);
        __syncthreads();
    }
    const int half = n_rot / 2;
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) {
        if (i < half) {
            // ggml's rope cache: theta_i by i repeated f32 multiplications from the position.
            float theta = static_cast<float>(pos[t]);
            for (int k = 0; k < i; ++k) theta *= theta_scale;
            const float c = cosf(theta), sn = sinf(theta);
            const float x0 = buf[i], x1 = buf[i + half];
            v[i] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, sn));
            v[i + half] = __fadd_rn(__fmul_rn(x0, sn), __fmul_rn(x1, c));
        } else if (i >= n_rot) {
            v[i] = buf[i];
        }
    }
}

__global__ void __launch_bounds__(128) gated_rmsnorm_kernel(const float* x, const float* z, const float* w, int n,
                                                            float eps, float* out) {
    pdl_begin();
    const int64_t r = blockIdx.x;
    const float* xr = x + r * n;
    const float* zr = z + r * n;
    float* o = out + r * n;
    __shared__ float buf[1024];
    double s = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        buf[i] = xr[i];
        s += static_cast<double>(__fmul_rn(buf[i], buf[i]));
    }
    __shared__ double part[4];
    s = warp_sum(s);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = s;
    __syncthreads();
    const float scale = rms_scale(part[0] + part[1] + part[2] + part[3], n, eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        o[i] = __fmul_rn(__fmul_rn(__fmul_rn(buf[i], scale), w[i]), silu_f(zr[i]));
}

}  // namespace

void launch_rmsnorm(const float* x, int64_t x_stride, const float* w, int rows, int n, float eps, float* out,
                    int64_t out_stride, cudaStream_t s) {
    if (rows <= 0) return;
    launch(rmsnorm_kernel, rows, kNormThreads, 0, s, x, x_stride, w, n, eps, out, out_stride);
}

void launch_rmsnorm_quant(const float* x, int64_t x_stride, const float* w, int rows, int n, float eps, float* out,
                          uint2* xq, float* xe, cudaStream_t s) {
    if (rows <= 0) return;
    DF_CUDA_REQUIRE(rows <= 8 && n % 256 == 0, "rmsnorm_quant: at most 8 rows, n a multiple of 256");
    launch(rmsnorm_quant_kernel, rows, kNormThreads, 0, s, x, x_stride, w, n, eps, out, xq, xe);
}

void launch_head_norm_rope(float* x, int T, int heads, int head_dim, int head_stride, int row, const float* norm_w,
                           float eps, int n_rot, float theta_scale, const int32_t* pos, cudaStream_t s) {
    if (T <= 0) return;
    DF_CUDA_REQUIRE(head_dim <= 512, "head_norm_rope: head_dim above 512");
    DF_CUDA_REQUIRE(n_rot <= head_dim && n_rot % 2 == 0, "head_norm_rope: n_rot must be even and <= head_dim");
    launch(head_norm_rope_kernel, dim3(heads, T), 128, 0, s, x, heads, head_dim, head_stride, row, norm_w, eps, n_rot,
                                                        theta_scale, pos);
}

void launch_gated_rmsnorm(const float* x, const float* z, const float* w, int T, int heads, int n, float eps,
                          float* out, cudaStream_t s) {
    if (T <= 0) return;
    DF_CUDA_REQUIRE(n <= 1024, "gated_rmsnorm: head size above 1024");
    launch(gated_rmsnorm_kernel, T * heads, 128, 0, s, x, z, w, n, eps, out);
}

}  // namespace df::cuda
