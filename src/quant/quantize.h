// Quantization to Q8_0 on the host (ggml's reference rounding): for weights that arrive in a
// float format and run faster as blocks (a DFlash drafter's bf16 matrices).
#pragma once

#include <cstdint>

namespace df::quant {

// n floats (a multiple of 32) into n / 32 Q8_0 blocks at dst (34 bytes each): per block
// d = max|x| / 127 stored as f16, q = round(x / d).
void quantize_q8_0(const float* x, void* dst, int64_t n);

}  // namespace df::quant
