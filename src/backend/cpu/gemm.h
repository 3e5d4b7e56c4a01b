// Prefill GEMM on the CPU: kPanelRows weight rows are decoded once into a column-interleaved f32
// panel, then an outer-product micro-kernel sweeps it over the tokens.
//
// row_dot re-decodes a row for every 8 tokens, which is right for decode (bandwidth-bound) but
// leaves a prompt chunk's matmul decode-bound; here the decode is amortised over all T tokens.
// The micro-kernel holds 16 rows x 6 tokens of accumulators; per column it loads the panel's 16
// values (two vectors) and broadcasts 6 activations for 12 FMAs: 88 bytes per 12 FMAs, where
// the dot-product form (4 rows x 3 tokens, both operands along the columns) moved 224 and was
// bound by L2 bandwidth at ~64 % of FMA peak.
#pragma once

#include <cstdint>

namespace df::cpu {

inline constexpr int kPanelRows = 16;

// The first 64-byte aligned float at or after p (a buffer with 16 floats to spare holds a
// 64-byte aligned panel from there).
inline float* align_panel(float* p) { return p + (16 - reinterpret_cast<uintptr_t>(p) / 4 % 16) % 16; }

// panel[c * kPanelRows + r] = src[r * cols + c] for r < rows (<= kPanelRows), zeros for the rest.
void pack_panel(const float* src, int rows, int64_t cols, float* panel);

// The micro-kernel's instruction set: AVX2 (every x86-64-v3 CPU) or AVX-512 F, chosen at run
// time (the build targets x86-64-v3). Both give the same bits.
enum class GemmIsa { avx2, avx512 };
bool gemm_avx512_available();
GemmIsa gemm_default_isa();  // AVX-512 where the CPU has it, unless DF_CPU_AVX512=0

// out[t * os + r] = sum_c panel[c * kPanelRows + r] * x[t * xs + c]   (+ out when accumulate)
// for r < rows (<= kPanelRows), t < T; each sum runs over c in order in blocks of 64, the block
// sums added in order. panel is 64-byte aligned; panel, x, out must not alias.
void gemm_panel(const float* panel, int rows, int64_t cols, const float* x, int64_t xs, int T, float* out,
                int64_t os, bool accumulate, GemmIsa isa = gemm_default_isa());

}  // namespace df::cpu
