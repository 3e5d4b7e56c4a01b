// The CPU prefill GEMM's panel (pack_panel, gemm_panel) against a double-precision product:
// partial panels, token counts around the micro-kernel's 6, strided activations and outputs,
// accumulate on and off, nothing written outside the outputs; the AVX-512 micro-kernel against
// the AVX2 one, bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/cpu/gemm.h"

namespace df::cpu {
namespace {

// Each output sums blocks of 64 products (FMA) and then the block sums in order:
// |error| <= gamma_k * sum |w x| with k = 64 + ceil(cols / 64).
double gemm_bound(int64_t cols, double sum_abs) {
    const double k = static_cast<double>(std::min<int64_t>(cols, 64) + (cols + 63) / 64), u = 0x1p-24;
    return k * u / (1 - k * u) * sum_abs;
}

std::vector<float> randn(size_t n, std::mt19937& rng) {
    std::normal_distribution<float> normal;
    std::vector<float> v(n);
    for (auto& x : v) x = normal(rng);
    return v;
}

// A random rows x cols matrix w and its panel, packed 64-byte aligned as gemm_panel requires.
struct Panel {
    std::vector<float> w, buf;
    float* packed;
    Panel(int rows, int64_t cols, std::mt19937& rng)
        : w(randn(static_cast<size_t>(rows * cols), rng)), buf(static_cast<size_t>(kPanelRows * cols) + 16, 0.f),
          packed(align_panel(buf.data())) {
        pack_panel(w.data(), rows, cols, packed);
    }
    Panel(const Panel&) = delete;  // packed points into buf
    Panel& operator=(const Panel&) = delete;
};

TEST(CpuGemmPanel, MatchesDoubleProductWithinBound) {
    std::mt19937 rng(4242);
    std::normal_distribution<float> normal;
    for (int rows : {16, 13, 1}) {
        for (int64_t cols : {1, 7, 64, 1100}) {
            const Panel pw(rows, cols, rng);
            const std::vector<float>& w = pw.w;
            for (int T : {1, 5, 6, 7, 13}) {
                for (bool acc : {false, true}) {
                    SCOPED_TRACE("rows " + std::to_string(rows) + " cols " + std::to_string(cols) + " T " + std::to_string(T) +
                                 (acc ? " accumulate" : ""));
                    const int64_t xs = cols + 3, os = rows + 5;
                    const std::vector<float> x = randn(static_cast<size_t>(xs * T), rng);
                    std::vector<float> out(static_cast<size_t>(os * T), std::numeric_limits<float>::quiet_NaN()), y0(out);
                    for (int t = 0; t < T; ++t)
                        for (int r = 0; r < rows; ++r) out[t * os + r] = y0[t * os + r] = acc ? normal(rng) : 0.f;
                    gemm_panel(pw.packed, rows, cols, x.data(), xs, T, out.data(), os, acc);  // the default: AVX-512 where present
                    for (int t = 0; t < T; ++t) {
                        for (int r = 0; r < rows; ++r) {
                            double exact = acc ? y0[t * os + r] : 0.0, mag = std::fabs(exact);
                            for (int64_t c = 0; c < cols; ++c) {
                                const double p = static_cast<double>(w[r * cols + c]) * x[t * xs + c];
                                exact += p;
                                mag += std::fabs(p);
                            }
                            const float got = out[t * os + r];
                            ASSERT_TRUE(std::isfinite(got)) << "t " << t << " r " << r;
                            EXPECT_LE(std::fabs(got - exact), gemm_bound(cols, mag) + 0x1p-24 * std::fabs(exact))
                                << "t " << t << " r " << r << " got " << got << " want " << exact;
                        }
                        for (int64_t r = rows; r < os; ++r) ASSERT_TRUE(std::isnan(out[t * os + r])) << "wrote past the rows";
                    }
                }
            }
        }
    }
}

// The AVX-512 micro-kernel adds each row's products in the AVX2 kernel's order: the same bits,
// for every token count around its 16 accumulators.
TEST(CpuGemmPanel, Avx512GivesTheAvx2Bits) {
    if (!gemm_avx512_available()) GTEST_SKIP() << "this CPU has no AVX-512: only the AVX2 micro-kernel runs";
    std::mt19937 rng(777);
    std::normal_distribution<float> normal;
    for (int rows : {16, 11}) {
        for (int64_t cols : {3, 64, 65, 1000}) {
            const Panel pw(rows, cols, rng);
            for (int T : {1, 2, 6, 15, 16, 17, 33, 130}) {
                for (bool acc : {false, true}) {
                    SCOPED_TRACE("rows " + std::to_string(rows) + " cols " + std::to_string(cols) + " T " + std::to_string(T));
                    const int64_t xs = cols + 1, os = rows + 2;
                    const std::vector<float> x = randn(static_cast<size_t>(xs * T), rng);
                    std::vector<float> a(static_cast<size_t>(os * T));
                    for (auto& v : a) v = acc ? normal(rng) : std::numeric_limits<float>::quiet_NaN();
                    std::vector<float> b(a);
                    gemm_panel(pw.packed, rows, cols, x.data(), xs, T, a.data(), os, acc, GemmIsa::avx2);
                    gemm_panel(pw.packed, rows, cols, x.data(), xs, T, b.data(), os, acc, GemmIsa::avx512);
                    ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));  // NaN pads included
                }
            }
        }
    }
}

TEST(CpuGemmPanel, PackZeroFillsMissingRows) {
    const int64_t cols = 3;
    const std::vector<float> w = {1, 2, 3, 4, 5, 6};  // two rows
    std::vector<float> panel(kPanelRows * cols, -1.f);
    pack_panel(w.data(), 2, cols, panel.data());
    for (int64_t c = 0; c < cols; ++c)
        for (int r = 0; r < kPanelRows; ++r) EXPECT_EQ(panel[c * kPanelRows + r], r < 2 ? w[r * cols + c] : 0.f);
}

}  // namespace
}  // namespace df::cpu
