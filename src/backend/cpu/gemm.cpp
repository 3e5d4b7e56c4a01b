#include "backend/cpu/gemm.h"

#include <immintrin.h>

namespace df::cpu {
namespace {

inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// R rows x TT tokens of accumulators (R * TT <= 12 keeps them and the operands in 16 ymm).
template <int R, int TT>
void micro(const float* panel, int64_t cols, const float* x, int64_t xs, float* out, int64_t os, bool accumulate) {
    __m256 acc[R][TT];
    for (int r = 0; r < R; ++r)
        for (int t = 0; t < TT; ++t) acc[r][t] = _mm256_setzero_ps();
    const int64_t vec_end = cols & ~int64_t{7};
    for (int64_t c = 0; c < vec_end; c += 8) {
        __m256 xv[TT];
        for (int t = 0; t < TT; ++t) xv[t] = _mm256_loadu_ps(x + t * xs + c);
        for (int r = 0; r < R; ++r) {
            const __m256 w = _mm256_loadu_ps(panel + r * cols + c);
            for (int t = 0; t < TT; ++t) acc[r][t] = _mm256_fmadd_ps(w, xv[t], acc[r][t]);
        }
    }
    for (int r = 0; r < R; ++r)
        for (int t = 0; t < TT; ++t) {
            float s = hsum(acc[r][t]);
            for (int64_t c = vec_end; c < cols; ++c) s += panel[r * cols + c] * x[t * xs + c];
            float& o = out[t * os + r];
            o = accumulate ? o + s : s;
        }
}

template <int R>
void sweep(const float* panel, int64_t cols, const float* x, int64_t xs, int T, float* out, int64_t os, bool acc) {
    int t = 0;
    for (; t + 3 <= T; t += 3) micro<R, 3>(panel, cols, x + t * xs, xs, out + t * os, os, acc);
    if (T - t == 2) micro<R, 2>(panel, cols, x + t * xs, xs, out + t * os, os, acc);
    if (T - t == 1) micro<R, 1>(panel, cols, x + t * xs, xs, out + t * os, os, acc);
}

}  // namespace

void gemm_panel(const float* panel, int rows, int64_t cols, const float* x, int64_t xs, int T, float* out,
                int64_t os, bool accumulate) {
    switch (rows) {
        case 4: sweep<4>(panel, cols, x, xs, T, out, os, accumulate); break;
        case 3: sweep<3>(panel, cols, x, xs, T, out, os, accumulate); break;
        case 2: sweep<2>(panel, cols, x, xs, T, out, os, accumulate); break;
        case 1: sweep<1>(panel, cols, x, xs, T, out, os, accumulate); break;
        default: break;
    }
}

}  // namespace df::cpu
