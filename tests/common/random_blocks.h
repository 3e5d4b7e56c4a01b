// Random but valid weight rows of any quant type, for kernel tests and benchmarks: random bytes
// with every f16 / exponent scale field overwritten by a finite value, so products stay finite.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <vector>

#include "quant/blocks.h"
#include "quant/dequant.h"
#include "quant/types.h"

namespace df::test {

// Byte offsets of the f16 scale fields in one block (random bytes there could be inf or NaN).
inline std::vector<size_t> f16_fields(quant::Type t) {
    using namespace quant;
    using quant::Type;
    switch (t) {
        case Type::Q4_0: return {offsetof(block_q4_0, d)};
        case Type::Q4_1: return {offsetof(block_q4_1, d), offsetof(block_q4_1, m)};
        case Type::Q5_0: return {offsetof(block_q5_0, d)};
        case Type::Q5_1: return {offsetof(block_q5_1, d), offsetof(block_q5_1, m)};
        case Type::Q8_0: return {offsetof(block_q8_0, d)};
        case Type::Q2_K: return {offsetof(block_q2_K, d), offsetof(block_q2_K, dmin)};
        case Type::Q3_K: return {offsetof(block_q3_K, d)};
        case Type::Q4_K: return {offsetof(block_q4_K, d), offsetof(block_q4_K, dmin)};
        case Type::Q5_K: return {offsetof(block_q5_K, d), offsetof(block_q5_K, dmin)};
        case Type::Q6_K: return {offsetof(block_q6_K, d)};
        case Type::IQ1_S: return {offsetof(block_iq1_s, d)};
        case Type::IQ2_XXS: return {offsetof(block_iq2_xxs, d)};
        case Type::IQ2_XS: return {offsetof(block_iq2_xs, d)};
        case Type::IQ2_S: return {offsetof(block_iq2_s, d)};
        case Type::IQ3_XXS: return {offsetof(block_iq3_xxs, d)};
        case Type::IQ3_S: return {offsetof(block_iq3_s, d)};
        case Type::IQ4_NL: return {offsetof(block_iq4_nl, d)};
        case Type::IQ4_XS: return {offsetof(block_iq4_xs, d)};
        case Type::TQ1_0: return {offsetof(block_tq1_0, d)};
        case Type::TQ2_0: return {offsetof(block_tq2_0, d)};
        case Type::Q1_0: return {offsetof(block_q1_0, d)};
        case Type::Q2_0: return {offsetof(block_q2_0, d)};
        default: return {};
    }
}

// A finite scale of either sign, sometimes an f16 subnormal.
inline uint16_t random_scale(std::mt19937& rng) {
    std::uniform_real_distribution<float> mag(-12.f, 1.f);
    float v = std::exp2(mag(rng));
    if (rng() % 16 == 0) v = 3e-6f;  // subnormal in f16
    return quant::f32_to_f16(rng() % 2 ? v : -v);
}

// Random bytes for a row of n elements of `t`, with every scale made finite.
inline std::vector<uint8_t> random_row(quant::Type t, int64_t n, std::mt19937& rng) {
    using quant::Type;
    const auto& ti = quant::type_info(t);
    std::vector<uint8_t> row(quant::row_bytes(t, n));
    for (auto& b : row) b = static_cast<uint8_t>(rng());
    const int64_t nb = n / ti.block_elems;
    for (int64_t b = 0; b < nb; ++b) {
        uint8_t* blk = row.data() + b * ti.block_bytes;
        for (size_t off : f16_fields(t)) {
            const uint16_t h = random_scale(rng);
            std::memcpy(blk + off, &h, 2);
        }
        if (t == Type::F16) {
            const uint16_t h = quant::f32_to_f16(std::uniform_real_distribution<float>(-2, 2)(rng));
            std::memcpy(blk, &h, 2);
        } else if (t == Type::BF16) {
            const uint16_t h = quant::f32_to_bf16(std::uniform_real_distribution<float>(-2, 2)(rng));
            std::memcpy(blk, &h, 2);
        } else if (t == Type::F32) {
            const float f = std::uniform_real_distribution<float>(-2, 2)(rng);
            std::memcpy(blk, &f, 4);
        } else if (t == Type::MXFP4) {
            blk[0] = static_cast<uint8_t>(110 + rng() % 30);  // 2^-18 .. 2^11: products stay finite
        } else if (t == Type::IQ1_M) {
            // The f16 super-scale lives in the top nibble of each of the four u16 scale words.
            const uint16_t h = random_scale(rng);
            uint8_t* sc = blk + offsetof(quant::block_iq1_m, scales);
            for (int i = 0; i < 4; ++i) {
                uint16_t word;
                std::memcpy(&word, sc + 2 * i, 2);
                word = static_cast<uint16_t>((word & 0x0FFF) | (((h >> (4 * i)) & 0xF) << 12));
                std::memcpy(sc + 2 * i, &word, 2);
            }
        }
    }
    return row;
}

}  // namespace df::test
