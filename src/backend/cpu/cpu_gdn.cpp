// Gated DeltaNet ops on the CPU: causal conv, the gated delta rule, the gated RMSNorm.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"

namespace df::cpu {
namespace {

float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// ggml's l2_norm: x / max(sqrt(sum x^2), eps), the sum in double.
void l2_normalize(const float* x, int n, float eps, float* y) {
    double sum = 0;
    for (int i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
    const float scale = 1.0f / std::max(static_cast<float>(std::sqrt(sum)), eps);
    for (int i = 0; i < n; ++i) y[i] = x[i] * scale;
}

}  // namespace

void CpuBackend::gdn_conv(float* x, int T, const GdnShape& g, const float* w, float* conv_state) {
    const int C = g.channels(), K = g.conv_kernel, S = K - 1;
    pool_.parallel_for(C, 64, [&](int64_t c0, int64_t c1, int) {
        std::vector<float> win(static_cast<size_t>(S + T));
        for (int64_t c = c0; c < c1; ++c) {
            // win = [state (oldest first) | this call's inputs] for channel c.
            for (int i = 0; i < S; ++i) win[i] = conv_state[static_cast<int64_t>(i) * C + c];
            for (int t = 0; t < T; ++t) win[S + t] = x[static_cast<int64_t>(t) * C + c];
            const float* wc = w + c * K;
            for (int t = 0; t < T; ++t) {
                float sum = 0.f;  // ggml sums the taps in order, in float
                for (int i = 0; i < K; ++i) sum += win[t + i] * wc[i];
                x[static_cast<int64_t>(t) * C + c] = silu(sum);
            }
            for (int i = 0; i < S; ++i) conv_state[static_cast<int64_t>(i) * C + c] = win[T + i];
        }
    });
}

void CpuBackend::gdn_delta(const float* qkv, const float* alpha, const float* beta,
                           const float* dt_bias, const float* a_neg, int T, const GdnShape& g,
                           float eps, float* state, float* out) {
    const int Hk = g.k_heads, Hv = g.v_heads, D = g.head_dim, C = g.channels();
    // L2-normalised q and k per token and key head, shared by the value heads that use them.
    const size_t n_qk = static_cast<size_t>(T) * Hk * D;
    if (gdn_qk_.size() < 2 * n_qk) gdn_qk_.resize(2 * n_qk);
    float* const qn = gdn_qk_.data();
    float* const kn = qn + n_qk;
    for (int t = 0; t < T; ++t)
        for (int h = 0; h < Hk; ++h) {
            const float* row = qkv + static_cast<int64_t>(t) * C;
            l2_normalize(row + h * D, D, eps, &qn[(static_cast<size_t>(t) * Hk + h) * D]);
            l2_normalize(row + (Hk + h) * D, D, eps, &kn[(static_cast<size_t>(t) * Hk + h) * D]);
        }
    const float out_scale = 1.0f / std::sqrt(static_cast<float>(D));
    const int64_t out_row = static_cast<int64_t>(Hv) * D;

    // One value head per task; its D x D state stays in cache for all T tokens. Column c of the
    // state (one value channel) is a contiguous run over the key index, so decay, S^T k, the
    // rank-1 update and S^T q are one pass over that run.
    pool_.parallel_for(Hv, 1, [&](int64_t j0, int64_t j1, int) {
        const int64_t Dh = D;  // a local: the captured D was re-read after every store to the state
        for (int64_t j = j0; j < j1; ++j) {
            float* S = state + j * Dh * Dh;
            const int kh = static_cast<int>(j % Hk);
            for (int t = 0; t < T; ++t) {
                const float* q = &qn[(static_cast<size_t>(t) * Hk + kh) * Dh];
                const float* k = &kn[(static_cast<size_t>(t) * Hk + kh) * Dh];
                const float* v = qkv + static_cast<int64_t>(t) * C + 2 * Hk * Dh + j * Dh;
                const float gt = softplus(alpha[static_cast<int64_t>(t) * Hv + j] + dt_bias[j]) * a_neg[j];
                const float decay = std::exp(gt);
                const float b = sigmoid(beta[static_cast<int64_t>(t) * Hv + j]);
                float* o = out + t * out_row + j * Dh;
                const __m256 vdecay = _mm256_set1_ps(decay);
                // kCols columns side by side: each column's sums keep their order (the same bits
                // as one column at a time), but their FMA chains interleave instead of waiting
                // on each other's latency (one chain was the delta rule's whole cost).
                constexpr int kCols = 4;
                for (int c0 = 0; c0 < Dh; c0 += kCols) {
                    float* s = S + static_cast<int64_t>(c0) * Dh;
                    __m256 acc[kCols];
                    for (int cc = 0; cc < kCols; ++cc) acc[cc] = _mm256_setzero_ps();
                    for (int i = 0; i < Dh; i += 8) {
                        const __m256 kv = _mm256_loadu_ps(k + i);
                        for (int cc = 0; cc < kCols; ++cc) {
                            const __m256 sv = _mm256_mul_ps(_mm256_loadu_ps(s + cc * Dh + i), vdecay);
                            _mm256_storeu_ps(s + cc * Dh + i, sv);
                            acc[cc] = _mm256_fmadd_ps(sv, kv, acc[cc]);
                        }
                    }
                    __m256 vd[kCols], accq[kCols];
                    for (int cc = 0; cc < kCols; ++cc) {
                        vd[cc] = _mm256_set1_ps(b * (v[c0 + cc] - hsum(acc[cc])));
                        accq[cc] = _mm256_setzero_ps();
                    }
                    for (int i = 0; i < Dh; i += 8) {
                        const __m256 kv = _mm256_loadu_ps(k + i), qv = _mm256_loadu_ps(q + i);
                        for (int cc = 0; cc < kCols; ++cc) {
                            const __m256 sv = _mm256_fmadd_ps(kv, vd[cc], _mm256_loadu_ps(s + cc * Dh + i));
                            _mm256_storeu_ps(s + cc * Dh + i, sv);
                            accq[cc] = _mm256_fmadd_ps(sv, qv, accq[cc]);
                        }
                    }
                    for (int cc = 0; cc < kCols; ++cc) o[c0 + cc] = hsum(accq[cc]) * out_scale;
                }
            }
        }
    });
}

void CpuBackend::gated_rmsnorm(const float* x, const float* z, const float* w, int T, int heads,
                               int n, float eps, float* out) {
    pool_.parallel_for(static_cast<int64_t>(T) * heads, 8, [&](int64_t r0, int64_t r1, int) {  // expf per value
        for (int64_t r = r0; r < r1; ++r) {
            const float* xr = x + r * n;
            const float* zr = z + r * n;
            float* o = out + r * n;
            double sum = 0;
            for (int i = 0; i < n; ++i) sum += static_cast<double>(xr[i] * xr[i]);
            const float scale = 1.0f / std::sqrt(static_cast<float>(sum / n) + eps);
            for (int i = 0; i < n; ++i) o[i] = ((xr[i] * scale) * w[i]) * silu(zr[i]);
        }
    });
}

}  // namespace df::cpu
