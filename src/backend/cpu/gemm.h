// Prefill GEMM on the CPU: weight rows decoded once into an f32 panel, then a register-blocked
// micro-kernel sweeps the panel over the tokens.
//
// row_dot re-decodes a row for every 8 tokens, which is right for decode (bandwidth-bound) but
// leaves a prompt chunk's matmul decode-bound; here the decode is amortised over all T tokens
// and the inner loop is 12 FMAs per 7 loads.
#pragma once

#include <cstdint>

namespace df::cpu {

// out[t * os + r] = sum_c panel[r * cols + c] * x[t * xs + c]   (+ out when accumulate)
// for r < rows (<= kPanelRows), t < T. panel, x, out must not alias.
inline constexpr int kPanelRows = 4;
void gemm_panel(const float* panel, int rows, int64_t cols, const float* x, int64_t xs, int T, float* out,
                int64_t os, bool accumulate);

}  // namespace df::cpu
