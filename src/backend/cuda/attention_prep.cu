// Per-head q/k norm, RoPE and KV store for prefill (T > 8): norm.cu's attn_prep_kernel with a
// warp per head. The block's four warps take heads hb + w, hb + w + 4, ... with no block barrier
// between a head's load, norm, rotation and store (4B prefill +2.4 %). A copy of attn_prep_kernel's
// per-head steps on purpose: one template for both (in norm.cu) made decode ~1 % slower in three
// A/B runs, and sharing the steps through inline helpers (attn_prep_kernel at 32 registers with a
// 4-byte spill instead of 31) 2 % slower. The sum of squares keeps attn_prep_kernel's order (thread
// i = 32 w + l summing elements i, i + 128, ..., warp w's xor tree, then w = 0..3 in order), so
// both give the same bits.
#include <cuda_fp16.h>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/norm_sum.cuh"

namespace df::cuda {
namespace {

__global__ void __launch_bounds__(128) attn_prep_warps_kernel(const AttnPrepArgs a, int per_block) {
    pdl_trigger();  // the angles before pdl_wait: no kernel of this forward writes positions (launch.cuh)
    const int t = blockIdx.y, heads0 = a.set[0].heads;
    const int total = heads0 + (a.sets > 1 ? a.set[1].heads : 0);
    const int hb = blockIdx.x * per_block, he = min(total, hb + per_block);
    const int head_dim = a.head_dim, half = a.n_rot / 2;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    __shared__ float bufs[4][512], rc[256], rs[256];
    float* const buf = bufs[warp];
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        // ggml's rope cache: theta_i by i repeated f32 multiplications from the position.
        float theta = static_cast<float>(a.pos[t]);
        for (int k = 0; k < i; ++k) theta *= a.theta_scale;
        rc[i] = cosf(theta);
        rs[i] = sinf(theta);
    }
    pdl_wait();
    __syncthreads();  // the angles are in place
    for (int hh = hb + warp; hh < he; hh += 4) {
        const int first = hh >= heads0;  // (the second set)
        const int h = first ? hh - heads0 : hh;
        // Field by field: indexing the parameter struct with a runtime value would copy it to local memory.
        float* const x = first ? a.set[1].x : a.set[0].x;
        const int head_stride = first ? a.set[1].head_stride : a.set[0].head_stride;
        const int row = first ? a.set[1].row : a.set[0].row;
        const float* const norm_w = first ? a.set[1].norm_w : a.set[0].norm_w;
        float* v = x + static_cast<int64_t>(t) * row + static_cast<int64_t>(h) * head_stride;

        // The KV store of this head (the k set only): after the norm and rotation, from the values
        // written to x; v's head is copied alongside.
        const bool store = a.k_cache && first == a.sets - 1;
        const int64_t cache_at = store ? static_cast<int64_t>(a.pos[t]) * row + static_cast<int64_t>(h) * head_dim : 0;
        auto put = [&](int i, float val) {
            v[i] = val;
            if (!store) return;
            if (a.half_cache)
                static_cast<__half*>(a.k_cache)[cache_at + i] = __float2half_rn(val);
            else
                static_cast<float*>(a.k_cache)[cache_at + i] = val;
        };
        if (store) {
            const float* vs = a.v + static_cast<int64_t>(t) * row + static_cast<int64_t>(h) * head_dim;
            for (int i = lane; i < head_dim; i += 32) {
                if (a.half_cache)
                    static_cast<__half*>(a.v_cache)[cache_at + i] = __float2half_rn(vs[i]);
                else
                    static_cast<float*>(a.v_cache)[cache_at + i] = vs[i];
            }
        }

        __syncwarp();  // the previous head is done with buf
        for (int i = lane; i < head_dim; i += 32) buf[i] = v[i];
        __syncwarp();
        if (norm_w) {
            double tot = 0;
#pragma unroll
            for (int w = 0; w < 4; ++w) {  // lane l forms warp w's partial of attn_prep_kernel
                double sw = 0;
                for (int i = 32 * w + lane; i < head_dim; i += 128) sw += static_cast<double>(__fmul_rn(buf[i], buf[i]));
                tot = w == 0 ? warp_sum(sw) : tot + warp_sum(sw);
            }
            const float scale = rms_scale(tot, head_dim, a.eps);
            for (int i = lane; i < head_dim; i += 32) buf[i] = __fmul_rn(__fmul_rn(buf[i], scale), norm_w[i]);
            __syncwarp();
        }
        for (int i = lane; i < head_dim; i += 32) {
            if (i < half) {
                const float c = rc[i], sn = rs[i];
                const float x0 = buf[i], x1 = buf[i + half];
                put(i, __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, sn)));
                put(i + half, __fadd_rn(__fmul_rn(x0, sn), __fmul_rn(x1, c)));
            } else if (i >= a.n_rot) {
                put(i, buf[i]);
            }
        }
    }
}

}  // namespace

void launch_attn_prep_warps(const AttnPrepArgs& a, int per_block, dim3 grid, cudaStream_t s) {
    launch(attn_prep_warps_kernel, grid, 128, 0, s, a, per_block);
}

}  // namespace df::cuda
