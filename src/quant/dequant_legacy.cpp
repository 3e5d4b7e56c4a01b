// Scalar reference dequantization of the float types and the legacy 32-element block types.
//
// Every value here is an exact product (a small integer times an f16 scale), plus at most one
// rounding addition (Q4_1/Q5_1 min), so the results equal ggml's bit for bit in any evaluation order.
#include <cstring>

#include "quant/dequant_impl.h"

namespace df::quant::detail {

void dequant_f32(const void* src, float* dst, int64_t n) { std::memcpy(dst, src, static_cast<size_t>(n) * 4); }

void dequant_f16(const void* src, float* dst, int64_t n) {
    const auto* p = static_cast<const uint8_t*>(src);
    for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        dst[i] = f16_to_f32(h);
    }
}

void dequant_bf16(const void* src, float* dst, int64_t n) {
    const auto* p = static_cast<const uint8_t*>(src);
    for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        dst[i] = bf16_to_f32(h);
    }
}

void dequant_q4_0(const void* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n / 32; ++i, dst += 32) {
        const auto b = load_block<block_q4_0>(src, i);
        const float d = f16_to_f32(b.d);
        for (int j = 0; j < 16; ++j) {
            dst[j] = static_cast<float>((b.qs[j] & 0xF) - 8) * d;
            dst[j + 16] = static_cast<float>((b.qs[j] >> 4) - 8) * d;
        }
    }
}

void dequant_q4_1(const void* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n / 32; ++i, dst += 32) {
        const auto b = load_block<block_q4_1>(src, i);
        const float d = f16_to_f32(b.d), m = f16_to_f32(b.m);
        for (int j = 0; j < 16; ++j) {
            dst[j] = static_cast<float>(b.qs[j] & 0xF) * d + m;
            dst[j + 16] = static_cast<float>(b.qs[j] >> 4) * d + m;
        }
    }
}

void dequant_q5_0(const void* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n / 32; ++i, dst += 32) {
        const auto b = load_block<block_q5_0>(src, i);
        const float d = f16_to_f32(b.d);
        const uint32_t qh = load_u32(b.qh);
        for (int j = 0; j < 16; ++j) {
            const int x0 = (b.qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1u) << 4);
            const int x1 = (b.qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
            dst[j] = static_cast<float>(x0 - 16) * d;
            dst[j + 16] = static_cast<float>(x1 - 16) * d;
        }
    }
}

void dequant_q5_1(const void* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n / 32; ++i, dst += 32) {
        const auto b = load_block<block_q5_1>(src, i);
        const float d = f16_to_f32(b.d), m = f16_to_f32(b.m);
        const uint32_t qh = load_u32(b.qh);
        for (int j = 0; j < 16; ++j) {
            const int x0 = (b.qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1u) << 4);
            const int x1 = (b.qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
            dst[j] = static_cast<float>(x0) * d + m;
            dst[j + 16] = static_cast<float>(x1) * d + m;
        }
    }
}

void dequant_q8_0(const void* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n / 32; ++i, dst += 32) {
        const auto b = load_block<block_q8_0>(src, i);
        const float d = f16_to_f32(b.d);
        for (int j = 0; j < 32; ++j) dst[j] = static_cast<float>(b.qs[j]) * d;
    }
}

}  // namespace df::quant::detail
