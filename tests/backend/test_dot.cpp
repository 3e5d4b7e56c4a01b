// row_dot and decode_row against the scalar reference (quant::dequantize_row + a double dot) for
// every type in the table, on random blocks, awkward lengths, T = 1, 3, 8, 9, 70, unaligned rows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cpu/dot.h"
#include "common/golden.h"
#include "common/random_blocks.h"
#include "quant/dequant.h"
#include "quant/types.h"

namespace df::cpu {
namespace {

using quant::Type;
using test::random_row;

// gamma_k = k u / (1 - k u): the bound row_dot's contract states with k = n/32 + 41.
double dot_bound(int64_t n, double sum_abs) {
    const double k = static_cast<double>(n) / 32 + 41, u = 0x1p-24;
    return k * u / (1 - k * u) * sum_abs;
}

std::vector<int64_t> lengths(Type t) {
    const int64_t be = quant::type_info(t).block_elems;
    if (be == 1) return {1, 7, 32, 33, 95, 1100};  // float rows: tails and a chunk boundary
    // One block, a few, and a length crossing row_dot's 1024-element chunk.
    return {be, 3 * be, 5 * be, (1024 / be + 3) * be};
}

class DotType : public ::testing::TestWithParam<Type> {};

TEST_P(DotType, DecodeRowEqualsReferenceBitwise) {
    const Type t = GetParam();
    std::mt19937 rng(1234 + static_cast<int>(t));
    for (int64_t n : lengths(t)) {
        const auto row = random_row(t, n, rng);
        std::vector<float> ref(n), got(n, std::numeric_limits<float>::quiet_NaN());
        quant::dequantize_row(t, row.data(), ref.data(), n);
        decode_row(t, row.data(), n, got.data());
        ASSERT_EQ(std::memcmp(ref.data(), got.data(), n * sizeof(float)), 0) << quant::type_name(t) << " n=" << n;
    }
}

TEST_P(DotType, MatchesReferenceWithinBoundAndIsBatchInvariant) {
    const Type t = GetParam();
    std::mt19937 rng(99 + static_cast<int>(t));
    for (int64_t n : lengths(t)) {
        // Unaligned row and activations: offset by one byte / one float inside bigger buffers.
        const auto packed = random_row(t, n, rng);
        std::vector<uint8_t> row_buf(packed.size() + 1);
        std::memcpy(row_buf.data() + 1, packed.data(), packed.size());
        const uint8_t* row = row_buf.data() + 1;
        std::vector<float> w(n);
        quant::dequantize_row(t, packed.data(), w.data(), n);

        for (int T : {1, 3, 8, 9, 70}) {
            const int64_t xs = n + 5, os = 3;
            std::vector<float> xbuf(1 + xs * T);
            std::normal_distribution<float> normal;
            for (auto& v : xbuf) v = normal(rng);
            const float* x = xbuf.data() + 1;
            std::vector<float> out(os * T, std::numeric_limits<float>::quiet_NaN());
            row_dot(t, row, n, x, xs, T, out.data(), os);
            for (int k = 0; k < T; ++k) {
                double exact = 0, mag = 0;
                for (int64_t i = 0; i < n; ++i) {
                    const double p = static_cast<double>(w[i]) * x[k * xs + i];
                    exact += p;
                    mag += std::fabs(p);
                }
                const float got = out[k * os];
                ASSERT_TRUE(std::isfinite(got)) << quant::type_name(t) << " n=" << n << " T=" << T << " t=" << k;
                EXPECT_LE(std::fabs(got - exact), dot_bound(n, mag))
                    << quant::type_name(t) << " n=" << n << " T=" << T << " t=" << k << " got " << got << " want " << exact;
                // The same token alone gives the same bits.
                float alone = std::numeric_limits<float>::quiet_NaN();
                row_dot(t, row, n, x + k * xs, xs, 1, &alone, 1);
                ASSERT_EQ(std::memcmp(&alone, &got, 4), 0)
                    << quant::type_name(t) << " n=" << n << " T=" << T << " t=" << k << ": " << alone << " vs " << got;
            }
            for (int64_t i = 0; i < os * T; ++i) {  // nothing written between outputs
                if (i % os != 0) {
                    ASSERT_TRUE(std::isnan(out[i])) << "row_dot wrote out[" << i << "]";
                }
            }
        }
    }
}

std::vector<Type> all_types() {
    std::vector<Type> v;
    for (const auto& ti : quant::kTypeTable) v.push_back(ti.type);
    return v;
}

INSTANTIATE_TEST_SUITE_P(AllTypes, DotType, ::testing::ValuesIn(all_types()),
                         [](const ::testing::TestParamInfo<Type>& p) { return std::string(quant::type_name(p.param)); });

TEST(Dot, GoldenRowsMatchLlamaCppExactDots) {
    const auto dir = test::golden_dir() / "quant";
    const auto bytes = test::read_file(dir / "index.json");
    const auto index = nlohmann::json::parse(bytes.begin(), bytes.end());
    const auto x = test::read_f32(dir / index["x_file"].get<std::string>());
    for (const auto& e : index["types"]) {
        const Type t = *quant::type_from_name(e["name"].get<std::string>());
        const int rows = e["rows"], cols = e["cols"];
        const size_t bpr = e["bytes_per_row"];
        const auto bin = test::read_file(dir / e["files"]["bin"].get<std::string>());
        std::vector<float> w(cols);
        for (int r = 0; r < rows; ++r) {
            quant::dequantize_row(t, bin.data() + bpr * r, w.data(), cols);
            double mag = 0;
            for (int i = 0; i < cols; ++i) mag += std::fabs(static_cast<double>(w[i]) * x[i]);
            float got;
            row_dot(t, bin.data() + bpr * r, cols, x.data(), cols, 1, &got, 1);
            const double want = e["dot_f64"][r];  // printed with 9 digits
            EXPECT_LE(std::fabs(got - want), dot_bound(cols, mag) + 5e-9 * std::fabs(want))
                << e["name"] << " row " << r;
        }
    }
}

TEST(Dot, RejectsBadArguments) {
    float x[256] = {}, out[1];
    uint8_t row[512] = {};
    EXPECT_THROW(row_dot(static_cast<Type>(15), row, 256, x, 256, 1, out, 1), std::invalid_argument);
    EXPECT_THROW(row_dot(Type::Q4_K, row, 100, x, 100, 1, out, 1), std::invalid_argument);
    EXPECT_THROW(decode_row(static_cast<Type>(77), row, 32, x), std::invalid_argument);
    row_dot(Type::Q8_0, row, 32, x, 32, 0, out, 1);  // T = 0: nothing to do
}

}  // namespace
}  // namespace df::cpu

namespace df::quant {
// Readable test names in failure messages.
inline void PrintTo(Type t, std::ostream* os) { *os << type_name(t); }
}  // namespace df::quant
