// Causal GQA attention of a prefill chunk (T > 8) on the tensor cores: flash attention with
// mma.m16n8k16 (f16 operands, f32 accumulation). On sm_90a, 128-wide heads over an f16 cache go
// to the wgmma form of the same kernel (attention_prefill_wg.cu).
//
// Block = 4 warps over 64 query rows (row = token x query head of one KV head, as in decode, so
// every K/V row read serves the whole group); warp w owns rows 16w .. 16w + 15. Per tile of 64
// keys, K and V go to shared memory as f16; each warp computes its 16 x 64 scores with mma, runs
// the online softmax on them in registers and feeds the probabilities back as the A operand of
// P V (the accumulator layout of the scores is the A-fragment layout). Tiles of later tokens,
// which see more keys, are scheduled first.
//
// Numerics: the f32 queries and probabilities are split into f16 hi + lo (hi + lo equals the
// value to ~2^-22 relative); an f16 cache is exact in f16, an f32 cache is split too. Products
// are exact in the f32 accumulators: QK = qh k + ql k (f32 cache: qh kh + ql kh + qh kl), PV the
// same with p and v; the dropped lo x lo terms are ~2^-22 relative. Values must lie within f16
// range (|x| < 65504), which an f16 cache implies anyway. The queries carry the score scale times
// log2 e, so each probability is one ex2.approx (relative error ~2^-22 too).
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "backend/cuda/attention_prefill.h"
#include "backend/cuda/check.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mma.cuh"

namespace df::cuda {
namespace {

constexpr int kRows = 64, kKeys = 64, kWarps = 4;

// Shared-memory rows of D + 8 halves: the 8 rows an ldmatrix reads start 16 bytes apart modulo
// 128, so they fall in distinct banks.
template <int D>
constexpr int pitch() { return D + 8; }

// 2^x by the SFU (relative error ~2^-22, below the hi/lo split's; ex2(-inf) = 0).
__device__ __forceinline__ float ex2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// An f16 cache's K/V tiles are double-buffered (the next tile's copies in flight while this one
// is multiplied: 4B prefill +0.7 % at 4096 tokens, -0.6 % at 512, one block less per SM); an f32
// cache is converted to hi/lo through registers, one tile at a time.
template <int D, bool kHalf>
constexpr size_t smem_bytes() {
    return sizeof(__half) * pitch<D>() * (2 * kRows + 4 * kKeys);
}


template <int D, bool kHalf>
__global__ void __launch_bounds__(kWarps * 32) attn_prefill_mma_kernel(const AttnArgs a, int group) {
    constexpr int P = pitch<D>();
    extern __shared__ __align__(16) __half smem_h[];
    __half* const qh = smem_h;              // [kRows][P]
    __half* const ql = qh + kRows * P;
    __half* const kh = ql + kRows * P;      // [kKeys][P] (f16 cache: stage 0; stage s at + s * kStage)
    __half* const vh = kh + kKeys * P;
    __half* const kl = vh + kKeys * P;      // f32 cache only
    __half* const vl = kl + kKeys * P;
    constexpr int kStage = 2 * kKeys * P;   // halves per stage (f16 cache)
    __shared__ int row_pos[kRows];

    pdl_trigger();
    const int ratio = a.heads / a.kv_heads, chunks = ratio / group;
    const int kvh = blockIdx.y / chunks;
    const int h0 = kvh * ratio + (blockIdx.y % chunks) * group;
    const int tok_per_block = kRows / group;
    const int t0 = (gridDim.x - 1 - blockIdx.x) * tok_per_block;
    auto row_token = [&](int r) { return t0 + r / group; };
    auto row_ok = [&](int r) { return r < tok_per_block * group && row_token(r) < a.T; };
    pdl_wait();

    // Queries times the scale in base 2 -> f16 hi/lo (idle rows: zeros), loaded 8 at a time
    // before their stores (one load in flight per thread and step made a short prompt's blocks,
    // which do little else, wait ~D / 2 load latencies).
    const float scale2 = a.scale * 1.44269504088896341f;
    constexpr int kThreads = kWarps * 32, kSteps = kRows * D / kThreads, kBatch = 8;
    static_assert(kSteps % kBatch == 0, "whole batches");
#pragma unroll 1
    for (int b = 0; b < kSteps; b += kBatch) {
        float x[kBatch];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
            const int i = threadIdx.x + (b + j) * kThreads, r = i / D, d = i % D;
            x[j] = row_ok(r) ? scale2 * a.q[static_cast<int64_t>(row_token(r)) * a.q_row +
                                            static_cast<int64_t>(h0 + r % group) * a.q_stride + d]
                             : 0.f;
        }
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
            const int i = threadIdx.x + (b + j) * kThreads, r = i / D, d = i % D;
            split_f16(x[j], qh[r * P + d], ql[r * P + d]);
        }
    }
    if (threadIdx.x < kRows) row_pos[threadIdx.x] = row_ok(threadIdx.x) ? a.pos[row_token(threadIdx.x)] : -1;
    __syncthreads();

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int pos_lo = row_pos[warp * 16 + g], pos_hi = row_pos[warp * 16 + g + 8];
    int warp_pos = max(pos_lo, pos_hi), block_pos = max(row_pos[lane], row_pos[lane + 32]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        warp_pos = max(warp_pos, __shfl_xor_sync(0xffffffffu, warp_pos, o));
        block_pos = max(block_pos, __shfl_xor_sync(0xffffffffu, block_pos, o));
    }
    const int n_keys = block_pos + 1;

    // ldmatrix lane addresses (bytes): A rows lane % 16 at column (lane / 16) * 8; K (B, not
    // transposed) key lane % 8 at column (lane / 8) * 8; V (B, transposed) key
    // lane % 8 + 8 ((lane / 8) & 1) at column (lane / 16) * 8.
    const uint32_t a_off = 2u * ((warp * 16 + (lane & 15)) * P + (lane >> 4) * 8);
    const uint32_t k_off = 2u * ((lane & 7) * P + (lane >> 3) * 8);
    const uint32_t v_off = 2u * (((lane & 7) + ((lane >> 3) & 1) * 8) * P + (lane >> 4) * 8);
    const uint32_t qh_a = smem_addr(qh) + a_off, ql_a = smem_addr(ql) + a_off;
    const uint32_t kh_a = smem_addr(kh) + k_off, kl_a = smem_addr(kl) + k_off;
    const uint32_t vh_a = smem_addr(vh) + v_off, vl_a = smem_addr(vl) + v_off;

    float o[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[n][e] = 0.f;
    float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.f, l_hi = 0.f;  // l: this lane's part of the row sum

    const int64_t kv_row = static_cast<int64_t>(a.kv_heads) * D;
    // Copies the f16 tile of keys k0.. into stage st (zeros past n_keys) as one cp.async group.
    auto issue_tile = [&](int k0, int st) {
        __half* const kd = kh + st * kStage;
        __half* const vd = kd + kKeys * P;
        for (int i = threadIdx.x; i < kKeys * D / 8; i += blockDim.x) {
            const int j = i / (D / 8), c = (i % (D / 8)) * 8;
            const bool ok = k0 + j < n_keys;
            const int64_t off = (ok ? k0 + j : 0) * kv_row + static_cast<int64_t>(kvh) * D + c;
            cp_async16_or_zero(kd + j * P + c, static_cast<const __half*>(a.k_cache) + off, ok);
            cp_async16_or_zero(vd + j * P + c, static_cast<const __half*>(a.v_cache) + off, ok);
        }
        cp_async_commit();
    };
    if constexpr (kHalf) issue_tile(0, 0);
    for (int k0 = 0, it = 0; k0 < n_keys; k0 += kKeys, ++it) {
        uint32_t so = 0;  // the tile's stage offset in bytes (f16 cache)
        if constexpr (kHalf) {
            cp_async_wait<0>();  // this thread's copies of tile `it`
            __syncthreads();     // everyone's copies landed; every warp is done with tile it - 1
            if (k0 + kKeys < n_keys) issue_tile(k0 + kKeys, (it + 1) & 1);  // into tile it - 1's stage
            so = static_cast<uint32_t>(sizeof(__half) * kStage * (it & 1));
        } else {
            __syncthreads();  // the previous tile has been read
            for (int i = threadIdx.x; i < kKeys * D / 4; i += blockDim.x) {
                const int j = i / (D / 4), c = (i % (D / 4)) * 4;
                float4 kv = make_float4(0.f, 0.f, 0.f, 0.f), vv = kv;
                if (k0 + j < n_keys) {
                    const int64_t off = (k0 + j) * kv_row + static_cast<int64_t>(kvh) * D + c;
                    kv = __ldg(reinterpret_cast<const float4*>(static_cast<const float*>(a.k_cache) + off));
                    vv = __ldg(reinterpret_cast<const float4*>(static_cast<const float*>(a.v_cache) + off));
                }
                uint32_t h[2], l[2];
                split_pair(kv.x, kv.y, h[0], l[0]);
                split_pair(kv.z, kv.w, h[1], l[1]);
                *reinterpret_cast<uint2*>(kh + j * P + c) = make_uint2(h[0], h[1]);
                *reinterpret_cast<uint2*>(kl + j * P + c) = make_uint2(l[0], l[1]);
                split_pair(vv.x, vv.y, h[0], l[0]);
                split_pair(vv.z, vv.w, h[1], l[1]);
                *reinterpret_cast<uint2*>(vh + j * P + c) = make_uint2(h[0], h[1]);
                *reinterpret_cast<uint2*>(vl + j * P + c) = make_uint2(l[0], l[1]);
            }
            __syncthreads();
        }
        if (k0 > warp_pos) continue;  // none of these keys is visible to this warp's rows

        // Scores of the warp's 16 rows x 64 keys: s[n] is key tile n (keys k0 + 8n ..).
        float s[kKeys / 8][4];
#pragma unroll
        for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[n][e] = 0.f;
#pragma unroll
        for (int kk = 0; kk < D; kk += 32) {
            uint32_t ah0[4], al0[4], ah1[4], al1[4];
            ldsm_x4(ah0, qh_a + 2 * kk);
            ldsm_x4(al0, ql_a + 2 * kk);
            ldsm_x4(ah1, qh_a + 2 * (kk + 16));
            ldsm_x4(al1, ql_a + 2 * (kk + 16));
#pragma unroll
            for (int n = 0; n < kKeys / 8; ++n) {
                uint32_t b[4];
                ldsm_x4(b, kh_a + so + 2 * (n * 8 * P + kk));
                mma_f16(s[n], ah0, b[0], b[1]);
                mma_f16(s[n], al0, b[0], b[1]);
                mma_f16(s[n], ah1, b[2], b[3]);
                mma_f16(s[n], al1, b[2], b[3]);
                if constexpr (!kHalf) {
                    ldsm_x4(b, kl_a + 2 * (n * 8 * P + kk));
                    mma_f16(s[n], ah0, b[0], b[1]);
                    mma_f16(s[n], ah1, b[2], b[3]);
                }
            }
        }

        // Online softmax of rows g (lo) and g + 8 (hi); lane q holds keys 8n + 2q, 8n + 2q + 1.
        // Scores and maxima are in base 2 (the queries were scaled). Keys past a row's position
        // are masked only in tiles that reach the warp's diagonal.
        const bool diag = k0 + kKeys - 1 > min(pos_lo, pos_hi);
        float mx_lo = m_lo, mx_hi = m_hi;
#pragma unroll
        for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int key = k0 + 8 * n + 2 * q + e;
                if (diag) {
                    s[n][e] = key <= pos_lo ? s[n][e] : -INFINITY;
                    s[n][2 + e] = key <= pos_hi ? s[n][2 + e] : -INFINITY;
                }
                mx_lo = fmaxf(mx_lo, s[n][e]);
                mx_hi = fmaxf(mx_hi, s[n][2 + e]);
            }
#pragma unroll
        for (int o2 = 1; o2 <= 2; o2 <<= 1) {
            mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, o2));
            mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, o2));
        }
        // A row that has seen no visible key keeps max -inf: with 0 subtracted instead, its
        // probabilities (and its correction, applied to zeros) are ex2(-inf) = 0.
        const float sub_lo = mx_lo == -INFINITY ? 0.f : mx_lo, sub_hi = mx_hi == -INFINITY ? 0.f : mx_hi;
        const float corr_lo = ex2_approx(m_lo - sub_lo), corr_hi = ex2_approx(m_hi - sub_hi);
        m_lo = mx_lo;
        m_hi = mx_hi;
        float sum_lo = 0.f, sum_hi = 0.f;
#pragma unroll
        for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                s[n][e] = ex2_approx(s[n][e] - sub_lo);
                s[n][2 + e] = ex2_approx(s[n][2 + e] - sub_hi);
                sum_lo += s[n][e];
                sum_hi += s[n][2 + e];
            }
        l_lo = l_lo * corr_lo + sum_lo;
        l_hi = l_hi * corr_hi + sum_hi;
        // Most tiles leave every maximum of the warp where it was (corrections of exactly 1).
        if (__any_sync(0xffffffffu, corr_lo != 1.f || corr_hi != 1.f)) {
#pragma unroll
            for (int n = 0; n < D / 8; ++n) {
                o[n][0] *= corr_lo;
                o[n][1] *= corr_lo;
                o[n][2] *= corr_hi;
                o[n][3] *= corr_hi;
            }
        }

        // O += P V, 16 keys per step: the scores of key tiles 2kk, 2kk + 1 are the A fragment.
#pragma unroll
        for (int kk = 0; kk < kKeys / 16; ++kk) {
            uint32_t ph[4], pl[4];
            split_pair(s[2 * kk][0], s[2 * kk][1], ph[0], pl[0]);
            split_pair(s[2 * kk][2], s[2 * kk][3], ph[1], pl[1]);
            split_pair(s[2 * kk + 1][0], s[2 * kk + 1][1], ph[2], pl[2]);
            split_pair(s[2 * kk + 1][2], s[2 * kk + 1][3], ph[3], pl[3]);
#pragma unroll
            for (int n = 0; n < D / 8; n += 2) {
                uint32_t b[4];
                ldsm_x4_trans(b, vh_a + so + 2 * (kk * 16 * P + n * 8));
                mma_f16(o[n], ph, b[0], b[1]);
                mma_f16(o[n], pl, b[0], b[1]);
                mma_f16(o[n + 1], ph, b[2], b[3]);
                mma_f16(o[n + 1], pl, b[2], b[3]);
                if constexpr (!kHalf) {
                    ldsm_x4_trans(b, vl_a + 2 * (kk * 16 * P + n * 8));
                    mma_f16(o[n], ph, b[0], b[1]);
                    mma_f16(o[n + 1], ph, b[2], b[3]);
                }
            }
        }
    }

#pragma unroll
    for (int o2 = 1; o2 <= 2; o2 <<= 1) {
        l_lo += __shfl_xor_sync(0xffffffffu, l_lo, o2);
        l_hi += __shfl_xor_sync(0xffffffffu, l_hi, o2);
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int r = warp * 16 + g + 8 * half;
        if (!row_ok(r)) continue;
        const float inv_l = 1.f / (half ? l_hi : l_lo);
        float* out = a.out + (static_cast<int64_t>(row_token(r)) * a.heads + h0 + r % group) * D + 2 * q;
#pragma unroll
        for (int n = 0; n < D / 8; ++n)
            *reinterpret_cast<float2*>(out + 8 * n) = make_float2(o[n][2 * half] * inv_l, o[n][2 * half + 1] * inv_l);
    }
}

template <int D, bool kHalf>
void launch_mma(const AttnArgs& a, int group, cudaStream_t s) {
    constexpr size_t smem = smem_bytes<D, kHalf>();
    static_assert(smem <= 227 * 1024, "attention prefill: shared memory exceeds the sm_90 limit");
    static const bool attr = [] {
        DF_CUDA_CHECK(cudaFuncSetAttribute(attn_prefill_mma_kernel<D, kHalf>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
        return true;
    }();
    (void)attr;
    const int tok_per_block = kRows / group;
    const dim3 grid((a.T + tok_per_block - 1) / tok_per_block, a.kv_heads * (a.heads / a.kv_heads / group));
    launch(attn_prefill_mma_kernel<D, kHalf>, grid, kWarps * 32, smem, s, a, group);
}

template <int D>
void launch_d(const AttnArgs& a, int group, cudaStream_t s) {
    if (a.half_cache)
        launch_mma<D, true>(a, group, s);
    else
        launch_mma<D, false>(a, group, s);
}

}  // namespace

bool attention_prefill_supported(int head_dim) { return head_dim == 64 || head_dim == 128 || head_dim == 256; }

void launch_attention_prefill(const AttnArgs& a, int group, cudaStream_t s) {
    DF_CUDA_REQUIRE(attention_prefill_supported(a.head_dim), "attention prefill: head_dim must be 64, 128 or 256");
    DF_CUDA_REQUIRE(group >= 1 && group <= kRows && (a.heads / a.kv_heads) % group == 0,
                    "attention prefill: group must divide the GQA ratio");
    if (attention_prefill_wg_able(a)) {
        launch_attention_prefill_wg(a, group, s);
        return;
    }
    switch (a.head_dim) {
        case 64: launch_d<64>(a, group, s); break;
        case 128: launch_d<128>(a, group, s); break;
        default: launch_d<256>(a, group, s); break;
    }
}

}  // namespace df::cuda
