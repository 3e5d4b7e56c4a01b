// Internals of row_dot: the one accumulation order, the drivers, and the decoder contract.
//
// A decoder turns one block into groups of 32 weights in registers (W32). It is a struct with
//   static constexpr int kElems, kBytes;        // one block
//   static constexpr int kScale;                // 0: v holds the weights; 1: weight = s[0] * v;
//                                               // 2: s[0] * v for elements 0..15, s[1] * v for 16..31
//   struct State; static void load(State&, const uint8_t* block);
//   template <int G> static void group(const State&, W32&);   // G < kElems / 32
// where the weights (v, or the rounded products s * v) are bitwise the scalar reference's. A
// factored scale saves a multiply per 8 weights: on 2 cores the T = 1 kernels are bound by vector
// operations (expand, convert, FMA), not by memory, except Q8_0 and the float types.
// Included only by the dot*.cpp files (each instantiates the drivers for its own decoders).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

#include "quant/types.h"

namespace df::cpu::detail {

#define DF_DOT_INLINE inline __attribute__((always_inline))
// Lambdas in the hot loops must inline too (GCC otherwise may call them per group).
#define DF_DOT_LAMBDA_INLINE __attribute__((always_inline))

struct W32 {
    __m256 v[4];  // elements 8k .. 8k+7 of the group in v[k]
    __m256 s[2];  // group scale(s) when the decoder's kScale > 0 (broadcast)
};

using RowDotFn = void (*)(const uint8_t* row, int64_t nblocks, const float* x, int64_t x_stride, int T, float* out,
                          int64_t out_stride);
using RowDecodeFn = void (*)(const uint8_t* row, int64_t nblocks, float* dst);

struct Kernel {
    RowDotFn dot = nullptr;        // over whole blocks; a float row's tail is the caller's
    RowDecodeFn decode = nullptr;  // same weights, stored
    int block_elems = 0;           // 32 for F32/F16/BF16 (their "block" is a group of 32)
    int block_bytes = 0;
};

// Each TU returns the kernel for the types it serves, or an empty Kernel.
Kernel kernel_float(quant::Type t);
Kernel kernel_legacy(quant::Type t);
Kernel kernel_k(quant::Type t);
Kernel kernel_iq(quant::Type t);
Kernel kernel_low(quant::Type t);
Kernel kernel_scalar(quant::Type t);

// ---- small helpers ---------------------------------------------------------------------------

template <int N, class F>
DF_DOT_INLINE void static_for(F&& f) {
    [&]<int... I>(std::integer_sequence<int, I...>) DF_DOT_LAMBDA_INLINE {
        (f(std::integral_constant<int, I>{}), ...);
    }(
        std::make_integer_sequence<int, N>{});
}

DF_DOT_INLINE uint16_t load_u16(const uint8_t* p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
}
DF_DOT_INLINE uint32_t load_u32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}
DF_DOT_INLINE uint64_t load_u64(const uint8_t* p) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
}
DF_DOT_INLINE float load_f16(const uint8_t* p) { return _cvtsh_ss(load_u16(p)); }

// 32 signed bytes (element order) -> 4 x 8 floats.
DF_DOT_INLINE void i8x32_to_f32(__m256i q, W32& w) {
    const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    w.v[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo));
    w.v[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)));
    w.v[2] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi));
    w.v[3] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)));
}

// 8 unsigned bytes packed in a u64 (a grid entry) -> 8 floats.
DF_DOT_INLINE __m256 u8x8_to_f32(uint64_t bytes) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(bytes))));
}

// Lane j of row i is 0x80000000 where bit j of i is set: xor flips the signs a mask byte names.
struct SignTable {
    alignas(32) uint32_t m[256][8];
};
constexpr SignTable make_sign_table() {
    SignTable t{};
    for (int i = 0; i < 256; ++i)
        for (int j = 0; j < 8; ++j) t.m[i][j] = (i >> j) & 1 ? 0x80000000u : 0u;
    return t;
}
inline constexpr SignTable kSignMasks = make_sign_table();

DF_DOT_INLINE __m256 flip_signs(__m256 v, uint8_t mask) {
    return _mm256_xor_ps(v, _mm256_load_ps(reinterpret_cast<const float*>(kSignMasks.m[mask])));
}

// 16 bytes of packed nibbles -> 32 bytes: low nibbles (elements 0..15), then high (16..31).
DF_DOT_INLINE __m256i nibbles_lo_hi(__m128i qs) {
    const __m128i m = _mm_set1_epi8(0x0F);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(qs, 4), m), _mm_and_si128(qs, m));
}

// ---- the accumulation order (the numerics contract of row_dot lives here) ----------------------

// Adds one group of 32 products to each of TT tokens' accumulators: per token, 8 lanes each
// chain their 4 products, the group's scale(s) apply, and the result joins the token's single
// accumulator. The same sequence runs for a token whatever TT is, so results are batch-invariant.
template <int kScale, int TT>
DF_DOT_INLINE void acc_group(__m256 (&acc)[TT], const W32& w, const float* x, int64_t xs) {
    static_for<TT>([&](auto t) DF_DOT_LAMBDA_INLINE {
        const float* xt = x + t * xs;
        if constexpr (kScale == 2) {  // one chain per half, each with its scale
            __m256 lo = _mm256_mul_ps(w.v[0], _mm256_loadu_ps(xt));
            lo = _mm256_fmadd_ps(w.v[1], _mm256_loadu_ps(xt + 8), lo);
            __m256 hi = _mm256_mul_ps(w.v[2], _mm256_loadu_ps(xt + 16));
            hi = _mm256_fmadd_ps(w.v[3], _mm256_loadu_ps(xt + 24), hi);
            acc[t] = _mm256_add_ps(acc[t], _mm256_fmadd_ps(w.s[1], hi, _mm256_mul_ps(w.s[0], lo)));
        } else {
            __m256 p = _mm256_mul_ps(w.v[0], _mm256_loadu_ps(xt));
            p = _mm256_fmadd_ps(w.v[1], _mm256_loadu_ps(xt + 8), p);
            p = _mm256_fmadd_ps(w.v[2], _mm256_loadu_ps(xt + 16), p);
            p = _mm256_fmadd_ps(w.v[3], _mm256_loadu_ps(xt + 24), p);
            acc[t] = kScale == 1 ? _mm256_fmadd_ps(w.s[0], p, acc[t]) : _mm256_add_ps(acc[t], p);
        }
    });
}

DF_DOT_INLINE float hsum(__m256 s) {
    __m128 v = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    v = _mm_add_ss(v, _mm_movehdup_ps(v));
    return _mm_cvtss_f32(v);
}

// F32 rows.
struct DecF32 {
    static constexpr int kElems = 32, kBytes = 128, kScale = 0;
    struct State {
        const float* p;
    };
    static DF_DOT_INLINE void load(State& s, const uint8_t* b) { s.p = reinterpret_cast<const float*>(b); }
    template <int G>
    static DF_DOT_INLINE void group(const State& s, W32& w) {
        for (int k = 0; k < 4; ++k) w.v[k] = _mm256_loadu_ps(s.p + 8 * k);
    }
};

// Up to 8 tokens: each block is decoded once in registers and used for every token (8
// accumulators + 4 weight vectors + scales fit the 16 ymm registers).
template <class Dec, int TT>
void dot_tile(const uint8_t* row, int64_t nb, const float* x, int64_t xs, float* out, int64_t os) {
    static_assert(Dec::kElems % 32 == 0);
    __m256 acc[TT];
    for (int t = 0; t < TT; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        typename Dec::State st;
        Dec::load(st, row + b * Dec::kBytes);
        static_for<Dec::kElems / 32>([&](auto g) DF_DOT_LAMBDA_INLINE {
            W32 w;
            Dec::template group<g>(st, w);
            acc_group<Dec::kScale>(acc, w, x + b * Dec::kElems + 32 * g, xs);
        });
    }
    for (int t = 0; t < TT; ++t) out[t * os] = hsum(acc[t]);
}

// Any T, in tiles of 8 tokens; a tile decodes the row again (cheaper than storing it: the
// kernels are bound by vector operations, and a decode costs less than 8 tokens' FMAs).
template <class Dec>
void dot_any(const uint8_t* row, int64_t nb, const float* x, int64_t xs, int T, float* out, int64_t os) {
    using Fn = void (*)(const uint8_t*, int64_t, const float*, int64_t, float*, int64_t);
    static constexpr Fn kTiles[8] = {dot_tile<Dec, 1>, dot_tile<Dec, 2>, dot_tile<Dec, 3>, dot_tile<Dec, 4>,
                                     dot_tile<Dec, 5>, dot_tile<Dec, 6>, dot_tile<Dec, 7>, dot_tile<Dec, 8>};
    for (int t0 = 0; t0 < T; t0 += 8) kTiles[std::min(8, T - t0) - 1](row, nb, x + t0 * xs, xs, out + t0 * os, os);
}

// Decodes blocks [0, nb) into dst (kElems floats per block): the weights, scales applied.
template <class Dec>
void decode_blocks(const uint8_t* row, int64_t nb, float* dst) {
    for (int64_t b = 0; b < nb; ++b) {
        typename Dec::State st;
        Dec::load(st, row + b * Dec::kBytes);
        static_for<Dec::kElems / 32>([&](auto g) DF_DOT_LAMBDA_INLINE {
            W32 w;
            Dec::template group<g>(st, w);
            for (int k = 0; k < 4; ++k) {
                const __m256 v = Dec::kScale ? _mm256_mul_ps(w.v[k], w.s[Dec::kScale == 2 ? k / 2 : 0]) : w.v[k];
                _mm256_storeu_ps(dst + b * Dec::kElems + 32 * g + 8 * k, v);
            }
        });
    }
}

template <class Dec>
constexpr Kernel make_kernel() {
    return Kernel{dot_any<Dec>, decode_blocks<Dec>, Dec::kElems, Dec::kBytes};
}

}  // namespace df::cpu::detail
