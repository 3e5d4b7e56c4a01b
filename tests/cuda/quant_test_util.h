// Quantized test matrices built from the golden blocks, and their exact dequantization.
#pragma once

#include <filesystem>

#include "common/golden.h"
#include "cuda_test_util.h"
#include "quant/dequant.h"

namespace df::test {

using quant::Type;


inline std::filesystem::path quant_dir() { return golden_dir() / "quant"; }

// The 27 golden types (every table row but F32).
inline std::vector<Type> golden_types() {
    std::vector<Type> v;
    for (const auto& t : quant::kTypeTable)
        if (t.type != Type::F32) v.push_back(t.type);
    return v;
}

inline std::string type_str(Type t) { return std::string(quant::type_name(t)); }

struct GoldenQuant {
    std::vector<char> bin;
    std::vector<float> f32;
    static constexpr int rows = 16, cols = 512;
};

inline GoldenQuant load_golden(Type t) {
    GoldenQuant g;
    g.bin = read_file(quant_dir() / (type_str(t) + ".bin"));
    g.f32 = read_f32(quant_dir() / (type_str(t) + ".f32"));
    return g;
}

// A rows x cols matrix of `t` made of blocks drawn at random from the golden rows (real,
// valid blocks of every kind, in shapes the golden file does not have). F32: random normals.
inline std::vector<uint8_t> random_matrix(Type t, int rows, int cols, std::mt19937_64& g) {
    const auto& ti = quant::type_info(t);
    const size_t row_bytes = quant::row_bytes(t, cols);
    std::vector<uint8_t> m(row_bytes * rows);
    if (t == Type::F32) {
        const auto v = randn(g, static_cast<size_t>(rows) * cols, 0.1f);
        std::memcpy(m.data(), v.data(), m.size());
        return m;
    }
    const GoldenQuant gq = load_golden(t);
    const size_t blocks_in_golden = gq.bin.size() / ti.block_bytes;
    std::uniform_int_distribution<size_t> pick(0, blocks_in_golden - 1);
    for (size_t b = 0; b < m.size() / ti.block_bytes; ++b)
        std::memcpy(m.data() + b * ti.block_bytes, gq.bin.data() + pick(g) * ti.block_bytes, ti.block_bytes);
    return m;
}

inline std::vector<float> dequant_matrix(Type t, const std::vector<uint8_t>& m, int rows, int cols) {
    std::vector<float> w(static_cast<size_t>(rows) * cols);
    const size_t rb = quant::row_bytes(t, cols);
    for (int r = 0; r < rows; ++r) quant::dequantize_row(t, m.data() + r * rb, w.data() + static_cast<size_t>(r) * cols, cols);
    return w;
}

// sum_c |w[r,c] x[t,c]| for every output: the scale of a dot product's rounding error.
inline std::vector<float> abs_dots(const std::vector<float>& w, const std::vector<float>& x, int rows, int cols, int T) {
    std::vector<float> a(static_cast<size_t>(T) * rows);
    for (int t = 0; t < T; ++t)
        for (int r = 0; r < rows; ++r) {
            double s = 0;
            for (int c = 0; c < cols; ++c) s += std::fabs(static_cast<double>(w[static_cast<size_t>(r) * cols + c]) * x[static_cast<size_t>(t) * cols + c]);
            a[static_cast<size_t>(t) * rows + r] = static_cast<float>(s);
        }
    return a;
}

}  // namespace df::test
