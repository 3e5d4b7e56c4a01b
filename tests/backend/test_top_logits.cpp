// Backend::top_logits on the CPU backend against a plain sort of the whole row: the order
// (larger first, then the lower index; -0 as +0; NaN last), ties, the extra entries, and the
// argument checks; Backend::row_mass and its fixed-point exp. (tests/cuda holds the GPU kernels to
// this backend's answers.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "backend/backend.h"
#include "backend/row_mass.h"

namespace df {
namespace {

// The plain order: a stable sort by value, NaNs moved after every number.
std::vector<int32_t> plain_order(const std::vector<float>& x) {
    std::vector<int32_t> ids(x.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
        if (std::isnan(x[a]) || std::isnan(x[b])) return !std::isnan(x[a]) && std::isnan(x[b]);
        return x[a] > x[b];
    });
    return ids;
}

TEST(TopLogits, TheKLargestInOrderThenTheExtras) {
    auto be = make_cpu_backend(1);
    std::mt19937 g(5);
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    for (int n : {1, 3, 1000, 65537, 151936}) {
        std::vector<float> x(static_cast<size_t>(n));
        std::uniform_int_distribution<int> level(-300, 300);
        for (auto& v : x) v = static_cast<float>(level(g)) / 16.0f;  // many ties
        for (int i = 0; i < n / 50; ++i) {
            const size_t at = static_cast<size_t>(g()) % x.size();
            x[at] = i % 5 == 0 ? -0.0f : i % 5 == 1 ? 0.0f : i % 5 == 2 ? -inf : i % 5 == 3 ? nan : inf;
        }
        const auto order = plain_order(x);
        for (int k : {1, 2, 40, 1000, 1024}) {
            if (k > n) continue;
            SCOPED_TRACE("n " + std::to_string(n) + " k " + std::to_string(k));
            const std::vector<int32_t> extra{n - 1, 0, n / 2, 0};
            std::vector<int32_t> ids(static_cast<size_t>(k) + extra.size(), -1);
            std::vector<float> vals(ids.size());
            be->top_logits(x.data(), n, k, extra.data(), static_cast<int>(extra.size()), ids.data(), vals.data());
            for (int j = 0; j < k; ++j) {
                ASSERT_EQ(ids[j], order[j]) << "rank " << j;
                ASSERT_EQ(std::memcmp(&vals[j], &x[order[j]], sizeof(float)), 0);
            }
            for (size_t i = 0; i < extra.size(); ++i) {
                EXPECT_EQ(ids[k + i], extra[i]);
                EXPECT_EQ(std::memcmp(&vals[k + i], &x[extra[i]], sizeof(float)), 0);
            }
        }
    }
}

TEST(TopLogits, RejectsBadArguments) {
    auto be = make_cpu_backend(1);
    std::vector<float> x(100, 1.0f);
    std::vector<int32_t> ids(2100);
    std::vector<float> vals(2100);
    const int32_t bad[] = {100}, neg[] = {-1};
    EXPECT_THROW(be->top_logits(x.data(), 100, 0, nullptr, 0, ids.data(), vals.data()), std::invalid_argument);
    EXPECT_THROW(be->top_logits(x.data(), 100, 101, nullptr, 0, ids.data(), vals.data()), std::invalid_argument);
    EXPECT_THROW(be->top_logits(x.data(), 100, 1, bad, 1, ids.data(), vals.data()), std::invalid_argument);
    EXPECT_THROW(be->top_logits(x.data(), 100, 1, neg, 1, ids.data(), vals.data()), std::invalid_argument);
    std::vector<float> big(5000, 0.0f);
    EXPECT_THROW(be->top_logits(big.data(), 5000, Backend::kTopLogitsMax + 1, nullptr, 0, ids.data(), vals.data()),
                 std::invalid_argument);
    // All equal: the lowest indices, in order.
    be->top_logits(x.data(), 100, 5, nullptr, 0, ids.data(), vals.data());
    EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.begin() + 5), (std::vector<int32_t>{0, 1, 2, 3, 4}));
}

}  // namespace
// The fixed-point exp: exp(x - lmax) * 2^40 to the polynomial's accuracy, 0 where it should be,
// never decreasing in x, and a row's sum the sum of its terms.
TEST(RowMass, TheFixedPointExpAndTheRowsSum) {
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    const double one = std::ldexp(1.0, kMassBits);
    EXPECT_EQ(mass_term(3.5f, 3.5f), static_cast<uint64_t>(one));
    EXPECT_EQ(mass_term(4.0f, 3.5f), static_cast<uint64_t>(one)) << "above the max: clamped to it";
    EXPECT_EQ(mass_term(nan, 0.f), 0u);
    EXPECT_EQ(mass_term(-inf, 0.f), 0u);
    EXPECT_EQ(mass_term(-88.f, 0.f), 0u);
    EXPECT_EQ(mass_term(0.f, nan), 0u);
    uint64_t last = 0;
    for (float d = -40.f; d <= 0.f; d += 1.f / 64) {
        const uint64_t m = mass_term(d, 0.f);
        ASSERT_GE(m, last) << d;
        last = m;
        const double want = std::exp(static_cast<double>(d)) * one;
        ASSERT_LE(std::fabs(static_cast<double>(m) - want), 4e-7 * want + 1) << d;
    }
    auto be = make_cpu_backend(1);
    std::mt19937 g(9);
    std::normal_distribution<float> nd(0.f, 4.f);
    for (int n : {1, 7, 151936}) {
        std::vector<float> x(static_cast<size_t>(n));
        for (auto& v : x) v = nd(g);
        if (n > 7) x[3] = -inf, x[5] = nan;
        const float lmax = *std::max_element(x.begin(), x.end(), [](float a, float b) { return a < b || std::isnan(a); });
        uint64_t want = 0;
        for (float v : x) want += mass_term(v, lmax);
        EXPECT_EQ(be->row_mass(x.data(), n, lmax), want) << n;
    }
    EXPECT_THROW(be->row_mass(nullptr, 0, 0.f), std::invalid_argument);
}

}  // namespace df
