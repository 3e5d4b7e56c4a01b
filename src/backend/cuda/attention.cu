// Causal GQA attention over the KV cache: flash decoding for up to 8 tokens (prefill chunks
// of 64, 128 or 256-wide heads go to the tensor-core kernel of attention_prefill.cu).
//
// Grid (split, kv head x head chunk, token). A block takes up to 8 query heads that share one
// KV head (so each K/V row read serves all of them) and one contiguous range of that token's keys
// [0, pos[t]]; the range is cut into `nsplit` parts on the device from pos, so a captured graph
// stays valid as the context grows. Each warp runs an online softmax over its keys with the
// head's output slice in registers (lane owns head_dim/32 consecutive dims); the block's warps
// are merged in shared memory, and the splits by a second kernel when nsplit > 1.
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "backend/cuda/attention_prefill.h"
#include "backend/cuda/check.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"

namespace df::cuda {
namespace {

constexpr int kAttnWarps = 4;
constexpr int kMaxGroup = 8;  // query heads per block
constexpr int kMaxDecodeTokens = 8;  // up to this T: split flash decoding; above: the prefill kernel

// How a context of n_kv keys is split: pieces of `per` keys, at least split_keys (a short context
// does not pay for many nearly empty blocks and a combine) and few enough that `used` <= the
// launched nsplit. Every used split is non-empty: (used - 1) * per < n_kv. A function of the
// position only, so decode steps and verify passes split a token's keys the same way.
struct KeySplit {
    int per, used;
};
DF_DEV KeySplit key_split(int n_kv, int nsplit, int split_keys) {
    const int per = max(split_keys, (n_kv + nsplit - 1) / nsplit);
    return {per, (n_kv + per - 1) / per};
}

// One lane's DPL values of a cache row as loaded (f16 pairs or f32), converted when used, so that
// a warp keeps the next keys' rows in flight while it scores one.
template <int DPL, bool kHalf>
struct RawRow {
    static constexpr bool kPairs = kHalf && DPL % 2 == 0;  // f16 pairs; else one value per word
    uint32_t w[kPairs ? DPL / 2 : DPL];
};

template <int DPL, bool kHalf>
DF_DEV void load_raw(const void* base, int64_t idx, RawRow<DPL, kHalf>& r) {
    if constexpr (kHalf) {
        const __half* p = static_cast<const __half*>(base) + idx;
        if constexpr (DPL % 8 == 0) {
#pragma unroll
            for (int e = 0; e < DPL / 8; ++e) {
                const uint4 v = __ldg(reinterpret_cast<const uint4*>(p) + e);
                r.w[4 * e] = v.x; r.w[4 * e + 1] = v.y; r.w[4 * e + 2] = v.z; r.w[4 * e + 3] = v.w;
            }
        } else if constexpr (DPL % 4 == 0) {
#pragma unroll
            for (int e = 0; e < DPL / 4; ++e) {
                const uint2 v = __ldg(reinterpret_cast<const uint2*>(p) + e);
                r.w[2 * e] = v.x; r.w[2 * e + 1] = v.y;
            }
        } else if constexpr (DPL % 2 == 0) {
#pragma unroll
            for (int e = 0; e < DPL / 2; ++e) r.w[e] = __ldg(reinterpret_cast<const uint32_t*>(p) + e);
        } else {
#pragma unroll
            for (int e = 0; e < DPL; ++e) r.w[e] = __ldg(reinterpret_cast<const unsigned short*>(p) + e);
        }
    } else {
        const float* p = static_cast<const float*>(base) + idx;
        if constexpr (DPL % 4 == 0) {
#pragma unroll
            for (int e = 0; e < DPL / 4; ++e) {
                const float4 v = __ldg(reinterpret_cast<const float4*>(p) + e);
                r.w[4 * e] = __float_as_uint(v.x); r.w[4 * e + 1] = __float_as_uint(v.y);
                r.w[4 * e + 2] = __float_as_uint(v.z); r.w[4 * e + 3] = __float_as_uint(v.w);
            }
        } else {
#pragma unroll
            for (int e = 0; e < DPL; ++e) r.w[e] = __float_as_uint(__ldg(p + e));
        }
    }
}

template <int DPL, bool kHalf>
DF_DEV void unpack_row(const RawRow<DPL, kHalf>& r, float (&v)[DPL]) {
    if constexpr (RawRow<DPL, kHalf>::kPairs) {
#pragma unroll
        for (int i = 0; i < DPL / 2; ++i) {
            const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&r.w[i]));
            v[2 * i] = f.x;
            v[2 * i + 1] = f.y;
        }
    } else if constexpr (kHalf) {
#pragma unroll
        for (int e = 0; e < DPL; ++e) v[e] = __half2float(__ushort_as_half(static_cast<unsigned short>(r.w[e])));
    } else {
#pragma unroll
        for (int e = 0; e < DPL; ++e) v[e] = __uint_as_float(r.w[e]);
    }
}

// G >= group query heads per block in registers (a power of two): heads group .. G - 1 repeat
// the last one and are not written, so the per-key loop over the heads has no branch and their
// independent reductions interleave (with a break at `group` they ran one after another).
template <int DPL, bool kHalf, int G>
__global__ void __launch_bounds__(kAttnWarps * 32) attn_kernel(const AttnArgs a, int group, int nsplit) {
    pdl_begin();
    constexpr int D = 32 * DPL;
    const int split = blockIdx.x, t = blockIdx.z;
    const int ratio = a.heads / a.kv_heads, chunks = ratio / group;
    const int kvh = blockIdx.y / chunks;
    const int h0 = kvh * ratio + (blockIdx.y % chunks) * group;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

    const int n_kv = a.pos[t] + 1;
    const auto [per, used] = key_split(n_kv, nsplit, a.split_keys);
    if (split >= used) return;
    const int k_begin = split * per, k_end = min(n_kv, k_begin + per);

    float qv[G][DPL];
#pragma unroll
    for (int i = 0; i < G; ++i) {
        const int hi = min(i, group - 1);
        const float* qp = a.q + static_cast<int64_t>(t) * a.q_row + static_cast<int64_t>(h0 + hi) * a.q_stride + lane * DPL;
#pragma unroll
        for (int e = 0; e < DPL; ++e) qv[i][e] = qp[e];
    }
    float m[G], l[G], acc[G][DPL];
#pragma unroll
    for (int i = 0; i < G; ++i) {
        m[i] = -INFINITY;
        l[i] = 0.f;
#pragma unroll
        for (int e = 0; e < DPL; ++e) acc[i][e] = 0.f;
    }
    const int64_t kv_row = static_cast<int64_t>(a.kv_heads) * D;
    const int64_t col = static_cast<int64_t>(kvh) * D + lane * DPL;
    // The warp's keys are k_begin + warp + kAttnWarps j, in that order; slot j % kAhead holds
    // key j's rows, refilled with key j + kAhead's as soon as it is consumed.
    constexpr int kAhead = DPL <= 4 ? 4 : 2;
    RawRow<DPL, kHalf> kraw[kAhead], vraw[kAhead];
#pragma unroll
    for (int j = 0; j < kAhead; ++j) {
        const int key = k_begin + warp + kAttnWarps * j;
        if (key < k_end) {
            load_raw<DPL, kHalf>(a.k_cache, key * kv_row + col, kraw[j]);
            load_raw<DPL, kHalf>(a.v_cache, key * kv_row + col, vraw[j]);
        }
    }
    for (int base = k_begin + warp; base < k_end; base += kAhead * kAttnWarps) {
#pragma unroll
        for (int j = 0; j < kAhead; ++j) {
            const int key = base + kAttnWarps * j;
            if (key >= k_end) break;
            float kr[DPL], vr[DPL];
            unpack_row(kraw[j], kr);
            unpack_row(vraw[j], vr);
            const int next = key + kAhead * kAttnWarps;
            if (next < k_end) {
                load_raw<DPL, kHalf>(a.k_cache, next * kv_row + col, kraw[j]);
                load_raw<DPL, kHalf>(a.v_cache, next * kv_row + col, vraw[j]);
            }
#pragma unroll
            for (int i = 0; i < G; ++i) {
                float p = 0.f;
#pragma unroll
                for (int e = 0; e < DPL; ++e) p = fmaf(qv[i][e], kr[e], p);
                const float sc = warp_sum(p) * a.scale;
                const float mn = fmaxf(m[i], sc);
                const float corr = expf(m[i] - mn), pe = expf(sc - mn);
                m[i] = mn;
                l[i] = l[i] * corr + pe;
#pragma unroll
                for (int e = 0; e < DPL; ++e) acc[i][e] = fmaf(pe, vr[e], acc[i][e] * corr);
            }
        }
    }

    // Merge the warps: M = max m_w, L = sum l_w e^(m_w - M), O = sum acc_w e^(m_w - M).
    __shared__ float sm_m[kAttnWarps][G], sm_l[kAttnWarps][G];
    __shared__ float sm_acc[kAttnWarps][G][D];
#pragma unroll
    for (int i = 0; i < G; ++i) {
        if (i >= group) break;
        if (lane == 0) {
            sm_m[warp][i] = m[i];
            sm_l[warp][i] = l[i];
        }
#pragma unroll
        for (int e = 0; e < DPL; ++e) sm_acc[warp][i][lane * DPL + e] = acc[i][e];
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < group * D; idx += blockDim.x) {
        const int i = idx / D, d = idx % D;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < kAttnWarps; ++w) M = fmaxf(M, sm_m[w][i]);
        float L = 0.f, O = 0.f;
        if (M != -INFINITY) {
#pragma unroll
            for (int w = 0; w < kAttnWarps; ++w) {
                const float f = sm_m[w][i] == -INFINITY ? 0.f : expf(sm_m[w][i] - M);
                L += sm_l[w][i] * f;
                O += sm_acc[w][i][d] * f;
            }
        }
        const int h = h0 + i;
        if (used == 1) {
            a.out[(static_cast<int64_t>(t) * a.heads + h) * D + d] = O / L;
        } else {
            float* pp = a.partial + ((static_cast<int64_t>(t) * a.heads + h) * nsplit + split) * (D + 2);
            if (d == 0) {
                pp[0] = M;
                pp[1] = L;
            }
            pp[2 + d] = O;
        }
    }
}

// out = sum_s O_s e^(M_s - M) / sum_s L_s e^(M_s - M) over the splits of one (token, head).
// Thread s reads split s's (M, L) and forms its weight; then kCombineThreads / D threads per
// output value each sum every kSG-th split (loads unrolled eight at a time) and the kSG partial
// sums are added in order. (A thread per value looping over the splits, each step an L2 round
// trip, took ~10 us per 4B layer.)
constexpr int kCombineThreads = 256, kMaxSplits = 64;
__global__ void __launch_bounds__(kCombineThreads) attn_combine_kernel(const float* partial, int heads, int D, int nsplit,
                                                                       int split_keys, const int32_t* pos, float* out) {
    pdl_begin();
    const int h = blockIdx.x, t = blockIdx.y, tid = threadIdx.x;
    const int used = key_split(pos[t] + 1, nsplit, split_keys).used;
    if (used == 1) return;  // the attention kernel wrote the result
    const float* pp = partial + (static_cast<int64_t>(t) * heads + h) * nsplit * (D + 2);
    __shared__ float sm_m[kMaxSplits], sm_l[kMaxSplits], sm_f[kMaxSplits], sm_o[kCombineThreads];
    if (tid < used) {
        sm_m[tid] = pp[tid * (D + 2)];
        sm_l[tid] = pp[tid * (D + 2) + 1];
    }
    __syncthreads();
    if (tid < used) {
        float M = -INFINITY;
        for (int s = 0; s < used; ++s) M = fmaxf(M, sm_m[s]);
        sm_f[tid] = sm_m[tid] == -INFINITY ? 0.f : expf(sm_m[tid] - M);
    }
    __syncthreads();
    const int kSG = kCombineThreads / D, d = tid % D, sg = tid / D;  // D <= 256
    float O = 0.f;
    if (sg < kSG) {
#pragma unroll 8
        for (int s = sg; s < used; s += kSG) O += pp[s * (D + 2) + 2 + d] * sm_f[s];
    }
    sm_o[tid] = O;
    __syncthreads();
    if (tid < D) {
        float L = 0.f, v = sm_o[tid];
        for (int s = 0; s < used; ++s) L += sm_l[s] * sm_f[s];
        for (int k = 1; k < kSG; ++k) v += sm_o[k * D + tid];
        out[(static_cast<int64_t>(t) * heads + h) * D + tid] = v / L;
    }
}

template <int DPL, int G>
void attn_dispatch_g(const AttnArgs& a, dim3 grid, int group, int nsplit, cudaStream_t s) {
    if (a.half_cache)
        launch(attn_kernel<DPL, true, G>, grid, kAttnWarps * 32, 0, s, a, group, nsplit);
    else
        launch(attn_kernel<DPL, false, G>, grid, kAttnWarps * 32, 0, s, a, group, nsplit);
}

template <int DPL>
void attn_dispatch(const AttnArgs& a, dim3 grid, int group, int nsplit, cudaStream_t s) {
    if (group == 1)
        attn_dispatch_g<DPL, 1>(a, grid, group, nsplit, s);
    else if (group == 2)
        attn_dispatch_g<DPL, 2>(a, grid, group, nsplit, s);
    else if (group <= 4)
        attn_dispatch_g<DPL, 4>(a, grid, group, nsplit, s);
    else
        attn_dispatch_g<DPL, kMaxGroup>(a, grid, group, nsplit, s);
}

}  // namespace

void launch_attention(const AttnArgs& a, cudaStream_t s) {
    if (a.T <= 0) return;
    DF_CUDA_REQUIRE(a.head_dim % 32 == 0 && a.head_dim <= 256, "attention: head_dim must be 32, 64, ..., 256");
    DF_CUDA_REQUIRE(a.kv_heads > 0 && a.heads % a.kv_heads == 0, "attention: heads must be a multiple of kv_heads");
    DF_CUDA_REQUIRE(a.split_keys >= 1, "attention: split_keys must be positive");
    DF_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(a.k_cache) % 16 == 0 && reinterpret_cast<uintptr_t>(a.v_cache) % 16 == 0,
                    "attention: caches must be 16-byte aligned");
    const int ratio = a.heads / a.kv_heads;
    int group = 1;
    for (int g = std::min(ratio, kMaxGroup); g >= 1; --g)
        if (ratio % g == 0) {
            group = g;
            break;
        }
    if (a.T > kMaxDecodeTokens) {
        if (attention_prefill_supported(a.head_dim)) {
            launch_attention_prefill(a, group, s);
            return;
        }
        // Other head dims: slices of up to 8 tokens through the split kernel below, whose
        // scratch for partial results holds 8 tokens.
        for (int t0 = 0; t0 < a.T; t0 += kMaxDecodeTokens) {
            AttnArgs b = a;
            b.T = std::min(kMaxDecodeTokens, a.T - t0);
            b.q = a.q + static_cast<int64_t>(t0) * a.q_row;
            b.pos = a.pos + t0;
            b.out = a.out + static_cast<int64_t>(t0) * a.heads * a.head_dim;
            launch_attention(b, s);
        }
        return;
    }
    // Enough blocks for four per SM (a warp has only kAhead keys' rows in flight: long contexts
    // need many warps), bounded by the scratch for partial results. The
    // split depends on the head layout only (not on T): a token's result is then the same in a
    // one-token step and in a verify pass of up to 8 tokens.
    const int base_blocks = a.kv_heads * (ratio / group);
    int nsplit = std::clamp((4 * a.sm_count + base_blocks - 1) / base_blocks, 1, kMaxSplits);
    const size_t per_split = static_cast<size_t>(kMaxDecodeTokens) * a.heads * (a.head_dim + 2);
    while (nsplit > 1 && per_split * nsplit > a.partial_floats) --nsplit;
    const dim3 grid(nsplit, a.kv_heads * (ratio / group), a.T);
    switch (a.head_dim / 32) {
        case 1: attn_dispatch<1>(a, grid, group, nsplit, s); break;
        case 2: attn_dispatch<2>(a, grid, group, nsplit, s); break;
        case 3: attn_dispatch<3>(a, grid, group, nsplit, s); break;
        case 4: attn_dispatch<4>(a, grid, group, nsplit, s); break;
        case 5: attn_dispatch<5>(a, grid, group, nsplit, s); break;
        case 6: attn_dispatch<6>(a, grid, group, nsplit, s); break;
        case 7: attn_dispatch<7>(a, grid, group, nsplit, s); break;
        case 8: attn_dispatch<8>(a, grid, group, nsplit, s); break;
    }
    if (nsplit > 1) {
        launch(attn_combine_kernel, dim3(a.heads, a.T), kCombineThreads, 0, s, a.partial, a.heads, a.head_dim, nsplit,
               a.split_keys, a.pos, a.out);
    }
}

}  // namespace df::cuda
