// CPU dot products of quantized weight rows with f32 activations (AVX2 + FMA + F16C).
//
// Every type in the quant table is supported, all but TQ1_0 with a decoder that expands blocks
// in SIMD registers (TQ1_0 dequantizes a block at a time with the scalar reference). Either way
// the weights are exactly quant::dequantize_row's values. Single-thread throughput per type:
// bench/dot_bench.cpp.
#pragma once

#include <cstdint>

#include "quant/types.h"

namespace df::cpu {

// For one weight row of n elements stored as blocks of `type` (ggml layout, any alignment),
// out[t * out_stride] = dot(row, x + t * x_stride) for t < T, x f32 (no alignment needed).
//
// Numerics: the products use the exactly dequantized weights w_i, with a group's common scale
// possibly applied after summing its products (s * sum q_i x_i; where the reference's s * q_i
// itself rounds, as in Q6_K and IQ4_XS, that is one more rounding per product). Each token's sum
// is formed in f32 in one fixed order: per 32-element group, 8 lanes chain 4 products and take the
// group scale; groups join one accumulator in row order; a fixed horizontal sum; a float row's
// last n % 32 elements added one by one. No product passes more than n/32 + 40 roundings, so
// |out - sum w_i x_i| <= gamma_{n/32+41} * sum |w_i x_i|, gamma_k = k u / (1 - k u), u = 2^-24.
// The order does not depend on T or on the other tokens: out[t] is bitwise the same whether a
// token is computed alone or in any batch (a speculative verify pass sees the same logits as
// plain decoding). Tokens are processed 8 at a time, each tile decoding the row once.
// Throws std::invalid_argument for a type outside the table or n not a multiple of its block.
// out must not alias row or x.
void row_dot(quant::Type type, const void* row, int64_t n, const float* x, int64_t x_stride, int T, float* out,
             int64_t out_stride);

// Dequantizes a row with the same SIMD decoders row_dot uses (bitwise equal to
// quant::dequantize_row; tests hold the two together). Same argument rules as row_dot.
void decode_row(quant::Type type, const void* row, int64_t n, float* dst);

}  // namespace df::cpu
