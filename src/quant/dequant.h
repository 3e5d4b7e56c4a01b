// Scalar reference dequantization: reproduces ggml's `to_float` bit for bit.
//
// This is the definition of what a weight *is*; every fast path (CPU SIMD dot products, CUDA
// kernels) is tested against it.
#pragma once

#include <cstdint>

#include "quant/types.h"

namespace df::quant {

// Dequantizes n elements (a multiple of the type's block size) from src into dst.
// src holds n / block_elems consecutive blocks in ggml's layout (no alignment needed).
void dequantize_row(Type type, const void* src, float* dst, int64_t n);

// The same, as a function pointer chosen once per tensor (hot loops call it per block).
using DequantFn = void (*)(const void* src, float* dst, int64_t n);
DequantFn dequant_fn(Type type);

// half / bfloat16 conversions as ggml does them (round to nearest even; NaN kept).
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);

}  // namespace df::quant
