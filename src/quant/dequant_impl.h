// Internals of the scalar reference dequantizers: one function per type, block loaders.
//
// Shared by dequant*.cpp and by the CPU backend's generic dot path (through dequant_fn); not a
// public interface.
#pragma once

#include <cstdint>
#include <cstring>

#include "quant/blocks.h"
#include "quant/dequant.h"

namespace df::quant::detail {

// Block i of a row that may sit at any address: copying it out keeps the read free of
// misaligned-access UB; the compiler turns the copy into plain unaligned loads.
template <class Block>
inline Block load_block(const void* src, int64_t i) {
    Block b;
    std::memcpy(&b, static_cast<const uint8_t*>(src) + i * static_cast<int64_t>(sizeof(Block)), sizeof(Block));
    return b;
}

inline uint32_t load_u32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

// Each: n elements (a multiple of the block size) from src into dst, exactly as ggml's to_float.
void dequant_f32(const void* src, float* dst, int64_t n);
void dequant_f16(const void* src, float* dst, int64_t n);
void dequant_bf16(const void* src, float* dst, int64_t n);
void dequant_q4_0(const void* src, float* dst, int64_t n);
void dequant_q4_1(const void* src, float* dst, int64_t n);
void dequant_q5_0(const void* src, float* dst, int64_t n);
void dequant_q5_1(const void* src, float* dst, int64_t n);
void dequant_q8_0(const void* src, float* dst, int64_t n);
void dequant_q2_K(const void* src, float* dst, int64_t n);
void dequant_q3_K(const void* src, float* dst, int64_t n);
void dequant_q4_K(const void* src, float* dst, int64_t n);
void dequant_q5_K(const void* src, float* dst, int64_t n);
void dequant_q6_K(const void* src, float* dst, int64_t n);
void dequant_iq1_s(const void* src, float* dst, int64_t n);
void dequant_iq1_m(const void* src, float* dst, int64_t n);
void dequant_iq2_xxs(const void* src, float* dst, int64_t n);
void dequant_iq2_xs(const void* src, float* dst, int64_t n);
void dequant_iq2_s(const void* src, float* dst, int64_t n);
void dequant_iq3_xxs(const void* src, float* dst, int64_t n);
void dequant_iq3_s(const void* src, float* dst, int64_t n);
void dequant_iq4_nl(const void* src, float* dst, int64_t n);
void dequant_iq4_xs(const void* src, float* dst, int64_t n);
void dequant_tq1_0(const void* src, float* dst, int64_t n);
void dequant_tq2_0(const void* src, float* dst, int64_t n);
void dequant_mxfp4(const void* src, float* dst, int64_t n);
void dequant_nvfp4(const void* src, float* dst, int64_t n);
void dequant_q1_0(const void* src, float* dst, int64_t n);
void dequant_q2_0(const void* src, float* dst, int64_t n);

// Shared scale decoders (ggml semantics).
float e8m0_to_f32_half(uint8_t e);   // 2^(e-128): MXFP4 scale, already halved for kvalues_fp4
float ue4m3_to_f32_half(uint8_t x);  // 0.5 * UE4M3 (bias 7); 0x00 and 0x7F give 0

// Q4_K / Q5_K: 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes.
inline void scale_min_k4(int j, const uint8_t* q, uint8_t& sc, uint8_t& m) {
    if (j < 4) {
        sc = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

}  // namespace df::quant::detail
