// Our dequantization against ggml's, and our f32 dot products against the exact ones, for every
// weight type in the golden set (quant/index.json, made by llama.cpp; see golden/README.md).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "common/golden.h"
#include "quant/dequant.h"
#include "quant/types.h"

namespace df::quant {
namespace {

using nlohmann::json;

const json& golden_index() {
    static const json j = [] {
        auto bytes = test::read_file(test::golden_dir() / "quant" / "index.json");
        return json::parse(bytes.begin(), bytes.end());
    }();
    return j;
}

std::vector<std::string> golden_type_names() {
    std::vector<std::string> names;
    for (const auto& t : golden_index()["types"]) names.push_back(t["name"].get<std::string>());
    return names;
}

const json& golden_entry(const std::string& name) {
    for (const auto& t : golden_index()["types"])
        if (t["name"] == name) return t;
    throw std::runtime_error("no golden entry " + name);
}

// Unit roundoff of f32, and gamma_n = n u / (1 - n u): the classic bound on the error of a
// recursively summed n-term dot product, |fl(w.x) - w.x| <= gamma_n * sum |w_i x_i|.
constexpr double kU32 = 0x1p-24;
double gamma_n(int64_t n, double u) { return static_cast<double>(n) * u / (1.0 - static_cast<double>(n) * u); }

TEST(QuantGolden, EveryTableTypeHasGoldenDataAndViceVersa) {
    std::set<std::string> golden;
    for (const auto& t : golden_index()["types"]) {
        const std::string name = t["name"];
        golden.insert(name);
        const auto type = type_from_name(name);
        ASSERT_TRUE(type) << "golden type " << name << " is not in the type table";
        EXPECT_EQ(static_cast<uint32_t>(*type), t["type_id"].get<uint32_t>()) << name;
        EXPECT_EQ(type_info(*type).block_elems, t["block_size"].get<uint32_t>()) << name;
        EXPECT_EQ(type_info(*type).block_bytes, t["type_size"].get<uint32_t>()) << name;
    }
    for (const auto& t : kTypeTable)
        if (t.type != Type::F32) {
            EXPECT_TRUE(golden.count(std::string(t.name))) << "no golden data for " << t.name;
        }
}

class QuantGoldenType : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantGoldenType, DequantizationIsBitExact) {
    const json& e = golden_entry(GetParam());
    const Type type = *type_from_name(GetParam());
    const int rows = e["rows"], cols = e["cols"];
    const size_t bpr = e["bytes_per_row"];
    ASSERT_EQ(bpr, row_bytes(type, cols));
    const auto dir = test::golden_dir() / "quant";
    const auto bin = test::read_file(dir / e["files"]["bin"].get<std::string>());
    const auto ref = test::read_f32(dir / e["files"]["f32"].get<std::string>());
    ASSERT_EQ(bin.size(), bpr * rows);
    ASSERT_EQ(ref.size(), static_cast<size_t>(rows) * cols);

    std::vector<float> ours(ref.size());
    for (int r = 0; r < rows; ++r) dequantize_row(type, bin.data() + bpr * r, ours.data() + cols * r, cols);
    int mismatches = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        uint32_t a, b;
        std::memcpy(&a, &ours[i], 4);
        std::memcpy(&b, &ref[i], 4);
        if (a != b && ++mismatches <= 5)
            ADD_FAILURE() << GetParam() << " row " << i / cols << " col " << i % cols << ": ours " << ours[i]
                          << " ggml " << ref[i];
    }
    EXPECT_EQ(mismatches, 0) << GetParam();
}

TEST_P(QuantGoldenType, F32DotMatchesExactDot) {
    const json& e = golden_entry(GetParam());
    const Type type = *type_from_name(GetParam());
    const int rows = e["rows"], cols = e["cols"];
    const size_t bpr = e["bytes_per_row"];
    const auto dir = test::golden_dir() / "quant";
    const auto bin = test::read_file(dir / e["files"]["bin"].get<std::string>());
    const auto x = test::read_f32(dir / golden_index()["x_file"].get<std::string>());
    ASSERT_EQ(x.size(), static_cast<size_t>(cols));
    std::vector<float> w(cols);
    for (int r = 0; r < rows; ++r) {
        dequantize_row(type, bin.data() + bpr * r, w.data(), cols);
        float acc = 0;  // plain f32 accumulation, the worst order a kernel could use
        double exact = 0, mag = 0;
        for (int i = 0; i < cols; ++i) {
            acc += w[i] * x[i];
            exact += static_cast<double>(w[i]) * x[i];
            mag += std::fabs(static_cast<double>(w[i]) * x[i]);
        }
        const double want = e["dot_f64"][r];
        // index.json prints dot_f64 with 9 significant digits: up to 5e-9 relative off the exact value.
        const double printed = 5e-9 * std::fabs(want);
        // Our double sum of the same products agrees with ggml's to double rounding ...
        EXPECT_LE(std::fabs(exact - want), gamma_n(cols, 0x1p-53) * mag + printed) << GetParam() << " row " << r;
        // ... and the f32 sum stays inside the f32 dot-product error bound.
        EXPECT_LE(std::fabs(acc - want), gamma_n(cols, kU32) * mag + printed)
            << GetParam() << " row " << r << " f32 " << acc << " exact " << want;
    }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, QuantGoldenType, ::testing::ValuesIn(golden_type_names()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace df::quant
