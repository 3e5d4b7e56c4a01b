// The gated delta rule (Gated DeltaNet recurrence) over T tokens.
//
// The state of value column c of head j (Dk floats, a contiguous run over the key index) stays in
// registers for all T tokens: the 128x128 state is read and written once per call, not once per
// token. Per token a column needs two reductions over the key index (S^T k and S^T q), done with
// shuffles. Decode: a warp per column, each token's q, k, decay and beta prepared by every
// column (one launch). Prefill (GdnArgs::prep): a first kernel normalizes q, k and forms decay
// and beta once per head; then G = Dk / 16 lanes own a column, 16 keys each (per token: 64 FMA
// per lane against 16 for a warp per column, where the two 5-level reductions and the loads of q
// and k made the kernel issue-bound: 1.16 ms per 27B layer at T = 1024 under ncu).
#include "backend/cuda/check.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/gdn_math.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"

namespace df::cuda {
namespace {

constexpr int kGdnWarps = 4;

// The per-token inputs that do not depend on the state, once per (token, head) instead of once
// per value column: q and k of each key head L2-normalized, decay and beta of each value head.
// Layout of a.prep per token: q (Hk x D), k (Hk x D), then (decay, b) per value head.
template <int NPL>
__global__ void __launch_bounds__(kGdnWarps * 32) gdn_prep_kernel(const GdnArgs a) {
    pdl_begin();
    constexpr int D = 32 * NPL;
    const int t = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int Hk = a.k_heads, Hv = a.v_heads;
    const float* row = a.qkv + static_cast<int64_t>(t) * (2 * Hk + Hv) * D;
    float* p = a.prep + gdn_prep_floats_per_token(Hk, Hv, D) * t;
    for (int h = warp; h < 2 * Hk; h += kGdnWarps) {  // q heads, then k heads
        float x[NPL];
#pragma unroll
        for (int m = 0; m < NPL; ++m) x[m] = row[h * D + m * 32 + lane];
        l2_normalize(x, a.eps);
#pragma unroll
        for (int m = 0; m < NPL; ++m) p[h * D + m * 32 + lane] = x[m];
    }
    for (int j = threadIdx.x; j < Hv; j += blockDim.x) {
        p[2 * Hk * D + 2 * j] = gdn_decay(a.alpha[static_cast<int64_t>(t) * Hv + j], a.dt_bias[j], a.a_neg[j]);
        p[2 * Hk * D + 2 * j + 1] = sigmoid_f(a.beta[static_cast<int64_t>(t) * Hv + j]);
    }
}

template <int NPL, bool kPrep>
__global__ void __launch_bounds__(kGdnWarps * 32) gdn_delta_kernel(const GdnArgs a) {
    pdl_begin();
    constexpr int D = 32 * NPL;
    const int j = blockIdx.x;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int c = blockIdx.y * kGdnWarps + warp;
    if (c >= D) return;
    const int Hk = a.k_heads, Hv = a.v_heads;
    const int64_t C = static_cast<int64_t>(2 * Hk + Hv) * D;
    const int kh = j % Hk;
    float* S = a.state + (static_cast<int64_t>(j) * D + c) * D;
    float s[NPL];
#pragma unroll
    for (int m = 0; m < NPL; ++m) s[m] = S[m * 32 + lane];
    const float out_scale = 1.0f / sqrtf(static_cast<float>(D));
    const float dt_bias = a.dt_bias[j], a_neg = a.a_neg[j];

    // A token's inputs (q, k normalized; v; decay; beta) do not depend on the state: they are
    // loaded two tokens ahead and prepared one token ahead, so only the state's own chain (two
    // reductions per token) is serial.
    struct Raw {
        float q[NPL], k[NPL], v, alpha, beta;
    };
    struct Tok {
        float q[NPL], k[NPL], v, decay, b;
    };
    const int64_t P = gdn_prep_floats_per_token(Hk, Hv, D);
    auto load = [&](int t, Raw& r) {
        const float* row = a.qkv + t * C;
        // With kPrep, q and k come normalized and alpha, beta hold the decay and b.
        const float* qk = kPrep ? a.prep + P * t : row;
#pragma unroll
        for (int m = 0; m < NPL; ++m) {
            r.q[m] = qk[kh * D + m * 32 + lane];
            r.k[m] = qk[(Hk + kh) * D + m * 32 + lane];
        }
        r.v = row[2 * Hk * D + j * D + c];
        r.alpha = kPrep ? qk[2 * Hk * D + 2 * j] : a.alpha[static_cast<int64_t>(t) * Hv + j];
        r.beta = kPrep ? qk[2 * Hk * D + 2 * j + 1] : a.beta[static_cast<int64_t>(t) * Hv + j];
    };
    auto prepare = [&](Raw& r, Tok& p) {
        if constexpr (!kPrep) {
            l2_normalize(r.q, a.eps);
            l2_normalize(r.k, a.eps);
        }
#pragma unroll
        for (int m = 0; m < NPL; ++m) {
            p.q[m] = r.q[m];
            p.k[m] = r.k[m];
        }
        p.v = r.v;
        p.decay = kPrep ? r.alpha : gdn_decay(r.alpha, dt_bias, a_neg);
        p.b = kPrep ? r.beta : sigmoid_f(r.beta);
    };
    Raw raw;
    Tok next;
    load(0, raw);
    prepare(raw, next);
    if (a.T > 1) load(1, raw);

    for (int t = 0; t < a.T; ++t) {
        const Tok cur = next;
        if (t + 1 < a.T) prepare(raw, next);
        if (t + 2 < a.T) load(t + 2, raw);

        float u = 0.f;
#pragma unroll
        for (int m = 0; m < NPL; ++m) {
            s[m] *= cur.decay;
            u = fmaf(s[m], cur.k[m], u);
        }
        u = warp_sum(u);
        const float d = cur.b * (cur.v - u);
        float o = 0.f;
#pragma unroll
        for (int m = 0; m < NPL; ++m) {
            s[m] = fmaf(cur.k[m], d, s[m]);
            o = fmaf(s[m], cur.q[m], o);
        }
        o = warp_sum(o);
        if (lane == 0) a.out[static_cast<int64_t>(t) * Hv * D + static_cast<int64_t>(j) * D + c] = o * out_scale;
    }
#pragma unroll
    for (int m = 0; m < NPL; ++m) S[m * 32 + lane] = s[m];
}

// Prefill from prepared inputs: G lanes (a power of two) own value column c, lane i the keys
// 4i + 4Gm + e (m, e < 4: four 16-byte reads of q and k per token, consecutive across the G
// lanes). A warp holds 32 / G columns, a block kGdnWarps warps, all of value head j: the block
// stages the inputs of kGdnChunk tokens (q and k of key head j % Hk, its columns' v, decay and
// beta) in shared memory with cp.async, the next chunk while this one runs, so the per-token
// chain waits on shared memory only (reading them from global memory two tokens ahead left the
// kernel stalled on the loads).
constexpr int kGdnChunk = 32;

template <int G>
struct GdnWide {
    static constexpr int D = 16 * G, kCols = kGdnWarps * 32 / G;  // value columns per block
    // One buffer: q [chunk][D], k [chunk][D], v [chunk][kCols], (decay, b, -, -) [chunk].
    static constexpr int kQ = 0, kK = kGdnChunk * D, kV = 2 * kGdnChunk * D, kDB = kV + kGdnChunk * kCols;
    static constexpr int kBufFloats = kDB + 4 * kGdnChunk;
    static constexpr size_t kSmem = 2 * sizeof(float) * kBufFloats;
};

template <int G>
__global__ void __launch_bounds__(kGdnWarps * 32) gdn_delta_wide_kernel(const GdnArgs a) {
    using W = GdnWide<G>;
    constexpr int D = W::D, kCols = W::kCols;
    extern __shared__ __align__(16) float gdn_smem[];
    pdl_begin();
    const int j = blockIdx.x, tid = threadIdx.x;
    const int warp = tid >> 5, lane = tid & 31, i = lane % G;
    const int c0 = blockIdx.y * kCols, cb = warp * (32 / G) + lane / G, c = c0 + cb;  // grid.y covers D exactly
    const int Hk = a.k_heads, Hv = a.v_heads;
    const int64_t C = static_cast<int64_t>(2 * Hk + Hv) * D, P = gdn_prep_floats_per_token(Hk, Hv, D);
    const int kh = j % Hk;
    float4* S = reinterpret_cast<float4*>(a.state + (static_cast<int64_t>(j) * D + c) * D) + i;
    float4 s[4];
#pragma unroll
    for (int m = 0; m < 4; ++m) s[m] = S[G * m];
    const float out_scale = 1.0f / sqrtf(static_cast<float>(D));

    const int chunks = (a.T + kGdnChunk - 1) / kGdnChunk;
    auto stage = [&](int ch) {
        float* buf = gdn_smem + (ch & 1) * W::kBufFloats;
        const int t0 = ch * kGdnChunk, n = min(kGdnChunk, a.T - t0);
        for (int e = tid; e < n * (D / 4); e += kGdnWarps * 32) {
            const int tt = e / (D / 4), f = 4 * (e % (D / 4));
            const float* p = a.prep + P * (t0 + tt);
            cp_async<16>(buf + W::kQ + tt * D + f, p + kh * D + f);
            cp_async<16>(buf + W::kK + tt * D + f, p + (Hk + kh) * D + f);
        }
        for (int e = tid; e < n * (kCols / 4); e += kGdnWarps * 32) {
            const int tt = e / (kCols / 4), f = 4 * (e % (kCols / 4));
            cp_async<16>(buf + W::kV + tt * kCols + f, a.qkv + (t0 + tt) * C + 2 * Hk * D + j * D + c0 + f);
        }
        for (int tt = tid; tt < n; tt += kGdnWarps * 32)
            cp_async<8>(buf + W::kDB + 4 * tt, a.prep + P * (t0 + tt) + 2 * Hk * D + 2 * j);
    };

    struct Tok {
        float4 q[4], k[4];
        float v, decay, b;
    };
    auto read = [&](const float* buf, int tt, Tok& r) {
        const float4* q = reinterpret_cast<const float4*>(buf + W::kQ + tt * D) + i;
        const float4* k = reinterpret_cast<const float4*>(buf + W::kK + tt * D) + i;
#pragma unroll
        for (int m = 0; m < 4; ++m) {
            r.q[m] = q[G * m];
            r.k[m] = k[G * m];
        }
        r.v = buf[W::kV + tt * kCols + cb];
        const float2 db = *reinterpret_cast<const float2*>(buf + W::kDB + 4 * tt);
        r.decay = db.x;
        r.b = db.y;
    };
    auto group_sum = [](float v) {
#pragma unroll
        for (int o = 1; o < G; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        return v;  // the same in every lane of the group (each step adds the same pair)
    };
    auto run = [&](int t, const Tok& cur) {
        float um[4];
#pragma unroll
        for (int m = 0; m < 4; ++m) {
            s[m].x *= cur.decay;
            s[m].y *= cur.decay;
            s[m].z *= cur.decay;
            s[m].w *= cur.decay;
            um[m] = fmaf(s[m].w, cur.k[m].w, fmaf(s[m].z, cur.k[m].z, fmaf(s[m].y, cur.k[m].y, s[m].x * cur.k[m].x)));
        }
        const float u = group_sum((um[0] + um[1]) + (um[2] + um[3]));
        const float d = cur.b * (cur.v - u);
        float om[4];
#pragma unroll
        for (int m = 0; m < 4; ++m) {
            s[m].x = fmaf(cur.k[m].x, d, s[m].x);
            s[m].y = fmaf(cur.k[m].y, d, s[m].y);
            s[m].z = fmaf(cur.k[m].z, d, s[m].z);
            s[m].w = fmaf(cur.k[m].w, d, s[m].w);
            om[m] = fmaf(s[m].w, cur.q[m].w, fmaf(s[m].z, cur.q[m].z, fmaf(s[m].y, cur.q[m].y, s[m].x * cur.q[m].x)));
        }
        const float o = group_sum((om[0] + om[1]) + (om[2] + om[3]));
        if (i == 0) a.out[static_cast<int64_t>(t) * Hv * D + static_cast<int64_t>(j) * D + c] = o * out_scale;
    };

    stage(0);
    cp_async_commit();
    for (int ch = 0; ch < chunks; ++ch) {
        if (ch + 1 < chunks) stage(ch + 1);
        cp_async_commit();  // possibly empty: wait_group 1 then always means "chunk ch has landed"
        cp_async_wait<1>();
        __syncthreads();
        const float* buf = gdn_smem + (ch & 1) * W::kBufFloats;
        const int t0 = ch * kGdnChunk, n = min(kGdnChunk, a.T - t0);
        // Two register slots: token tt + 1's inputs are read while tt runs.
        Tok x0, x1;
        read(buf, 0, x0);
        int tt = 0;
        for (; tt + 1 < n; tt += 2) {
            read(buf, tt + 1, x1);
            run(t0 + tt, x0);
            if (tt + 2 < n) read(buf, tt + 2, x0);
            run(t0 + tt + 1, x1);
        }
        if (tt < n) run(t0 + tt, x0);
        __syncthreads();  // this buffer is staged again for chunk ch + 2
    }
#pragma unroll
    for (int m = 0; m < 4; ++m) S[G * m] = s[m];
}

// The wide kernel's head dims (G = D / 16 a power of two dividing 32) and 16-byte alignment.
bool gdn_wide_fits(const GdnArgs& a) {
    return (a.head_dim == 64 || a.head_dim == 128 || a.head_dim == 256) &&
           reinterpret_cast<uintptr_t>(a.state) % 16 == 0 && reinterpret_cast<uintptr_t>(a.prep) % 16 == 0 &&
           reinterpret_cast<uintptr_t>(a.qkv) % 16 == 0;
}

template <int G>
void gdn_wide_launch(const GdnArgs& a, cudaStream_t s) {
    using W = GdnWide<G>;
    static_assert(W::kSmem <= 227 * 1024, "gdn_delta: staged chunk exceeds shared memory");
    static const bool attr = [] {
        DF_CUDA_CHECK(cudaFuncSetAttribute(gdn_delta_wide_kernel<G>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(W::kSmem)));
        return true;
    }();
    (void)attr;
    const dim3 grid(a.v_heads, W::D / W::kCols);
    launch(gdn_delta_wide_kernel<G>, grid, kGdnWarps * 32, W::kSmem, s, a);
}

template <int NPL>
void gdn_launch(const GdnArgs& a, cudaStream_t s) {
    const dim3 grid(a.v_heads, (a.head_dim + kGdnWarps - 1) / kGdnWarps);
    if (a.prep) {
        launch(gdn_prep_kernel<NPL>, a.T, kGdnWarps * 32, 0, s, a);
        if (gdn_wide_fits(a)) {
            switch (a.head_dim) {
                case 64: gdn_wide_launch<4>(a, s); break;
                case 128: gdn_wide_launch<8>(a, s); break;
                default: gdn_wide_launch<16>(a, s); break;
            }
        } else {
            launch(gdn_delta_kernel<NPL, true>, grid, kGdnWarps * 32, 0, s, a);
        }
    } else {
        launch(gdn_delta_kernel<NPL, false>, grid, kGdnWarps * 32, 0, s, a);
    }
}

}  // namespace

void launch_gdn_delta(const GdnArgs& a, cudaStream_t s) {
    if (a.T <= 0) return;
    DF_CUDA_REQUIRE(a.head_dim % 32 == 0 && a.head_dim <= 256, "gdn_delta: head_dim must be 32, 64, ..., 256");
    DF_CUDA_REQUIRE(a.v_heads % a.k_heads == 0, "gdn_delta: v_heads must be a multiple of k_heads");
    switch (a.head_dim / 32) {
        case 1: gdn_launch<1>(a, s); break;
        case 2: gdn_launch<2>(a, s); break;
        case 3: gdn_launch<3>(a, s); break;
        case 4: gdn_launch<4>(a, s); break;
        case 5: gdn_launch<5>(a, s); break;
        case 6: gdn_launch<6>(a, s); break;
        case 7: gdn_launch<7>(a, s); break;
        case 8: gdn_launch<8>(a, s); break;
    }
}

}  // namespace df::cuda
