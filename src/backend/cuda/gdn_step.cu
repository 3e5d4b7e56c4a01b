// The GDN mixer after its projections, for T <= 8 tokens (decode, speculative verify), in one
// kernel: the causal conv of a value head's q, k and v channels, the L2 norms of q and k, the
// delta rule, the gated RMSNorm with z and, when the next matmul runs on the integer tensor
// cores, that matmul's activation format. As three kernels (gdn_conv, the delta rule, the gated
// norm) the chain spent ~11 us per 27B GDN layer, mostly in latency (NOTES.md, session 13).
//
// B blocks per value head j (8 warps each, a slice of D / B value columns), with the one-token
// delta kernel's warp-per-column math, and every other step rounded as its separate kernel
// rounds it, so the outputs equal the three-kernel path's bit for bit. A cluster holds the 2B
// blocks of the heads 2u, 2u + 1, i.e. one 256-value unit of the activation format: its first
// block reads the others' outputs from distributed shared memory to norm and convert the unit.
// The q/k conv of key head j % Hk is run by the B Hv / Hk blocks of its value heads, which all
// read the old conv state: the last of them to have read it (a counter per key head) writes the
// new one. (Clusters of whole key heads, 6 to 12 blocks on the 27B, waited ~2 us longer for
// free SMs and left the step no faster.) After a deferred q/k/v + z launch (GdnStepArgs::
// qkv_parts) the step sums the tiles several warps shared as it loads its inputs.
#include <cooperative_groups.h>

#include "backend/cuda/act_quant.cuh"
#include "backend/cuda/check.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/gdn_math.cuh"
#include "backend/cuda/gdn_step.h"
#include "backend/cuda/imma_deferred.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/norm_sum.cuh"

namespace df::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kStepWarps = 8, kStepThreads = 32 * kStepWarps;
constexpr int kStepD = 128;                       // head dim (ssm.state_size)
constexpr int kStepMaxT = 8;
constexpr int kStepTaps = 4;

// The two halves of a cluster barrier (arrive releases this thread's memory accesses, wait
// acquires the others'), all threads of a warp together.
DF_DEV void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
DF_DEV void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }

// B blocks per value head, block b taking the value columns b D / B + warp + 8 i; clusters of 2B.
// kLanes: a batched pass, the sequence's rows and state from a.lane[blockIdx.y]. kParts: qkv and z
// from a deferred imma launch's parts (a.qkv_parts; an instantiation of its own, as its staging
// takes registers: 128 against 102 for B = 4).
template <int kTaps, int B, bool kLanes, bool kParts>
__global__ void __launch_bounds__(kStepThreads, 2) gdn_step_kernel(const GdnStepArgs a) {
    if (!a.late_trigger) pdl_trigger();
    GdnStepLane L;
    if constexpr (kLanes)
        L = param_pick(a.lane, static_cast<int>(blockIdx.y));
    else
        L = GdnStepLane{a.qkv, a.z, a.alpha, a.beta, a.conv_state, a.state, a.out, a.T};
    unsigned* const counters = a.counters + (kLanes ? blockIdx.y * a.k_heads : 0);
    constexpr int D = kStepD, NPL = D / 32, kSlice = D / B, kCols = kSlice / kStepWarps;
    constexpr int kCh = 2 * D + kSlice;  // the block's channels: q, k, its slice of v
    constexpr int kChPer = (kCh + kStepThreads - 1) / kStepThreads;
    cg::cluster_group cluster = cg::this_cluster();
    const int rank = static_cast<int>(cluster.block_rank()), csize = static_cast<int>(cluster.num_blocks());
    const int b = rank % B, side = rank / B, unit = static_cast<int>(blockIdx.x) / csize;
    const int Hk = a.k_heads, Hv = a.v_heads, T = L.T;
    const int j = 2 * unit + side, kh = j % Hk, readers = B * (Hv / Hk);
    const int c0 = b * kSlice;  // the block's first value column
    const int C = (2 * Hk + Hv) * D, units = Hv * D / 256;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;

    __shared__ __align__(16) float xc[kStepMaxT][3][D];  // per token: q, k (normalized in place), v
    __shared__ __align__(16) float yo[kStepMaxT][D];     // the delta rule's outputs
    __shared__ __align__(16) float zs[kStepMaxT][256];   // the even block's: z of its unit
    __shared__ float keep[kTaps - 1][2 * D];             // the new q/k conv state (the last reader writes it)
    __shared__ unsigned arrived;                         // readers of the old q/k conv state before this block
    __shared__ float db[kStepMaxT][2];                   // per token: decay, b
    __shared__ float nw[D];                              // the even block's: the norm's weights

    // Block channel i (< 2D + D / B) is part i / D (q, k, v) of the heads (kh, kh, j); the v
    // part is the block's slice of columns.
    auto chan = [&](int i) {
        const int p = i / D, e = i % D;
        return (p == 0 ? kh : p == 1 ? Hk + kh : 2 * Hk + j) * D + (p == 2 ? c0 + e : e);
    };
    // Weights before the wait (nothing writes them).
    float wc[kChPer][kTaps];
#pragma unroll
    for (int m = 0; m < kChPer; ++m) {
        const int i = tid + kStepThreads * m;
#pragma unroll
        for (int k = 0; k < kTaps; ++k) wc[m][k] = i < kCh ? a.conv_w[static_cast<int64_t>(chan(i)) * kTaps + k] : 0.f;
    }
    const bool gather = side == 0 && b == 0;  // the block that norms and converts the pair's unit
    const float nwv = gather && tid < D ? a.norm_w[tid] : 0.f;  // staged after the wait: a store would wait for it
    const float dt_bias = a.dt_bias[j], a_neg = a.a_neg[j];
    pdl_wait();
    if (gather && tid < D) nw[tid] = nwv;

    // Loads in the order they are needed: the conv's inputs (which gate everything else), alpha
    // and beta, then the state of the warp's columns c0 + warp + 8 i and z (used after the conv
    // and the norms). Deferred inputs (kParts) are staged in xc instead.
    static_assert(!(kLanes && kParts), "deferred inputs are a lone sequence's");
    // The state is loaded before the staging where its registers leave room (B = 4: 16 a
    // thread), else requested into L1 first and loaded after it (B = 2, 1 spilled otherwise).
    constexpr bool kStateFirst = !kParts || kCols * NPL <= 16;
    float x[kChPer][kStepMaxT], win[kChPer][kTaps];
#pragma unroll
    for (int m = 0; m < kChPer; ++m) {
        const int i = tid + kStepThreads * m;
        if (i >= kCh) continue;
        const int c = chan(i);
        if constexpr (!kParts)
#pragma unroll
            for (int t = 0; t < kStepMaxT; ++t) x[m][t] = t < T ? L.qkv[static_cast<int64_t>(t) * C + c] : 0.f;
#pragma unroll
        for (int k = 0; k < kTaps - 1; ++k) win[m][k] = L.conv_state[static_cast<int64_t>(k) * C + c];
    }
    const float alpha = tid < T ? L.alpha[static_cast<int64_t>(tid) * Hv + j] : 0.f;
    const float beta_raw = tid < T ? L.beta[static_cast<int64_t>(tid) * Hv + j] : 0.f;
    float* S = L.state + static_cast<int64_t>(j) * D * D;
    float s[kCols][NPL];
    auto load_state = [&] {
#pragma unroll
        for (int i = 0; i < kCols; ++i)
#pragma unroll
            for (int m = 0; m < NPL; ++m) s[i][m] = S[(c0 + warp + kStepWarps * i) * D + m * 32 + lane];
    };
    if constexpr (kStateFirst) load_state();
    if (gather && !kParts) {  // z of the pair's unit for every token
        for (int i = tid; i < 64 * T; i += kStepThreads) {
            const int t = i / 64, e = 4 * (i % 64);
            cp_async<16>(&zs[t][e], L.z + (static_cast<int64_t>(t) * units + j / 2) * 256 + e);
        }
        cp_async_commit();
    }
    if constexpr (kParts) {
        // The block's channels 8 at a time (8 rows of one 16-row tile) into xc[t][part][e],
        // where the conv below reads and overwrites them (each channel by its own thread), and
        // the gatherer's z unit into zs: one index space, so that z's loads go out beside q/k/v's.
        if constexpr (!kStateFirst)
#pragma unroll
            for (int i = 0; i < kCols; ++i)
#pragma unroll
                for (int m = 0; m < NPL; ++m)
                    asm volatile("prefetch.global.L1 [%0];" ::"l"(S + (c0 + warp + kStepWarps * i) * D + m * 32 + lane));
        constexpr int kGroups = kCh / 8;
        static_assert(kCh % 8 == 0 && kSlice % 8 == 0, "channel groups of 8 stay within a part");
        const int items = (kGroups + (gather ? 32 : 0)) * T;
        for (int i = tid; i < items; i += kStepThreads) {
            float v[8];
            bool whole;
            if (i < kGroups * T) {
                const int t = i / kGroups, ci = 8 * (i % kGroups);
                deferred_rows<kDeferValues>(a.qkv_parts, t, chan(ci), v, whole);
                store8<true>(&xc[t][ci / D][ci % D], v);
            } else {
                const int t = (i - kGroups * T) / 32, e = 8 * ((i - kGroups * T) % 32);
                deferred_rows<kDeferValues>(a.z_parts, t, (j / 2) * 256 + e, v, whole);
                store8<true>(&zs[t][e], v);
            }
        }
        __syncthreads();
#pragma unroll
        for (int m = 0; m < kChPer; ++m) {
            const int i = tid + kStepThreads * m;
#pragma unroll
            for (int t = 0; t < kStepMaxT; ++t) x[m][t] = t < T && i < kCh ? xc[t][i / D][i % D] : 0.f;
        }
        if constexpr (!kStateFirst) load_state();
    }

    trace_phase(1);  // everything requested
    // Conv (gdn_conv_kernel's sums) into xc; the last kTaps - 1 inputs become the new state.
#pragma unroll
    for (int m = 0; m < kChPer; ++m) {
        const int i = tid + kStepThreads * m;
        if (i >= kCh) continue;
#pragma unroll
        for (int t = 0; t < kStepMaxT; ++t) {
            if (t >= T) break;
            win[m][kTaps - 1] = x[m][t];
            float sum = 0.f;
#pragma unroll
            for (int k = 0; k < kTaps; ++k) sum = __fadd_rn(sum, __fmul_rn(win[m][k], wc[m][k]));
            xc[t][i / D][i % D] = silu_f(sum);  // v: column c0 + i % D at xc[t][2][i % D]
#pragma unroll
            for (int k = 0; k < kTaps - 1; ++k) win[m][k] = win[m][k + 1];
        }
#pragma unroll
        for (int k = 0; k < kTaps - 1; ++k) {
            if (i < 2 * D)
                keep[k][i] = win[m][k];
            else  // v channels: this block's alone
                L.conv_state[static_cast<int64_t>(k) * C + chan(i)] = win[m][k];
        }
    }
    if (tid < T) {
        db[tid][0] = gdn_decay(alpha, dt_bias, a_neg);
        db[tid][1] = sigmoid_f(beta_raw);
    }
    __syncthreads();
    // Every block of key head kh has read its old q/k conv state once it has passed the barrier
    // above; the last of them writes the new one (identical in all) at its end. The count is a
    // release atomic (the barrier orders the block's reads before it; a fence would also acquire,
    // and its L1 invalidation would drop the block's cached loads) by a thread that has stored
    // nothing to global memory (the release does not wait), and its result is not needed before
    // the end.
    const bool counter_thread = tid == kStepThreads - 1;
    unsigned prev = 0;
    if (counter_thread) prev = atomic_add_release_gpu(counters + kh, 1u);
    trace_phase(2);  // conv done
    for (int task = warp; task < 2 * T; task += kStepWarps) {  // (token, q or k)
        float* v = xc[task >> 1][task & 1];
        float x[NPL];
#pragma unroll
        for (int m = 0; m < NPL; ++m) x[m] = v[m * 32 + lane];
        l2_normalize(x, a.eps);
#pragma unroll
        for (int m = 0; m < NPL; ++m) v[m * 32 + lane] = x[m];
    }
    __syncthreads();

    trace_phase(3);  // q, k normalized
    // The delta rule, token by token (gdn_delta_kernel's per-column steps).
    const float out_scale = 1.0f / sqrtf(static_cast<float>(D));
    for (int t = 0; t < T; ++t) {
        float q[NPL], k[NPL];
#pragma unroll
        for (int m = 0; m < NPL; ++m) {
            q[m] = xc[t][0][m * 32 + lane];
            k[m] = xc[t][1][m * 32 + lane];
        }
        const float decay = db[t][0], beta = db[t][1];
        float u[kCols], o[kCols];
#pragma unroll
        for (int i = 0; i < kCols; ++i) {
            u[i] = 0.f;
#pragma unroll
            for (int m = 0; m < NPL; ++m) {
                s[i][m] *= decay;
                u[i] = fmaf(s[i][m], k[m], u[i]);
            }
        }
#pragma unroll
        for (int i = 0; i < kCols; ++i) u[i] = warp_sum(u[i]);
#pragma unroll
        for (int i = 0; i < kCols; ++i) {
            const float d = beta * (xc[t][2][warp + kStepWarps * i] - u[i]);
            o[i] = 0.f;
#pragma unroll
            for (int m = 0; m < NPL; ++m) {
                s[i][m] = fmaf(k[m], d, s[i][m]);
                o[i] = fmaf(s[i][m], q[m], o[i]);
            }
        }
#pragma unroll
        for (int i = 0; i < kCols; ++i) o[i] = warp_sum(o[i]);
#pragma unroll
        for (int i = 0; i < kCols; ++i)
            if (lane == i) yo[t][c0 + warp + kStepWarps * i] = o[i] * out_scale;
    }
#pragma unroll
    for (int i = 0; i < kCols; ++i)
#pragma unroll
        for (int m = 0; m < NPL; ++m) S[(c0 + warp + kStepWarps * i) * D + m * 32 + lane] = s[i][m];

    if (counter_thread) arrived = prev;
    trace_phase(4);  // delta rule done, state stored
    cp_async_wait<0>();
    __syncthreads();  // z landed for the whole block (the cluster barrier orders it too; racecheck sees this one)
    cluster.sync();  // every block's outputs (and z) are in its shared memory; `arrived` is set
    trace_phase(5);  // cluster barrier passed
    if (a.late_trigger) pdl_trigger();
    if (arrived == static_cast<unsigned>(readers - 1)) {  // the last reader: the key head's new q/k conv state
        fence_acq_rel_gpu();  // acquire: the other readers' reads before these writes
        for (int i = tid; i < 2 * D; i += kStepThreads)
#pragma unroll
            for (int k = 0; k < kTaps - 1; ++k) L.conv_state[static_cast<int64_t>(k) * C + chan(i)] = keep[k][i];
        if (tid == 0) counters[kh] = 0u;  // ready for the next call
    }
    // The pair's unit, token `warp` (gated_rmsnorm_quant_kernel's steps). The partners may leave
    // once their outputs are read: the gatherer arrives at the cluster barrier after its reads
    // and waits for it (long complete) only at its end.
    if (gather) {
        float v[8];
        if (warp < T) {
            // Values 8 l .. 8 l + 7: columns of head j (l < 16) or j + 1, from the block holding them.
            const int col = 8 * (lane & 15), holder = (lane >> 4) * B + col / kSlice;
            load8<true>(holder == rank ? &yo[warp][col] : cluster.map_shared_rank(&yo[warp][col], holder), v);
        }
        cluster_arrive();
        if (warp < T) {
            float zv[8], wv[8];
            load8<true>(&zs[warp][8 * lane], zv);
            load8<false>(&nw[(8 * lane) % D], wv);
            double sq = 0;
#pragma unroll
            for (int e = 0; e < 8; ++e) sq += static_cast<double>(__fmul_rn(v[e], v[e]));
#pragma unroll
            for (int o = 1; o < D / 8; o <<= 1) sq += __shfl_xor_sync(0xffffffffu, sq, o);
            const float scale = rms_scale(sq, D, a.eps);
            float y[8];
#pragma unroll
            for (int e = 0; e < 8; ++e) y[e] = __fmul_rn(__fmul_rn(__fmul_rn(v[e], scale), wv[e]), silu_f(zv[e]));
            store8<true>(L.out + (static_cast<int64_t>(warp) * units + j / 2) * 256 + 8 * lane, y);
            if (!kLanes && a.xq) act_quant_unit(y, warp, j / 2, units, units * 8, a.xq, a.xe, lane);
        }
        trace_phase(6);  // normed and converted
        cluster_wait();
    } else {
        cluster_arrive();
        cluster_wait();  // no block leaves while the gatherer may still read its outputs
    }
    trace_phase(7);
}

}  // namespace

bool gdn_step_fits(const GdnStepArgs& a) {
    auto al = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    auto lane_fits = [&](int T, const float* z, const float* out) {
        return T >= 1 && T <= kStepMaxT && al(z) && al(out);
    };
    if (a.head_dim != kStepD || a.taps != kStepTaps || !a.counters) return false;
    if (a.k_heads <= 0 || a.v_heads % 2 != 0 || a.v_heads % a.k_heads != 0) return false;
    if (!a.qkv_parts.out != !a.z_parts.out) return false;
    if (a.qkv_parts.out) {  // one-matrix outputs of T rows: qkv [T, C], z [T, Hv D]
        const ImmaDeferred &q = a.qkv_parts, &z = a.z_parts;
        if (a.lanes != 0 || q.out != a.qkv || z.out != a.z || q.pair || z.pair || q.add || z.add || !q.partial ||
            !z.partial || q.rows != (2 * a.k_heads + a.v_heads) * kStepD || z.rows != a.v_heads * kStepD ||
            q.cols <= 0 || q.cols % 256 != 0 || z.cols != q.cols || q.warps <= 0 || z.warps <= 0)
            return false;
    }
    if (a.lanes == 0) return a.k_heads <= a.counter_count && lane_fits(a.T, a.z, a.out);
    if (a.lanes < 0 || a.lanes > kGdnStepMaxLanes || a.k_heads * a.lanes > a.counter_count || a.xq) return false;
    for (int i = 0; i < a.lanes; ++i)
        if (!lane_fits(a.lane[i].T, a.lane[i].z, a.lane[i].out)) return false;
    return true;
}

template <int B>
void gdn_step_launch(const GdnStepArgs& a, cudaStream_t s) {
    if (a.lanes > 0)
        launch_cluster(gdn_step_kernel<kStepTaps, B, true, false>, dim3(a.v_heads * B, a.lanes), kStepThreads, 0, s, 2 * B, a);
    else if (a.qkv_parts.out)
        launch_cluster(gdn_step_kernel<kStepTaps, B, false, true>, a.v_heads * B, kStepThreads, 0, s, 2 * B, a);
    else
        launch_cluster(gdn_step_kernel<kStepTaps, B, false, false>, a.v_heads * B, kStepThreads, 0, s, 2 * B, a);
}

void launch_gdn_step(const GdnStepArgs& a, cudaStream_t s) {
    DF_CUDA_REQUIRE(gdn_step_fits(a), "gdn_step: shape or alignment not supported");
    DF_CUDA_REQUIRE(!a.xq == !a.xe, "gdn_step: xq and xe go together");
    switch (a.blocks_per_head) {
        case 1: gdn_step_launch<1>(a, s); break;
        case 2: gdn_step_launch<2>(a, s); break;
        default: gdn_step_launch<4>(a, s); break;
    }
}

}  // namespace df::cuda
