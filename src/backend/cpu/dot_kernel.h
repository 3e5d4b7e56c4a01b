// Internals of row_dot: the one accumulation order, the drivers, and the decoder contract.
//
// A decoder turns one block into groups of 32 weights in registers (W32), bitwise equal to the
// scalar reference. It is a struct with
//   static constexpr int kElems, kBytes;        // one block
//   struct State; static void load(State&, const uint8_t* block);
//   template <int G> static void group(const State&, W32&);   // G < kElems / 32
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

struct W32 {
    __m256 v[4];  // elements 8k .. 8k+7 of the group in v[k]
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
Kernel kernel_scalar(quant::Type t);

// ---- small helpers ---------------------------------------------------------------------------

template <int N, class F>
DF_DOT_INLINE void static_for(F&& f) {
    [&]<int... I>(std::integer_sequence<int, I...>) { (f(std::integral_constant<int, I>{}), ...); }(
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

// 16 bytes of packed nibbles -> 32 bytes: low nibbles (elements 0..15), then high (16..31).
DF_DOT_INLINE __m256i nibbles_lo_hi(__m128i qs) {
    const __m128i m = _mm_set1_epi8(0x0F);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(qs, 4), m), _mm_and_si128(qs, m));
}

// ---- the accumulation order (the numerics contract of row_dot lives here) ----------------------

template <int TT>
struct Acc {
    __m256 a[TT][2];
};

// Adds one group of 32 products to each token's accumulator P (the group's parity).
template <int P, int TT>
DF_DOT_INLINE void acc_group(Acc<TT>& acc, const W32& w, const float* x, int64_t xs) {
    static_for<TT>([&](auto t) {
        const float* xt = x + t * xs;
        __m256 p = _mm256_mul_ps(w.v[0], _mm256_loadu_ps(xt));
        p = _mm256_fmadd_ps(w.v[1], _mm256_loadu_ps(xt + 8), p);
        p = _mm256_fmadd_ps(w.v[2], _mm256_loadu_ps(xt + 16), p);
        p = _mm256_fmadd_ps(w.v[3], _mm256_loadu_ps(xt + 24), p);
        acc.a[t][P] = _mm256_add_ps(acc.a[t][P], p);
    });
}

DF_DOT_INLINE float acc_finish(__m256 a0, __m256 a1) {
    const __m256 s = _mm256_add_ps(a0, a1);
    __m128 v = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    v = _mm_add_ss(v, _mm_movehdup_ps(v));
    return _mm_cvtss_f32(v);
}

// Blocks [0, nb) of a row into acc; x points at the row's first element for token 0. The group
// parity is global (block 0 starts even), so callers that split a row must split at an even group.
template <class Dec, int TT>
DF_DOT_INLINE void run_blocks(const uint8_t* row, int64_t nb, const float* x, int64_t xs, Acc<TT>& acc) {
    constexpr int kGroups = Dec::kElems / 32;
    static_assert(Dec::kElems % 32 == 0);
    const auto one = [&](int64_t b, auto parity_base) {
        typename Dec::State st;
        Dec::load(st, row + b * Dec::kBytes);
        static_for<kGroups>([&](auto g) {
            W32 w;
            Dec::template group<g>(st, w);
            acc_group<(parity_base + g) % 2>(acc, w, x + b * Dec::kElems + 32 * g, xs);
        });
    };
    if constexpr (kGroups % 2 == 0) {
        for (int64_t b = 0; b < nb; ++b) one(b, std::integral_constant<int, 0>{});
    } else {
        int64_t b = 0;
        for (; b + 2 <= nb; b += 2) {
            one(b, std::integral_constant<int, 0>{});
            one(b + 1, std::integral_constant<int, 1>{});
        }
        if (b < nb) one(b, std::integral_constant<int, 0>{});
    }
}

// Decodes blocks [0, nb) into dst (kElems floats per block).
template <class Dec>
void decode_blocks(const uint8_t* row, int64_t nb, float* dst) {
    for (int64_t b = 0; b < nb; ++b) {
        typename Dec::State st;
        Dec::load(st, row + b * Dec::kBytes);
        static_for<Dec::kElems / 32>([&](auto g) {
            W32 w;
            Dec::template group<g>(st, w);
            for (int k = 0; k < 4; ++k) _mm256_storeu_ps(dst + b * Dec::kElems + 32 * g + 8 * k, w.v[k]);
        });
    }
}

// Reads already-decoded f32 weights: the second stage of the batched path, and the F32 type.
struct DecF32 {
    static constexpr int kElems = 32, kBytes = 128;
    struct State {
        const float* p;
    };
    static DF_DOT_INLINE void load(State& s, const uint8_t* b) { s.p = reinterpret_cast<const float*>(b); }
    template <int G>
    static DF_DOT_INLINE void group(const State& s, W32& w) {
        for (int k = 0; k < 4; ++k) w.v[k] = _mm256_loadu_ps(s.p + 8 * k);
    }
};

// Up to 4 tokens: each block is decoded once in registers and used for every token.
template <class Dec, int TT>
void dot_registers(const uint8_t* row, int64_t nb, const float* x, int64_t xs, float* out, int64_t os) {
    Acc<TT> acc;
    for (int t = 0; t < TT; ++t) acc.a[t][0] = acc.a[t][1] = _mm256_setzero_ps();
    run_blocks<Dec, TT>(row, nb, x, xs, acc);
    for (int t = 0; t < TT; ++t) out[t * os] = acc_finish(acc.a[t][0], acc.a[t][1]);
}

// Any T: a chunk of the row is decoded once into an L1-resident buffer, then swept by tiles of
// up to 4 tokens whose accumulators live in memory between chunks. Same order as dot_registers.
template <class Dec>
void dot_batched(const uint8_t* row, int64_t nb, const float* x, int64_t xs, int T, float* out, int64_t os) {
    constexpr int64_t kChunkBlocks = std::max(1, 1024 / Dec::kElems);  // 1024 elements: an even group count
    alignas(32) float buf[kChunkBlocks * Dec::kElems];
    constexpr int kStackTokens = 64;
    __m256 stack_acc[kStackTokens][2];
    __m256(*accs)[2] = stack_acc;
    __m256(*heap_acc)[2] = nullptr;
    if (T > kStackTokens) accs = heap_acc = new __m256[T][2];
    for (int t = 0; t < T; ++t) accs[t][0] = accs[t][1] = _mm256_setzero_ps();

    const auto tile = [&]<int TT>(std::integral_constant<int, TT>, int t0, int64_t cb, const float* xc) {
        Acc<TT> acc;
        for (int t = 0; t < TT; ++t) acc.a[t][0] = accs[t0 + t][0], acc.a[t][1] = accs[t0 + t][1];
        run_blocks<DecF32, TT>(reinterpret_cast<const uint8_t*>(buf), cb * Dec::kElems / 32, xc + t0 * xs, xs, acc);
        for (int t = 0; t < TT; ++t) accs[t0 + t][0] = acc.a[t][0], accs[t0 + t][1] = acc.a[t][1];
    };
    for (int64_t c0 = 0; c0 < nb; c0 += kChunkBlocks) {
        const int64_t cb = std::min(kChunkBlocks, nb - c0);
        decode_blocks<Dec>(row + c0 * Dec::kBytes, cb, buf);
        const float* xc = x + c0 * Dec::kElems;
        int t0 = 0;
        for (; t0 + 4 <= T; t0 += 4) tile(std::integral_constant<int, 4>{}, t0, cb, xc);
        switch (T - t0) {
            case 3: tile(std::integral_constant<int, 3>{}, t0, cb, xc); break;
            case 2: tile(std::integral_constant<int, 2>{}, t0, cb, xc); break;
            case 1: tile(std::integral_constant<int, 1>{}, t0, cb, xc); break;
            default: break;
        }
    }
    for (int t = 0; t < T; ++t) out[t * os] = acc_finish(accs[t][0], accs[t][1]);
    delete[] heap_acc;
}

template <class Dec>
void dot_any(const uint8_t* row, int64_t nb, const float* x, int64_t xs, int T, float* out, int64_t os) {
    switch (T) {
        case 1: dot_registers<Dec, 1>(row, nb, x, xs, out, os); return;
        case 2: dot_registers<Dec, 2>(row, nb, x, xs, out, os); return;
        case 3: dot_registers<Dec, 3>(row, nb, x, xs, out, os); return;
        case 4: dot_registers<Dec, 4>(row, nb, x, xs, out, os); return;
        default: dot_batched<Dec>(row, nb, x, xs, T, out, os); return;
    }
}

template <class Dec>
constexpr Kernel make_kernel() {
    return Kernel{dot_any<Dec>, decode_blocks<Dec>, Dec::kElems, Dec::kBytes};
}

}  // namespace df::cpu::detail
