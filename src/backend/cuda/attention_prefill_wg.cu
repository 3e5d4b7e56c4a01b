// Causal GQA attention of a prefill chunk on wgmma (sm_90a): 128-wide heads over an f16 cache.
//
// The same work split, row mapping and numerics as attention_prefill.cu's mma.sync kernel (a block
// of 64 query rows = tokens x query heads of one KV head, 64-key tiles, online softmax in base 2,
// q and p split into f16 hi + lo, lo x lo dropped), with the products on the warpgroup
// instructions: S = Qh K^T + Ql K^T as m64n64k16 with both operands in shared memory, and
// O += Ph V + Pl V as m64n128k16 with the probabilities in registers (the scores' accumulator
// layout is the A-fragment layout) and V read N-major from the same tile layout as K. Why: the
// mma.sync kernel keeps the tensor pipe ~32 % busy (ldmatrix traffic and one warp's chain per
// product); here a warpgroup issues 64 x 64 x 16 at a time and the operands never pass through
// registers except P.
//
// Shared-memory tiles (Q hi, Q lo, K, V: 64 rows x 128 halves each) use the 128-byte swizzle:
// halves 0..63 of every row in the tile's first 8 KB, 64..127 in the second, each row 128 bytes
// with its 16-byte chunks permuted by row % 8; tiles start on 1024-byte boundaries.
#include <cuda_fp16.h>

#include <cmath>
#include <cstdlib>

#include "backend/cuda/attention_prefill.h"
#include "backend/cuda/check.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/wgmma.cuh"

namespace df::cuda {
namespace {

constexpr int kD = 128, kRows = 64, kKeys = 64, kThreads = 128;
constexpr uint32_t kHalfTile = kRows * 128;  // bytes of one 64-half column block of a tile
constexpr uint32_t kTile = 2 * kHalfTile;    // a 64 x 128 f16 tile
// Q hi, Q lo, then two stages of K and V; + 1024 to align the first tile.
constexpr size_t kSmem = 6 * kTile + 1024;

// Byte offset of element (row, col) of a tile in the 128-byte swizzle.
DF_DEV uint32_t tile_off(int row, int col) {
    return static_cast<uint32_t>((col >> 6) * kHalfTile + row * 128 + ((((col >> 3) & 7) ^ (row & 7)) << 4) + (col & 7) * 2);
}

// K-major operand (Q as A, K as B) for the 16 columns 16 s.. of the head: the column block, then
// 32 bytes per step inside the swizzled row; 8-row groups 1024 bytes apart.
DF_DEV uint64_t desc_kmajor(uint32_t tile, int s) {
    return wg_desc(tile + (s >> 2) * kHalfTile + (s & 3) * 32, 16, 1024) | (uint64_t{1} << 62);
}
// V as the N-major B of P V for keys 16 kk..: 8-key groups 1024 bytes apart (stride offset, along
// K), the two 64-half column blocks kHalfTile apart (leading offset, along N).
DF_DEV uint64_t desc_nmajor(uint32_t tile, int kk) {
    return wg_desc(tile + kk * 2048, kHalfTile, 1024) | (uint64_t{1} << 62);
}

DF_DEV float ex2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

DF_DEV void st_shared_u32(uint32_t addr, uint32_t v) { asm volatile("st.shared.u32 [%0], %1;" ::"r"(addr), "r"(v) : "memory"); }

__global__ void __launch_bounds__(kThreads) attn_prefill_wg_kernel(const AttnArgs a, int group) {
#if DF_WGMMA_DEVICE
    extern __shared__ uint8_t smem_raw[];
    __shared__ int row_pos[kRows];
    const uint32_t raw = smem_addr(smem_raw), base = (raw + 1023u) & ~1023u;
    uint8_t* const sm = smem_raw + (base - raw);
    const uint32_t qh_s = base, ql_s = base + kTile, kv_s = base + 2 * kTile;  // stage st: K at kv_s + 2 st kTile, V after it

    pdl_trigger();
    const int ratio = a.heads / a.kv_heads, chunks = ratio / group;
    const int kvh = blockIdx.y / chunks;
    const int h0 = kvh * ratio + (blockIdx.y % chunks) * group;
    const int tok_per_block = kRows / group;
    const int t0 = (gridDim.x - 1 - blockIdx.x) * tok_per_block;  // later tokens (more keys) first
    auto row_token = [&](int r) { return t0 + r / group; };
    auto row_ok = [&](int r) { return r < tok_per_block * group && row_token(r) < a.T; };
    pdl_wait();

    // Queries times the scale in base 2 -> f16 hi/lo, two columns per thread and step (idle rows:
    // zeros). Loads in batches of 8 before their stores: the stores are asm volatile, so loads
    // interleaved with them would wait one by one (a short prompt's blocks are little else).
    const float scale2 = a.scale * 1.44269504088896341f;
    constexpr int kSteps = kRows * kD / 2 / kThreads, kBatch = 8;
    static_assert(kSteps % kBatch == 0, "whole batches");
#pragma unroll
    for (int b = 0; b < kSteps; b += kBatch) {
        float x[kBatch][2];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
            const int i = threadIdx.x + (b + j) * kThreads, r = i / (kD / 2), d = 2 * (i % (kD / 2));
            x[j][0] = x[j][1] = 0.f;
            if (row_ok(r)) {
                const float* src = a.q + static_cast<int64_t>(row_token(r)) * a.q_row + static_cast<int64_t>(h0 + r % group) * a.q_stride + d;
                x[j][0] = scale2 * src[0];
                x[j][1] = scale2 * src[1];
            }
        }
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
            const int i = threadIdx.x + (b + j) * kThreads, r = i / (kD / 2), d = 2 * (i % (kD / 2));
            uint32_t hi, lo;
            split_pair(x[j][0], x[j][1], hi, lo);
            st_shared_u32(qh_s + tile_off(r, d), hi);
            st_shared_u32(ql_s + tile_off(r, d), lo);
        }
    }
    if (threadIdx.x < kRows) row_pos[threadIdx.x] = row_ok(threadIdx.x) ? a.pos[row_token(threadIdx.x)] : -1;
    __syncthreads();

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int pos_lo = row_pos[warp * 16 + g], pos_hi = row_pos[warp * 16 + g + 8];
    int block_pos = max(row_pos[lane], row_pos[lane + 32]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) block_pos = max(block_pos, __shfl_xor_sync(0xffffffffu, block_pos, o));
    const int n_keys = block_pos + 1;

    const int64_t kv_row = static_cast<int64_t>(a.kv_heads) * kD;
    const __half* const kc = static_cast<const __half*>(a.k_cache) + static_cast<int64_t>(kvh) * kD;
    const __half* const vc = static_cast<const __half*>(a.v_cache) + static_cast<int64_t>(kvh) * kD;
    // Copies the K and V rows of keys k0.. into stage st (zeros past n_keys) as one cp.async group.
    auto issue_tile = [&](int k0, int st) {
        uint8_t* const kd = sm + (2 + 2 * st) * kTile;
        uint8_t* const vd = kd + kTile;
        for (int i = threadIdx.x; i < kKeys * kD / 8; i += kThreads) {
            const int j = i >> 4, c = (i & 15) * 8;
            const bool ok = k0 + j < n_keys;
            const int64_t off = (ok ? k0 + j : 0) * kv_row + c;
            const uint32_t o = tile_off(j, c);
            cp_async16_or_zero(kd + o, kc + off, ok);
            cp_async16_or_zero(vd + o, vc + off, ok);
        }
        cp_async_commit();
    };

    float o[64];  // O, per n8 column tile n: o[4n .. 4n + 3] (rows g, g + 8 at columns 2q, 2q + 1)
#pragma unroll
    for (int i = 0; i < 64; ++i) o[i] = 0.f;
    float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.f, l_hi = 0.f;  // l: this lane's part of the row sum

    issue_tile(0, 0);
    for (int k0 = 0, it = 0; k0 < n_keys; k0 += kKeys, ++it) {
        cp_async_wait<0>();        // this thread's copies of tile it
        fence_proxy_async_smem();  // ... and the queries' stores, visible to wgmma
        __syncthreads();           // everyone's; every product of tile it - 1 is done (waited below)
        if (k0 + kKeys < n_keys) issue_tile(k0 + kKeys, (it + 1) & 1);
        const uint32_t kb = kv_s + (it & 1) * 2 * kTile, vb = kb + kTile;

        // Scores of the warpgroup's 64 rows x 64 keys: s[4n + e] as the m16n8 C layout of key tile n.
        float s[32];
        wgmma_fence();
#pragma unroll
        for (int st = 0; st < kD / 16; ++st) {
            wgmma_m64n64k16_f16_ss(s, desc_kmajor(qh_s, st), desc_kmajor(kb, st), st > 0);
            wgmma_m64n64k16_f16_ss(s, desc_kmajor(ql_s, st), desc_kmajor(kb, st), true);
        }
        wgmma_commit();
        wgmma_wait<0>();

        // Online softmax of rows g (lo) and g + 8 (hi), as attention_prefill.cu.
        const bool diag = k0 + kKeys - 1 > min(pos_lo, pos_hi);
        float mx_lo = m_lo, mx_hi = m_hi;
#pragma unroll
        for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int key = k0 + 8 * n + 2 * q + e;
                if (diag) {
                    s[4 * n + e] = key <= pos_lo ? s[4 * n + e] : -INFINITY;
                    s[4 * n + 2 + e] = key <= pos_hi ? s[4 * n + 2 + e] : -INFINITY;
                }
                mx_lo = fmaxf(mx_lo, s[4 * n + e]);
                mx_hi = fmaxf(mx_hi, s[4 * n + 2 + e]);
            }
#pragma unroll
        for (int o2 = 1; o2 <= 2; o2 <<= 1) {
            mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, o2));
            mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, o2));
        }
        const float sub_lo = mx_lo == -INFINITY ? 0.f : mx_lo, sub_hi = mx_hi == -INFINITY ? 0.f : mx_hi;
        const float corr_lo = ex2_approx(m_lo - sub_lo), corr_hi = ex2_approx(m_hi - sub_hi);
        m_lo = mx_lo;
        m_hi = mx_hi;
        float sum_lo = 0.f, sum_hi = 0.f;
#pragma unroll
        for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                s[4 * n + e] = ex2_approx(s[4 * n + e] - sub_lo);
                s[4 * n + 2 + e] = ex2_approx(s[4 * n + 2 + e] - sub_hi);
                sum_lo += s[4 * n + e];
                sum_hi += s[4 * n + 2 + e];
            }
        l_lo = l_lo * corr_lo + sum_lo;
        l_hi = l_hi * corr_hi + sum_hi;
        if (__any_sync(0xffffffffu, corr_lo != 1.f || corr_hi != 1.f)) {
#pragma unroll
            for (int n = 0; n < kD / 8; ++n) {
                o[4 * n] *= corr_lo;
                o[4 * n + 1] *= corr_lo;
                o[4 * n + 2] *= corr_hi;
                o[4 * n + 3] *= corr_hi;
            }
        }

        // O += P V, 16 keys per step: the scores of key tiles 2kk, 2kk + 1 are the A fragment.
        uint32_t ph[kKeys / 16][4], pl[kKeys / 16][4];
#pragma unroll
        for (int kk = 0; kk < kKeys / 16; ++kk) {
            split_pair(s[8 * kk + 0], s[8 * kk + 1], ph[kk][0], pl[kk][0]);
            split_pair(s[8 * kk + 2], s[8 * kk + 3], ph[kk][1], pl[kk][1]);
            split_pair(s[8 * kk + 4], s[8 * kk + 5], ph[kk][2], pl[kk][2]);
            split_pair(s[8 * kk + 6], s[8 * kk + 7], ph[kk][3], pl[kk][3]);
        }
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kKeys / 16; ++kk) {
            wgmma_m64n128k16_f16_tb(o, ph[kk], desc_nmajor(vb, kk), true);
            wgmma_m64n128k16_f16_tb(o, pl[kk], desc_nmajor(vb, kk), true);
        }
        wgmma_commit();
        wgmma_wait<0>();
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
        float* out = a.out + (static_cast<int64_t>(row_token(r)) * a.heads + h0 + r % group) * kD + 2 * q;
#pragma unroll
        for (int n = 0; n < kD / 8; ++n)
            *reinterpret_cast<float2*>(out + 8 * n) = make_float2(o[4 * n + 2 * half] * inv_l, o[4 * n + 2 * half + 1] * inv_l);
    }
#else
    __trap();
#endif
}

int initial_mode() {
    const char* e = std::getenv("DF_CUDA_ATTN_WG");
    return e && *e ? std::atoi(e) : 1;
}
int g_mode = initial_mode();

}  // namespace

int attn_prefill_wg() { return g_mode; }
void set_attn_prefill_wg(int on) { g_mode = on; }

bool attention_prefill_wg_able(const AttnArgs& a) {
    if (!kQGemmWgBuilt || !g_mode || a.head_dim != kD || !a.half_cache) return false;
    static const bool sm90 = [] {
        int dev = 0, major = 0, minor = 0;
        DF_CUDA_CHECK(cudaGetDevice(&dev));
        DF_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
        DF_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
        return major == 9 && minor == 0;
    }();
    return sm90;
}

void launch_attention_prefill_wg(const AttnArgs& a, int group, cudaStream_t s) {
    static const bool attr = [] {
        DF_CUDA_CHECK(cudaFuncSetAttribute(attn_prefill_wg_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(kSmem)));
        return true;
    }();
    (void)attr;
    const int tok_per_block = kRows / group;
    const dim3 grid((a.T + tok_per_block - 1) / tok_per_block, a.kv_heads * (a.heads / a.kv_heads / group));
    launch(attn_prefill_wg_kernel, grid, kThreads, kSmem, s, a, group);
}

}  // namespace df::cuda
