#include "backend/cpu/gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <stdexcept>
#include <string_view>
#include <utility>

namespace df::cpu {
namespace {

static_assert(kPanelRows == 16, "the micro-kernel holds a panel column in two vectors");
constexpr int64_t kGemmBlock = 64;

// The micro-kernels' sums into the outputs (rows < kPanelRows of them per token).
template <int TT>
inline void write_sums(const float (&s)[TT][kPanelRows], int rows, float* out, int64_t os, bool accumulate) {
    for (int t = 0; t < TT; ++t) {
        float* o = out + t * os;
        for (int r = 0; r < rows; ++r) o[r] = accumulate ? o[r] + s[t][r] : s[t][r];
    }
}

// 16 rows x TT tokens: lo[t] and hi[t] hold rows 0 .. 7 and 8 .. 15 of token t.
template <int TT>
void micro(const float* panel, int rows, int64_t cols, const float* x, int64_t xs, float* out, int64_t os,
           bool accumulate) {
    // Every loop over t is unrolled so the accumulators stay in registers (GCC otherwise keeps
    // the array in memory and stores it on every column). Columns are summed in blocks of
    // kGemmBlock, the block sums added in order: error ~ (kGemmBlock + cols / kGemmBlock) u
    // rather than cols u for one running sum.
    alignas(32) float s[TT][kPanelRows] = {};
    for (int64_t c0 = 0; c0 < cols; c0 += kGemmBlock) {
        const int64_t c1 = std::min(cols, c0 + kGemmBlock);
        __m256 lo[TT], hi[TT];
#pragma GCC unroll 8
        for (int t = 0; t < TT; ++t) lo[t] = hi[t] = _mm256_setzero_ps();
        for (int64_t c = c0; c < c1; ++c) {
            const __m256 w0 = _mm256_load_ps(panel + c * kPanelRows), w1 = _mm256_load_ps(panel + c * kPanelRows + 8);
#pragma GCC unroll 8
            for (int t = 0; t < TT; ++t) {
                const __m256 xb = _mm256_broadcast_ss(x + t * xs + c);
                lo[t] = _mm256_fmadd_ps(w0, xb, lo[t]);
                hi[t] = _mm256_fmadd_ps(w1, xb, hi[t]);
            }
        }
#pragma GCC unroll 8
        for (int t = 0; t < TT; ++t) {
            _mm256_store_ps(s[t], _mm256_add_ps(_mm256_load_ps(s[t]), lo[t]));
            _mm256_store_ps(s[t] + 8, _mm256_add_ps(_mm256_load_ps(s[t] + 8), hi[t]));
        }
    }
    write_sums<TT>(s, rows, out, os, accumulate);
}

// The same sums with one 16-lane vector per token (AVX-512 F): a lane is a row and adds its
// products in the same order as micro's, so the results are micro's bits. Per column one panel
// load and TT FMAs with the activation broadcast from memory, where micro needs two loads, TT
// broadcasts and 2 TT FMAs; on CPUs with 512-bit FMA units (Zen 5, Intel server cores) twice
// the products per instruction.
template <int TT>
__attribute__((target("avx512f"))) void micro512(const float* panel, int rows, int64_t cols, const float* x,
                                                 int64_t xs, float* out, int64_t os, bool accumulate) {
    alignas(64) float s[TT][kPanelRows] = {};
    for (int64_t c0 = 0; c0 < cols; c0 += kGemmBlock) {
        const int64_t c1 = std::min(cols, c0 + kGemmBlock);
        __m512 acc[TT];
#pragma GCC unroll 16
        for (int t = 0; t < TT; ++t) acc[t] = _mm512_setzero_ps();
        for (int64_t c = c0; c < c1; ++c) {
            const __m512 w = _mm512_load_ps(panel + c * kPanelRows);
#pragma GCC unroll 16
            for (int t = 0; t < TT; ++t) acc[t] = _mm512_fmadd_ps(w, _mm512_set1_ps(x[t * xs + c]), acc[t]);
        }
#pragma GCC unroll 16
        for (int t = 0; t < TT; ++t) _mm512_store_ps(s[t], _mm512_add_ps(_mm512_load_ps(s[t]), acc[t]));
    }
    write_sums<TT>(s, rows, out, os, accumulate);
}

using MicroFn = void (*)(const float*, int, int64_t, const float*, int64_t, float*, int64_t, bool);
constexpr int kTokens512 = 16;  // accumulators: 16 of the 32 vector registers

template <int... I>
constexpr auto micro512_table(std::integer_sequence<int, I...>) {
    return std::array<MicroFn, sizeof...(I)>{&micro512<I + 1>...};
}

// Transposes the 8 x 8 block at src (row stride ss) into dst (row stride ds): dst[j][i] = src[i][j].
inline void transpose8(const float* src, int64_t ss, float* dst, int64_t ds) {
    __m256 r[8], t[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * ss);
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
        r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int i = 0; i < 4; ++i) {
        _mm256_storeu_ps(dst + i * ds, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
        _mm256_storeu_ps(dst + (i + 4) * ds, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
    }
}

}  // namespace

void pack_panel(const float* src, int rows, int64_t cols, float* panel) {
    if (rows == kPanelRows) {  // 8 x 8 transposes, then the column tail
        const int64_t c8 = cols & ~int64_t{7};
        for (int64_t c = 0; c < c8; c += 8)
            for (int h = 0; h < 2; ++h) transpose8(src + 8 * h * cols + c, cols, panel + c * kPanelRows + 8 * h, kPanelRows);
        for (int64_t c = c8; c < cols; ++c)
            for (int r = 0; r < kPanelRows; ++r) panel[c * kPanelRows + r] = src[r * cols + c];
        return;
    }
    for (int64_t c = 0; c < cols; ++c) {
        float* p = panel + c * kPanelRows;
        for (int r = 0; r < rows; ++r) p[r] = src[r * cols + c];
        for (int r = rows; r < kPanelRows; ++r) p[r] = 0.f;
    }
}

bool gemm_avx512_available() {
    static const bool yes = __builtin_cpu_supports("avx512f");
    return yes;
}

void gemm_panel(const float* panel, int rows, int64_t cols, const float* x, int64_t xs, int T, float* out,
                int64_t os, bool accumulate, GemmIsa isa) {
    if (isa == GemmIsa::avx512) {
        if (!gemm_avx512_available()) throw std::invalid_argument("gemm_panel: this CPU has no AVX-512");
        static constexpr auto table = micro512_table(std::make_integer_sequence<int, kTokens512>{});
        for (int t = 0; t < T; t += kTokens512)
            table[std::min(kTokens512, T - t) - 1](panel, rows, cols, x + t * xs, xs, out + t * os, os, accumulate);
        return;
    }
    int t = 0;
    for (; t + 6 <= T; t += 6) micro<6>(panel, rows, cols, x + t * xs, xs, out + t * os, os, accumulate);
    switch (T - t) {
        case 5: micro<5>(panel, rows, cols, x + t * xs, xs, out + t * os, os, accumulate); break;
        case 4: micro<4>(panel, rows, cols, x + t * xs, xs, out + t * os, os, accumulate); break;
        case 3: micro<3>(panel, rows, cols, x + t * xs, xs, out + t * os, os, accumulate); break;
        case 2: micro<2>(panel, rows, cols, x + t * xs, xs, out + t * os, os, accumulate); break;
        case 1: micro<1>(panel, rows, cols, x + t * xs, xs, out + t * os, os, accumulate); break;
        default: break;
    }
}

GemmIsa gemm_default_isa() {
    // DF_CPU_AVX512=0 keeps the AVX2 kernel (A/B runs); the results are the same bits either way.
    static const GemmIsa isa = [] {
        const char* e = std::getenv("DF_CPU_AVX512");
        return gemm_avx512_available() && !(e && std::string_view(e) == "0") ? GemmIsa::avx512 : GemmIsa::avx2;
    }();
    return isa;
}

}  // namespace df::cpu
