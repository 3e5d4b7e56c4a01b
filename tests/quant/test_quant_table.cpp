// The type table, names, errors, block sizes, and the f16 / bf16 conversions.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <bit>
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>

#include "quant/blocks.h"
#include "quant/dequant.h"
#include "quant/grids.h"
#include "quant/types.h"

namespace df::quant {
namespace {

TEST(QuantTable, EveryTypeHasADequantizer) {
    for (const auto& t : kTypeTable) {
        EXPECT_NE(dequant_fn(t.type), nullptr) << t.name;
        EXPECT_EQ(type_info(static_cast<uint32_t>(t.type)), &t) << t.name;
    }
}

TEST(QuantTable, NamesAreCaseInsensitive) {
    for (const auto& t : kTypeTable) {
        std::string lower(t.name);
        for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        EXPECT_EQ(type_from_name(t.name), t.type);
        EXPECT_EQ(type_from_name(lower), t.type) << lower;
    }
    EXPECT_EQ(type_from_name("q4_k"), Type::Q4_K);
    EXPECT_EQ(type_from_name("Iq2_Xxs"), Type::IQ2_XXS);
    EXPECT_FALSE(type_from_name("Q8_K"));  // activation-only in ggml, never a weight type
    EXPECT_FALSE(type_from_name(""));
    EXPECT_FALSE(type_from_name("Q4_K_M"));
}

TEST(QuantTable, UnknownTypeThrowsNamingIt) {
    const auto bad = static_cast<Type>(15);  // Q8_K: not a weight type
    float out[256];
    uint8_t in[512] = {};
    try {
        dequantize_row(bad, in, out, 256);
        FAIL() << "expected std::invalid_argument";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("15"), std::string::npos) << e.what();
    }
    EXPECT_THROW(dequant_fn(static_cast<Type>(999)), std::invalid_argument);
    try {
        dequantize_row(Type::Q4_K, in, out, 100);
        FAIL() << "expected std::invalid_argument";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("Q4_K"), std::string::npos) << e.what();
    }
}

TEST(QuantTable, BlockStructSizesMatchTheTable) {
    // blocks.h static_asserts each struct against its row; these spot-check the row math callers use.
    EXPECT_EQ(sizeof(block_q4_0), row_bytes(Type::Q4_0, 32));
    EXPECT_EQ(sizeof(block_q8_0) * 128, row_bytes(Type::Q8_0, 4096));
    EXPECT_EQ(sizeof(block_q4_K) * 16, row_bytes(Type::Q4_K, 4096));
    EXPECT_EQ(sizeof(block_iq2_xxs) * 16, row_bytes(Type::IQ2_XXS, 4096));
    EXPECT_EQ(sizeof(block_mxfp4), 17u);
    EXPECT_EQ(sizeof(block_nvfp4) * 2, row_bytes(Type::NVFP4, 128));
    EXPECT_EQ(row_bytes(Type::F32, 7), 28u);
}

TEST(QuantGrids, TablesHaveTheirStructure) {
    for (int i = 0; i < 128; ++i) {  // sign masks have even parity: bit 7 completes it
        EXPECT_EQ(ksigns_iq2xs[i] & 127, i);
        EXPECT_EQ(std::popcount(static_cast<unsigned>(ksigns_iq2xs[i])) % 2, 0) << i;
    }
    for (int j = 0; j < 8; ++j) EXPECT_EQ(kmask_iq2xs[j], 1 << j);
    const auto bytes_in = [](uint64_t v, int nb, std::initializer_list<int> allowed) {
        for (int j = 0; j < nb; ++j) {
            bool ok = false;
            for (int a : allowed) ok |= grid_byte(v, j) == a;
            if (!ok) return false;
        }
        return true;
    };
    for (uint64_t v : iq2xxs_grid) EXPECT_TRUE(bytes_in(v, 8, {8, 25, 43}));
    for (uint64_t v : iq2xs_grid) EXPECT_TRUE(bytes_in(v, 8, {8, 25, 43}));
    for (uint64_t v : iq2s_grid) EXPECT_TRUE(bytes_in(v, 8, {8, 25, 43}));
    for (uint32_t v : iq3xxs_grid) EXPECT_TRUE(bytes_in(v, 4, {4, 12, 20, 28, 36, 44, 52, 62}));
    for (uint32_t v : iq3s_grid) EXPECT_TRUE(bytes_in(v, 4, {1, 3, 5, 7, 9, 11, 13, 15}));
    for (uint64_t v : iq1s_grid) EXPECT_TRUE(bytes_in(v, 8, {0xFF, 0, 1}));
    // Every lattice is listed in ascending order (most significant element first), one entry per
    // point: a transposed or mistyped digit almost always breaks that.
    for (size_t i = 1; i < std::size(iq2s_grid); ++i) EXPECT_LT(iq2s_grid[i - 1], iq2s_grid[i]) << i;
    for (size_t i = 1; i < std::size(iq3s_grid); ++i) EXPECT_LT(iq3s_grid[i - 1], iq3s_grid[i]) << i;
}

// ---- f16 / bf16 ---------------------------------------------------------------------------

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }

TEST(QuantHalf, F16ToF32MatchesTheHardwareForAllCodes) {
    for (uint32_t h = 0; h < 65536; ++h) {
        const float hw = _cvtsh_ss(static_cast<uint16_t>(h));
        ASSERT_EQ(bits(f16_to_f32(static_cast<uint16_t>(h))), bits(hw)) << std::hex << h;
    }
    EXPECT_EQ(f16_to_f32(0x0001), 0x1p-24f);  // smallest subnormal
    EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);
    EXPECT_TRUE(std::isinf(f16_to_f32(0xFC00)) && f16_to_f32(0xFC00) < 0);
}

TEST(QuantHalf, F32ToF16RoundsToNearestEvenLikeTheHardware) {
    // Every f16 code round-trips; every midpoint between neighbours ties to even; plus random floats.
    for (uint32_t h = 0; h < 65536; ++h) {
        const float f = f16_to_f32(static_cast<uint16_t>(h));
        if (std::isnan(f)) continue;
        ASSERT_EQ(f32_to_f16(f), h) << std::hex << h;
    }
    std::mt19937 rng(7);
    std::uniform_int_distribution<uint32_t> any;
    for (int i = 0; i < 2000000; ++i) {
        uint32_t u = any(rng);
        if (i % 2) u = (u & 0x807FFFFFu) | ((100u + u % 50u) << 23);  // concentrate near the f16 range
        const float f = std::bit_cast<float>(u);
        ASSERT_EQ(f32_to_f16(f), _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT)) << std::hex << u;
    }
    EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);  // halfway to 65536 ties up to infinity
    EXPECT_EQ(f32_to_f16(0x1p-25f), 0x0000);  // halfway to the smallest subnormal ties to zero
    EXPECT_EQ(f32_to_f16(0x1.8p-24f), 0x0002);
    EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
}

TEST(QuantHalf, Bf16) {
    for (uint32_t h = 0; h < 65536; ++h) {
        const float f = bf16_to_f32(static_cast<uint16_t>(h));
        ASSERT_EQ(bits(f), h << 16);
        if (!std::isnan(f)) {
            ASSERT_EQ(f32_to_bf16(f), h);
        }
    }
    EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3F808000u)), 0x3F80);  // tie -> even
    EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3F818000u)), 0x3F82);  // tie -> even (up)
    EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3F808001u)), 0x3F81);
    EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x7F800001u)) & 0x7FC0, 0x7FC0);  // NaN stays NaN
}

}  // namespace
}  // namespace df::quant
