// The gated delta rule (Gated DeltaNet recurrence) over T tokens.
//
// Grid (value head j, column group); a warp owns one value column c of head j and keeps that
// column of the state (Dk floats, a contiguous run over the key index) in registers for all T
// tokens: the 128x128 state is read and written once per call, not once per token. Per token a
// warp needs two reductions over the key index (S^T k and S^T q), done with shuffles. For
// prefill (GdnArgs::prep) a first kernel normalizes q, k and forms decay and beta once per head.
#include "backend/cuda/check.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"

namespace df::cuda {
namespace {

constexpr int kGdnWarps = 4;

// L2 normalisation as ggml: x / max(sqrt(sum x^2), eps), the sum in double.
template <int NPL>
__device__ void l2_normalize(float (&x)[NPL], float eps) {
    double s = 0;
#pragma unroll
    for (int m = 0; m < NPL; ++m) s += static_cast<double>(__fmul_rn(x[m], x[m]));
    s = warp_sum(s);
    const float scale = 1.0f / fmaxf(static_cast<float>(sqrt(s)), eps);
#pragma unroll
    for (int m = 0; m < NPL; ++m) x[m] = __fmul_rn(x[m], scale);
}

// A value head's decay e^(softplus(alpha + dt_bias) a_neg), as ggml rounds it.
DF_DEV float gdn_decay(float alpha, float dt_bias, float a_neg) {
    return expf(__fmul_rn(softplus_f(__fadd_rn(alpha, dt_bias)), a_neg));
}

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

template <int NPL>
void gdn_launch(const GdnArgs& a, cudaStream_t s) {
    const dim3 grid(a.v_heads, (a.head_dim + kGdnWarps - 1) / kGdnWarps);
    if (a.prep) {
        launch(gdn_prep_kernel<NPL>, a.T, kGdnWarps * 32, 0, s, a);
        launch(gdn_delta_kernel<NPL, true>, grid, kGdnWarps * 32, 0, s, a);
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
