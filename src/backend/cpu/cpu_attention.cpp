// KV cache store and causal GQA attention on the CPU.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
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

// Row of the cache as f32 (8 lanes at a time); n is a multiple of 8 (head dims are).
inline __m256 load8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }

template <class K>
float dot(const float* q, const K* k, int n) {
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8(k + i), acc);
    return hsum(acc);
}

template <class K>
void axpy(float* y, float a, const K* x, int n) {
    const __m256 va = _mm256_set1_ps(a);
    for (int i = 0; i < n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, load8(x + i), _mm256_loadu_ps(y + i)));
}

// One query head over cache rows [0, n_kv): blockwise online softmax, so memory stays bounded
// for long contexts and each block's scores are computed in one vectorised pass.
template <class K>
void attend(const float* q, const K* kc, const K* vc, int64_t kv_row, int n_kv, int d, float scale,
            float* out, std::vector<float>& scores, std::vector<float>& acc) {
    constexpr int kBlock = 256;
    scores.resize(kBlock);
    acc.assign(d, 0.f);
    float m = -std::numeric_limits<float>::infinity();
    double l = 0;
    for (int j0 = 0; j0 < n_kv; j0 += kBlock) {
        const int jn = std::min(kBlock, n_kv - j0);
        float bm = -std::numeric_limits<float>::infinity();
        for (int j = 0; j < jn; ++j) {
            scores[j] = dot(q, kc + (j0 + j) * kv_row, d) * scale;
            bm = std::max(bm, scores[j]);
        }
        if (bm > m) {
            const float c = std::exp(m - bm);  // 0 on the first block
            for (int i = 0; i < d; ++i) acc[i] *= c;
            l *= c;
            m = bm;
        }
        for (int j = 0; j < jn; ++j) {
            const float p = std::exp(scores[j] - m);
            l += p;
            axpy(acc.data(), p, vc + (j0 + j) * kv_row, d);
        }
    }
    const float inv = static_cast<float>(1.0 / l);
    for (int i = 0; i < d; ++i) out[i] = acc[i] * inv;
}

}  // namespace

void CpuBackend::kv_store(const float* k, const float* v, void* k_cache, void* v_cache, KvType kt,
                          int kv_dim, const Step& s) {
    for (int t = 0; t < s.T; ++t) {
        const int64_t row = s.pos[t];
        const float* ks = k + static_cast<int64_t>(t) * kv_dim;
        const float* vs = v + static_cast<int64_t>(t) * kv_dim;
        if (kt == KvType::f32) {
            std::copy(ks, ks + kv_dim, static_cast<float*>(k_cache) + row * kv_dim);
            std::copy(vs, vs + kv_dim, static_cast<float*>(v_cache) + row * kv_dim);
        } else {
            auto* kd = static_cast<uint16_t*>(k_cache) + row * kv_dim;
            auto* vd = static_cast<uint16_t*>(v_cache) + row * kv_dim;
            for (int i = 0; i < kv_dim; ++i) {
                kd[i] = _cvtss_sh(ks[i], _MM_FROUND_TO_NEAREST_INT);
                vd[i] = _cvtss_sh(vs[i], _MM_FROUND_TO_NEAREST_INT);
            }
        }
    }
}

void CpuBackend::attention(const float* q, const void* k_cache, const void* v_cache, KvType kt,
                           const AttnShape& a, const Step& s, float* out) {
    const int group = a.heads / a.kv_heads;
    const int64_t kv_row = static_cast<int64_t>(a.kv_heads) * a.head_dim;
    const int64_t out_row = static_cast<int64_t>(a.heads) * a.head_dim;
    pool_.parallel_for(static_cast<int64_t>(s.T) * a.heads, 1, [&](int64_t i0, int64_t i1, int) {
        std::vector<float> scores, acc;
        for (int64_t i = i0; i < i1; ++i) {
            const int t = static_cast<int>(i / a.heads), h = static_cast<int>(i % a.heads);
            const int kvh = h / group;
            const float* qh = q + static_cast<int64_t>(t) * a.q_row + static_cast<int64_t>(h) * a.q_stride;
            float* o = out + t * out_row + static_cast<int64_t>(h) * a.head_dim;
            const int n_kv = s.pos[t] + 1;
            if (kt == KvType::f32) {
                attend(qh, static_cast<const float*>(k_cache) + kvh * a.head_dim,
                       static_cast<const float*>(v_cache) + kvh * a.head_dim, kv_row, n_kv, a.head_dim,
                       a.scale, o, scores, acc);
            } else {
                attend(qh, static_cast<const uint16_t*>(k_cache) + kvh * a.head_dim,
                       static_cast<const uint16_t*>(v_cache) + kvh * a.head_dim, kv_row, n_kv,
                       a.head_dim, a.scale, o, scores, acc);
            }
        }
    });
}

}  // namespace df::cpu
