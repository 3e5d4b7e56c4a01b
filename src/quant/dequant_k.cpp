// Scalar reference dequantization of the K-quants (256-element super-blocks).
//
// Products keep ggml's grouping where it matters for rounding: Q6_K is (d * scale) * q, whose
// second product can round; the other K types are exact products plus one subtraction.
#include "quant/dequant_impl.h"

namespace df::quant::detail {

void dequant_q2_K(const void* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n / 256; ++i) {
        const auto b = load_block<block_q2_K>(src, i);
        const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
        int is = 0;
        for (int half = 0; half < 2; ++half) {
            const uint8_t* q = b.qs + 32 * half;
            for (int shift = 0; shift < 8; shift += 2) {
                for (int g = 0; g < 2; ++g) {  // two groups of 16 per shift, one scale byte each
                    const uint8_t sc = b.scales[is++];
                    const float dl = d * static_cast<float>(sc & 0xF), ml = dmin * static_cast<float>(sc >> 4);
                    for (int l = 0; l < 16; ++l)
                        *dst++ = dl * static_cast<float>((q[16 * g + l] >> shift) & 3) - ml;
                }
            }
        }
    }
}

void dequant_q3_K(const void* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n / 256; ++i) {
        const auto b = load_block<block_q3_K>(src, i);
        const float d = f16_to_f32(b.d);
        // 16 signed 6-bit scales: low 4 bits from bytes 0..7 (two per byte), high 2 from bytes 8..11.
        int8_t scales[16];
        for (int s = 0; s < 16; ++s) {
            const int lo = s < 8 ? b.scales[s] & 0xF : b.scales[s - 8] >> 4;
            const int hi = (b.scales[8 + s % 4] >> (2 * (s / 4))) & 3;
            scales[s] = static_cast<int8_t>((lo | (hi << 4)) - 32);
        }
        int is = 0;
        uint8_t m = 1;  // hmask bit for the current (half, shift)
        for (int half = 0; half < 2; ++half) {
            const uint8_t* q = b.qs + 32 * half;
            for (int shift = 0; shift < 8; shift += 2, m = static_cast<uint8_t>(m << 1)) {
                for (int g = 0; g < 2; ++g) {
                    const float dl = d * static_cast<float>(scales[is++]);
                    for (int l = 0; l < 16; ++l) {
                        const int lo = (q[16 * g + l] >> shift) & 3;
                        const int v = lo - ((b.hmask[16 * g + l] & m) ? 0 : 4);
                        *dst++ = dl * static_cast<float>(v);
                    }
                }
            }
        }
    }
}

void dequant_q4_K(const void* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n / 256; ++i) {
        const auto b = load_block<block_q4_K>(src, i);
        const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
        for (int c = 0; c < 4; ++c) {
            const uint8_t* q = b.qs + 32 * c;
            uint8_t sc, m;
            scale_min_k4(2 * c, b.scales, sc, m);
            const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
            scale_min_k4(2 * c + 1, b.scales, sc, m);
            const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
            for (int l = 0; l < 32; ++l) *dst++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; ++l) *dst++ = d2 * static_cast<float>(q[l] >> 4) - m2;
        }
    }
}

void dequant_q5_K(const void* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n / 256; ++i) {
        const auto b = load_block<block_q5_K>(src, i);
        const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
        for (int c = 0; c < 4; ++c) {
            const uint8_t* q = b.qs + 32 * c;
            const uint8_t u1 = static_cast<uint8_t>(1u << (2 * c)), u2 = static_cast<uint8_t>(2u << (2 * c));
            uint8_t sc, m;
            scale_min_k4(2 * c, b.scales, sc, m);
            const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
            scale_min_k4(2 * c + 1, b.scales, sc, m);
            const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
            for (int l = 0; l < 32; ++l)
                *dst++ = d1 * static_cast<float>((q[l] & 0xF) + (b.qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; ++l)
                *dst++ = d2 * static_cast<float>((q[l] >> 4) + (b.qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

void dequant_q6_K(const void* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n / 256; ++i) {
        const auto b = load_block<block_q6_K>(src, i);
        const float d = f16_to_f32(b.d);
        for (int half = 0; half < 2; ++half, dst += 128) {
            const uint8_t* ql = b.ql + 64 * half;
            const uint8_t* qh = b.qh + 32 * half;
            const int8_t* sc = b.scales + 8 * half;
            for (int l = 0; l < 32; ++l) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                dst[l] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q1);
                dst[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
                dst[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
                dst[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
            }
        }
    }
}

}  // namespace df::quant::detail
