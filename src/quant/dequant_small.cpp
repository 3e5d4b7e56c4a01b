// Scalar reference dequantization of the ternary (TQ*), FP4 (MXFP4, NVFP4) and 1/2-bit types.
#include <cmath>

#include "quant/dequant_impl.h"
#include "quant/grids.h"

namespace df::quant::detail {

float e8m0_to_f32_half(uint8_t e) {
    // 2^(e-128); e = 0 and 1 land on f32 subnormals, which ggml writes as bit patterns.
    const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

float ue4m3_to_f32_half(uint8_t x) {
    if (x == 0 || x == 0x7F) return 0.0f;  // 0x7F is the NaN code; ggml reads it as zero
    const int exp = (x >> 3) & 0xF, man = x & 7;
    const float raw = exp == 0 ? std::ldexp(static_cast<float>(man), -9)
                               : std::ldexp(1.0f + static_cast<float>(man) / 8.0f, exp - 7);
    return raw * 0.5f;
}

// A trit from one base-3 digit position: q = byte * 3^k (mod 256) keeps the digit in its top
// bits; (q * 3) >> 8 reads it out as 0, 1 or 2.
static inline float trit(uint8_t byte, uint8_t pow3, float d) {
    const auto q = static_cast<uint8_t>(byte * pow3);
    const int t = (static_cast<uint16_t>(q) * 3) >> 8;
    return static_cast<float>(t - 1) * d;
}

void dequant_tq1_0(const void* src, float* dst, int64_t n) {
    static constexpr uint8_t kPow3[5] = {1, 3, 9, 27, 81};
    for (int64_t i = 0; i < n / 256; ++i) {
        const auto b = load_block<block_tq1_0>(src, i);
        const float d = f16_to_f32(b.d);
        // Order: bytes 0..31 as 5 digit passes of 32, bytes 32..47 as 5 passes of 16, then qh's
        // 4 bytes as 4 passes of 4 (160 + 80 + 16 = 256).
        for (int k = 0; k < 5; ++k)
            for (int m = 0; m < 32; ++m) *dst++ = trit(b.qs[m], kPow3[k], d);
        for (int k = 0; k < 5; ++k)
            for (int m = 32; m < 48; ++m) *dst++ = trit(b.qs[m], kPow3[k], d);
        for (int k = 0; k < 4; ++k)
            for (int m = 0; m < 4; ++m) *dst++ = trit(b.qh[m], kPow3[k], d);
    }
}

void dequant_tq2_0(const void* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n / 256; ++i) {
        const auto b = load_block<block_tq2_0>(src, i);
        const float d = f16_to_f32(b.d);
        for (int j = 0; j < 64; j += 32)
            for (int l = 0; l < 4; ++l)
                for (int m = 0; m < 32; ++m)
                    *dst++ = static_cast<float>(((b.qs[j + m] >> (2 * l)) & 3) - 1) * d;
    }
}

void dequant_mxfp4(const void* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n / 32; ++i, dst += 32) {
        const auto b = load_block<block_mxfp4>(src, i);
        const float d = e8m0_to_f32_half(b.e);
        for (int j = 0; j < 16; ++j) {
            dst[j] = static_cast<float>(kvalues_fp4[b.qs[j] & 0xF]) * d;
            dst[j + 16] = static_cast<float>(kvalues_fp4[b.qs[j] >> 4]) * d;
        }
    }
}

void dequant_nvfp4(const void* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n / 64; ++i) {
        const auto b = load_block<block_nvfp4>(src, i);
        for (int s = 0; s < 4; ++s, dst += 16) {
            const float d = ue4m3_to_f32_half(b.d[s]);
            for (int j = 0; j < 8; ++j) {
                dst[j] = static_cast<float>(kvalues_fp4[b.qs[8 * s + j] & 0xF]) * d;
                dst[j + 8] = static_cast<float>(kvalues_fp4[b.qs[8 * s + j] >> 4]) * d;
            }
        }
    }
}

void dequant_q1_0(const void* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n / 128; ++i, dst += 128) {
        const auto b = load_block<block_q1_0>(src, i);
        const float d = f16_to_f32(b.d);
        for (int j = 0; j < 128; ++j) dst[j] = (b.qs[j / 8] >> (j % 8)) & 1 ? d : -d;
    }
}

void dequant_q2_0(const void* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n / 64; ++i, dst += 64) {
        const auto b = load_block<block_q2_0>(src, i);
        const float d = f16_to_f32(b.d);
        for (int j = 0; j < 64; ++j) dst[j] = static_cast<float>(((b.qs[j / 4] >> (2 * (j % 4))) & 3) - 1) * d;
    }
}

}  // namespace df::quant::detail
