// RMSNorm, per-head norm + NeoX RoPE (with the KV store fused in), gated RMSNorm. Sums of squares in double and products
// rounded one at a time (no fused multiply-add) so results match the CPU reference to the
// last bit where the summation order allows.
#include <cooperative_groups.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdlib>

#include "backend/cuda/act_quant.cuh"
#include "backend/cuda/check.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/imma_deferred.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/matvec.cuh"
#include "backend/cuda/norm_sum.cuh"

namespace df::cuda {
namespace {

constexpr int kNormThreads = 256;
constexpr int kMaxWarps = kRmsMaxWarps;
constexpr int kUnitsPerWarp = kRmsUnitsPerWarp;  // the register path takes rows of up to 32 * 2 * 256 values
static_assert(kMaxWarps * kUnitsPerWarp * 256 == kRmsnormQuantMaxCols);

// Sum over the block (at most 32 warps) of per-thread doubles; every thread gets the total.
__device__ double block_sum(double v) {
    __shared__ double part[kMaxWarps];
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

// Any row length: one row by the whole block (out may alias x).
__global__ void __launch_bounds__(kNormThreads) rmsnorm_kernel(const float* x, int64_t xs, const float* w, int n,
                                                               float eps, float* out, int64_t os) {
    pdl_begin();
    const float* xr = x + blockIdx.x * xs;
    float* o = out + blockIdx.x * os;
    double s = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += static_cast<double>(__fmul_rn(xr[i], xr[i]));
    const float scale = rms_scale(block_sum(s), n, eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float y = __fmul_rn(xr[i], scale);
        o[i] = w ? __fmul_rn(y, w[i]) : y;
    }
}

// A lane's 8 values of unit u of a normed row: times the scale, times the weights (w set), stored
// at o, and with xq set converted for the imma matvec from the same registers.
template <bool kVec>
DF_DEV void rms_unit_out(const float (&v)[8], float scale, const float* w, const float (&wv)[8], float* o, uint2* xq,
                         float* xe, int row, int u, int units, int lane) {
    float y[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        y[j] = __fmul_rn(v[j], scale);
        if (w) y[j] = __fmul_rn(y[j], wv[j]);
    }
    store8<kVec>(o + u * 256 + 8 * lane, y);
    if (xq) act_quant_unit(y, row, u, units, units * 8, xq, xe, lane);
}

// Rows of a multiple of 256 values (at most kUnitsPerWarp units per warp): a warp per 256-value
// unit, 8 consecutive values per lane, all held in registers, so every load of the row is in
// flight at once; the norm weights are loaded before waiting for the previous kernel. The
// products and the double sum are those of rmsnorm_kernel (only the summation order differs).
// With xq set, the outputs are also written in the imma activation format (act_quant.cuh) from
// the same registers. out may alias x. kVec: 16-byte aligned rows, strides and weights.
// The sum of squares is norm_sum.cuh's (a matvec folding this norm gets the same scale).
template <bool kVec>
__global__ void __launch_bounds__(32 * kMaxWarps) rmsnorm_units_kernel(const float* x, int64_t xs, const float* w, int n,
                                                                       float eps, float* out, int64_t os, uint2* xq,
                                                                       float* xe) {
    pdl_trigger();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    const int units = n / 256, row = blockIdx.x;
    float wv[kUnitsPerWarp][8];
#pragma unroll
    for (int k = 0; k < kUnitsPerWarp; ++k) {
        const int u = warp + k * warps;
        if (w && u < units) load8<kVec>(w + u * 256 + 8 * lane, wv[k]);
    }
    pdl_wait();
    const float* xr = x + row * xs;
    float v[kUnitsPerWarp][8];
    double s = 0;
#pragma unroll
    for (int k = 0; k < kUnitsPerWarp; ++k) {
        const int u = warp + k * warps;
        if (u >= units) continue;
        load8<kVec>(xr + u * 256 + 8 * lane, v[k]);
        rms_add8(s, v[k]);
    }
    const float scale = rms_scale(block_sum(s), n, eps);
    float* o = out + row * os;
#pragma unroll
    for (int k = 0; k < kUnitsPerWarp; ++k) {
        const int u = warp + k * warps;
        if (u < units) rms_unit_out<kVec>(v[k], scale, w, wv[k], o, xq, xe, row, u, units, lane);
    }
}

// rmsnorm_units_kernel<true> with xq over the residual d.out that a deferred accumulating imma
// launch added to (ImmaArgs::defer): a shared tile's sums are added to it as it is loaded (and
// written back); the same sum of squares, products and conversion after that.
// A cluster of kDeferredNormCluster blocks per row (unit u in block u % C), at most 12 warps a
// block: as one block under main's 32-warp bound (64 registers) the contributor round spilled
// (55,856 local requests a call, 21.4 us under ncu against 6.3 for the plain norm); at 12 warps
// and one block it did not spill but took 11.8 us, one SM reading all of a row's parts; 27B
// decode with clusters of 2 / 4 / 6 / 8: 136.7 / 139.5 / 140.2 / 142.4 tok/s (H100). The
// blocks' sums of squares meet through distributed shared memory, added in rank order by all.
// 16 blocks (beyond the portable 8, where the device schedules them) gained another 1.8 %
// (144.9-145.0 against 142.3-142.5 tok/s; 10 blocks even with 8; session 51, H100).
// The sums meet by push: each block writes its sum into its rank's slot in every block, one
// cluster barrier (release / acquire) makes them visible, and each block adds its own slots in
// rank order (the bits of reading the others' sums). No block touches another's shared memory
// after that barrier, so none waits for the others at its end; the barrier that DSMEM access
// needs first (every block of the cluster started) is split around the block's own work.
// With the lean instantiations below, against two full barriers around remote reads and the
// general kernel: 27B decode 146.3-147.7 vs 143.9-145.5 tok/s (session 53, H100; with a relaxed
// exit barrier instead of the push, 145.7-146.5).
// kUnits: units a warp (kUnitsPerWarp, or 1 where the launch gives each warp one); kAdd: d is
// an accumulating launch (else its plain values), the code of the other cases left out: 107
// registers and ~950 PTX instructions instead of 144 and 2,089 (instruction-cache misses).
constexpr int kDeferredNormWarps = 12, kDeferredNormCluster = 16;
template <int kUnits, bool kAdd>
__global__ void __launch_bounds__(32 * kDeferredNormWarps) rmsnorm_deferred_kernel(const ImmaDeferred d, const float* w, int n,
                                                                                   float eps, float* out, uint2* xq, float* xe) {
    pdl_trigger();
    namespace cg = cooperative_groups;
    const cg::cluster_group cluster = cg::this_cluster();
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
    const int rank = static_cast<int>(cluster.block_rank()), C = static_cast<int>(cluster.num_blocks());
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    const int units = n / 256, row = blockIdx.y;
    auto unit = [&](int k) { return rank + C * (warp + k * warps); };
    float wv[kUnits][8];
#pragma unroll
    for (int k = 0; k < kUnits; ++k)
        if (w && unit(k) < units) load8<true>(w + unit(k) * 256 + 8 * lane, wv[k]);
    pdl_wait();
    float v[kUnits][8];
    double s = 0;
#pragma unroll
    for (int k = 0; k < kUnits; ++k) {
        const int u = unit(k);
        if (u >= units) continue;
        bool whole;
        deferred_rows<kAdd ? kDeferAdd : kDeferValues>(d, row, u * 256 + 8 * lane, v[k], whole);
        if (!whole) store8<true>(d.out + static_cast<size_t>(row) * n + u * 256 + 8 * lane, v[k]);
        rms_add8(s, v[k]);
    }
    __shared__ double part[kDeferredNormWarps], sums[kDeferredNormCluster];
    s = warp_sum(s);
    if (lane == 0) part[warp] = s;
    __syncthreads();
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");  // every block has started
    if (warp == 0) {  // block_sum's order: the warps' sums added by one warp
        const double b = warp_sum(lane < warps ? part[lane] : 0.0);
        if (lane < C) *cluster.map_shared_rank(&sums[rank], lane) = b;
    }
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
    double total = 0;
    for (int c = 0; c < C; ++c) total += sums[c];
    const float scale = rms_scale(total, n, eps);
    float* o = out + static_cast<size_t>(row) * n;
#pragma unroll
    for (int k = 0; k < kUnits; ++k) {
        const int u = unit(k);
        if (u < units) rms_unit_out<true>(v[k], scale, w, wv[k], o, xq, xe, row, u, units, lane);
    }
}

// Whether clusters of c > 8 blocks of `threads` threads of kernel can run here: allowed (a
// function attribute, set here) and at least one fits the device's GPCs. A device or driver
// that refuses either answers no (its error cleared).
template <typename... Params>
bool nonportable_cluster_fits(void (*kernel)(Params...), int c, int threads) {
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = static_cast<unsigned>(c);
    attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(c);
    cfg.blockDim = dim3(threads);
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    int n = 0;
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess ||
        cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return n > 0;
}

bool rmsnorm_by_units(int n) { return n % 256 == 0 && n / 256 <= kMaxWarps * kUnitsPerWarp; }

void rmsnorm_units(const float* x, int64_t xs, const float* w, int rows, int n, float eps, float* out, int64_t os,
                   uint2* xq, float* xe, cudaStream_t s) {
    const int warps = rms_warps(n);
    auto al = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    const bool vec = al(x) && al(out) && (!w || al(w)) && xs % 4 == 0 && os % 4 == 0;
    if (vec)
        launch(rmsnorm_units_kernel<true>, rows, 32 * warps, 0, s, x, xs, w, n, eps, out, os, xq, xe);
    else
        launch(rmsnorm_units_kernel<false>, rows, 32 * warps, 0, s, x, xs, w, n, eps, out, os, xq, xe);
}

// One block per token and group of per_block heads of the one or two head sets (numbered set 0
// first); head_dim <= 512. Decode and verify launch it with a head per block (the shortest chain;
// at 31 registers a block fits beside three ring-matvec blocks and computes its token's rotation
// angles, a serial product per angle and then cosf and sinf, before pdl_wait); prefill takes
// attn_prep_warps_kernel (attention_prep.cu).
// rows: null, or (Backend::attention_lanes: attn_prep_rows_kernel) row t's caches rows->k[t], rows->v[t].
DF_DEV void attn_prep_block(const AttnPrepArgs& a, int per_block, const RowCaches* rows) {
    pdl_trigger();  // the angles before pdl_wait: no kernel of this forward writes positions (launch.cuh)
    const int t = blockIdx.y, heads0 = a.set[0].heads;
    const int total = heads0 + (a.sets > 1 ? a.set[1].heads : 0);
    const int hb = blockIdx.x * per_block, he = min(total, hb + per_block);
    const int head_dim = a.head_dim, half = a.n_rot / 2;
    __shared__ float buf[512], rc[256], rs[256];
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        // ggml's rope cache: theta_i by i repeated f32 multiplications from the position.
        float theta = static_cast<float>(a.pos[t]);
        for (int k = 0; k < i; ++k) theta *= a.theta_scale;
        rc[i] = cosf(theta);
        rs[i] = sinf(theta);
    }
    pdl_wait();
    for (int hh = hb; hh < he; ++hh) {
        __syncthreads();  // the previous head is done with buf and part; the angles are in place
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
        void* const k_cache = rows ? param_pick(rows->k, t) : a.k_cache;
        void* const v_cache = rows ? param_pick(rows->v, t) : a.v_cache;
        const bool store = k_cache && first == a.sets - 1;
        const int64_t cache_at = store ? static_cast<int64_t>(a.pos[t]) * row + static_cast<int64_t>(h) * head_dim : 0;
        auto put = [&](int i, float val) {
            v[i] = val;
            if (!store) return;
            if (a.half_cache)
                static_cast<__half*>(k_cache)[cache_at + i] = __float2half_rn(val);
            else
                static_cast<float*>(k_cache)[cache_at + i] = val;
        };
        if (store) {
            const float* vs = a.v + static_cast<int64_t>(t) * row + static_cast<int64_t>(h) * head_dim;
            for (int i = threadIdx.x; i < head_dim; i += blockDim.x) {
                if (a.half_cache)
                    static_cast<__half*>(v_cache)[cache_at + i] = __float2half_rn(vs[i]);
                else
                    static_cast<float*>(v_cache)[cache_at + i] = vs[i];
            }
        }

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
            const float scale = rms_scale(tot, head_dim, a.eps);
            for (int i = threadIdx.x; i < head_dim; i += blockDim.x) buf[i] = __fmul_rn(__fmul_rn(buf[i], scale), norm_w[i]);
            __syncthreads();
        }
        for (int i = threadIdx.x; i < head_dim; i += blockDim.x) {
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

__global__ void __launch_bounds__(128) attn_prep_kernel(const AttnPrepArgs a, int per_block) {
    attn_prep_block(a, per_block, nullptr);
}
__global__ void __launch_bounds__(128) attn_prep_rows_kernel(const AttnPrepArgs a, int per_block, const RowCaches rows) {
    attn_prep_block(a, per_block, &rows);
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

// launch_gated_rmsnorm for T <= 8 tokens of heads of N = 64, 128 or 256 values that also writes
// the imma activation format: a warp per 256-value unit (256 / N heads), 8 values per lane, the
// head's sum of squares over its N / 8 lanes. The norm weights are loaded before the PDL wait.
template <int N>
__global__ void __launch_bounds__(128) gated_rmsnorm_quant_kernel(const float* x, const float* z, const float* w,
                                                                  int units, float eps, float* out, uint2* xq,
                                                                  float* xe) {
    pdl_trigger();
    const int lane = threadIdx.x & 31, unit = blockIdx.x * 4 + (threadIdx.x >> 5), tok = blockIdx.y;
    if (unit >= units) return;
    float wv[8];
    load8<false>(w + (8 * lane) % N, wv);
    pdl_wait();
    const int64_t at = (static_cast<int64_t>(tok) * units + unit) * 256 + 8 * lane;
    float v[8], zv[8];
    load8<true>(x + at, v);
    load8<true>(z + at, zv);
    double sq = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) sq += static_cast<double>(__fmul_rn(v[j], v[j]));
#pragma unroll
    for (int o = 1; o < N / 8; o <<= 1) sq += __shfl_xor_sync(0xffffffffu, sq, o);
    const float scale = rms_scale(sq, N, eps);
    float y[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) y[j] = __fmul_rn(__fmul_rn(__fmul_rn(v[j], scale), wv[j]), silu_f(zv[j]));
    store8<true>(out + at, y);
    act_quant_unit(y, tok, unit, units, units * 8, xq, xe, lane);
}

}  // namespace

bool gated_rmsnorm_quant_fits(const float* x, const float* z, const float* out, int T, int heads, int n) {
    auto al = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    return T >= 1 && T <= 8 && (n == 64 || n == 128 || n == 256) && (static_cast<int64_t>(heads) * n) % 256 == 0 &&
           al(x) && al(z) && al(out);
}

void launch_gated_rmsnorm_quant(const float* x, const float* z, const float* w, int T, int heads, int n, float eps,
                                float* out, uint2* xq, float* xe, cudaStream_t s) {
    DF_CUDA_REQUIRE(gated_rmsnorm_quant_fits(x, z, out, T, heads, n), "gated_rmsnorm_quant: shape or alignment not supported");
    const int units = heads * n / 256;
    const dim3 grid((units + 3) / 4, T);
    switch (n) {
        case 64: launch(gated_rmsnorm_quant_kernel<64>, grid, 128, 0, s, x, z, w, units, eps, out, xq, xe); break;
        case 128: launch(gated_rmsnorm_quant_kernel<128>, grid, 128, 0, s, x, z, w, units, eps, out, xq, xe); break;
        default: launch(gated_rmsnorm_quant_kernel<256>, grid, 128, 0, s, x, z, w, units, eps, out, xq, xe); break;
    }
}

// The fold reproduces the units kernel's sum (norm_sum.cuh), so it takes the rows that kernel takes.
bool matvec_can_fold_norm(int cols, int unit) {
    return cols > 0 && rmsnorm_by_units(cols) && cols % unit == 0 && matvec_norm_bytes(cols, unit) <= kMatvecMaxStage;
}

void launch_rmsnorm(const float* x, int64_t x_stride, const float* w, int rows, int n, float eps, float* out,
                    int64_t out_stride, cudaStream_t s) {
    if (rows <= 0) return;
    if (rmsnorm_by_units(n))
        rmsnorm_units(x, x_stride, w, rows, n, eps, out, out_stride, nullptr, nullptr, s);
    else
        launch(rmsnorm_kernel, rows, kNormThreads, 0, s, x, x_stride, w, n, eps, out, out_stride);
}

void launch_rmsnorm_quant(const float* x, int64_t x_stride, const float* w, int rows, int n, float eps, float* out,
                          uint2* xq, float* xe, cudaStream_t s) {
    if (rows <= 0) return;
    DF_CUDA_REQUIRE(rows <= 8 && rmsnorm_by_units(n), "rmsnorm_quant: at most 8 rows, n a multiple of 256 up to kRmsnormQuantMaxCols");
    rmsnorm_units(x, x_stride, w, rows, n, eps, out, n, xq, xe, s);
}

void launch_rmsnorm_quant_deferred(const ImmaDeferred& d, const float* w, int rows, int n, float eps, float* out,
                                   uint2* xq, float* xe, cudaStream_t s) {
    auto al = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    DF_CUDA_REQUIRE(rows >= 1 && rows <= 8 && rmsnorm_by_units(n) && !d.pair && d.rows == n && d.partial && al(d.out) &&
                        al(out) && (!w || al(w)),
                    "rmsnorm_quant (deferred): at most 8 rows of a deferred accumulating launch's output, aligned");
    // The instantiation for the case at hand (kAdd; one unit a warp where the cluster's blocks
    // give each warp at most one): 27B decode +1.5-2 % with the conversion's (session 53, H100).
    using Kernel = decltype(&rmsnorm_deferred_kernel<1, true>);
    static const Kernel kernels[2][2] = {{rmsnorm_deferred_kernel<1, false>, rmsnorm_deferred_kernel<kUnitsPerWarp, false>},
                                         {rmsnorm_deferred_kernel<1, true>, rmsnorm_deferred_kernel<kUnitsPerWarp, true>}};
    static const int cluster = [] {  // DF_CUDA_DEFER_NORM_CLUSTER=1..16 for A/B runs
        const char* e = std::getenv("DF_CUDA_DEFER_NORM_CLUSTER");
        const int c = std::clamp(e ? std::atoi(e) : kDeferredNormCluster, 1, 16);
        if (c <= 8) return c;
        for (const auto& by_units : kernels)
            for (Kernel k : by_units)
                if (!nonportable_cluster_fits(k, c, 32 * kDeferredNormWarps)) return 8;
        return c;
    }();
    const int units = n / 256, C = units < cluster ? units : cluster;
    const int per = (units + C - 1) / C, warps = per < kDeferredNormWarps ? per : kDeferredNormWarps;
    DF_CUDA_REQUIRE(per <= kUnitsPerWarp * warps, "rmsnorm_quant (deferred): more than 24 units a block");
    launch_cluster(kernels[d.add][per > warps], dim3(C, rows), 32 * warps, 0, s, C, d, w, n, eps, out, xq, xe);
}

void launch_attn_prep(const AttnPrepArgs& a, cudaStream_t s, const RowCaches* rows) {
    if (a.T <= 0 || a.sets == 0) return;
    DF_CUDA_REQUIRE(a.sets <= 2, "attn_prep: at most two head sets");
    DF_CUDA_REQUIRE(a.head_dim <= 512, "attn_prep: head_dim above 512");
    DF_CUDA_REQUIRE(a.n_rot <= a.head_dim && a.n_rot % 2 == 0, "attn_prep: n_rot must be even and <= head_dim");
    const HeadSet& k = a.set[a.sets - 1];
    DF_CUDA_REQUIRE(!(a.k_cache || rows) || (k.head_stride == a.head_dim && k.row == k.heads * a.head_dim),
                    "attn_prep: the stored set must be contiguous heads");
    DF_CUDA_REQUIRE(!rows || a.T <= kMaxLaneRows, "attn_prep: rows of several sequences take at most 8 tokens");
    // Decode and verify: a block per head. Prefill: a warp per head, 4 heads per block (8 from
    // 256 tokens on: two rounds of the warps).
    const int heads = a.set[0].heads + (a.sets > 1 ? a.set[1].heads : 0);
    if (a.T <= 8) {
        if (rows)
            launch(attn_prep_rows_kernel, dim3(heads, a.T), 128, 0, s, a, 1, *rows);
        else
            launch(attn_prep_kernel, dim3(heads, a.T), 128, 0, s, a, 1);
    } else {
        const int per_block = a.T >= 256 ? 8 : 4;
        launch_attn_prep_warps(a, per_block, dim3((heads + per_block - 1) / per_block, a.T), s);
    }
}

void launch_gated_rmsnorm(const float* x, const float* z, const float* w, int T, int heads, int n, float eps,
                          float* out, cudaStream_t s) {
    if (T <= 0) return;
    DF_CUDA_REQUIRE(n <= 1024, "gated_rmsnorm: head size above 1024");
    launch(gated_rmsnorm_kernel, T * heads, 128, 0, s, x, z, w, n, eps, out);
}

}  // namespace df::cuda
