// The sampler's probability mass of a logit, exp(x - max), as a fixed-point integer computed by
// the same IEEE operations on the host and on a GPU (explicit fused multiply-adds, no library
// exp): a row's mass is a sum of integers, the same in any order, so a GPU can sum the row and
// the host get the very normalizer it would have summed itself (top-p's cut, Sampler::truncate;
// Backend::row_mass).
#pragma once

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#ifdef __CUDACC__
#define DF_ROW_MASS_FN __host__ __device__ inline
#else
#define DF_ROW_MASS_FN inline
#endif

namespace df {

// Scale of the fixed point: the max itself weighs 2^40, so 2^18 rows of the max sum below 2^63;
// a logit more than ~27.7 below the max weighs 0 (under 2^-40 of it).
inline constexpr int kMassBits = 40;

// The operations, each correctly rounded on both sides (nvcc would otherwise fuse a multiply
// and an add on its own).
#ifdef __CUDA_ARCH__
#define DF_MASS_SUB(a, b) __fsub_rn(a, b)
#define DF_MASS_MUL(a, b) __fmul_rn(a, b)
#define DF_MASS_FMA(a, b, c) __fmaf_rn(a, b, c)
#define DF_MASS_RINT(a) rintf(a)
#define DF_MASS_U64(d) __double2ull_rz(d)
#else
#define DF_MASS_SUB(a, b) ((a) - (b))
#define DF_MASS_MUL(a, b) ((a) * (b))
#define DF_MASS_FMA(a, b, c) std::fma(a, b, c)
#define DF_MASS_RINT(a) std::rint(a)
#define DF_MASS_U64(d) static_cast<uint64_t>(d)
#endif

// floor(exp(x - lmax) * 2^40) up to the polynomial's ~1e-7 relative error; 0 for NaN, -inf and
// anything below lmax - 87. Expects x <= lmax (a larger x is clamped to lmax).
DF_ROW_MASS_FN uint64_t mass_term(float x, float lmax) {
    // exp(d) = 2^k exp(r), r = d - k ln 2 in [-ln2/2, ln2/2] (ln 2 in two parts, k * hi exact), exp(r) by
    // its Taylor polynomial of degree 6. Constants as hex floats: no decimal rounding in either compiler.
    constexpr float kLog2e = 0x1.715476p+0f, kLn2Hi = 0x1.62e4p-1f, kLn2Lo = 0x1.7f7d1cp-20f;
    constexpr float kC6 = 0x1.6c16c2p-10f, kC5 = 0x1.111112p-7f, kC4 = 0x1.555556p-5f, kC3 = 0x1.555556p-3f;
    float d = DF_MASS_SUB(x, lmax);
    if (!(d > -87.f)) return 0;
    if (d > 0.f) d = 0.f;
    const float k = DF_MASS_RINT(DF_MASS_MUL(d, kLog2e));
    const float r = DF_MASS_FMA(-k, kLn2Lo, DF_MASS_FMA(-k, kLn2Hi, d));
    float p = DF_MASS_FMA(kC6, r, kC5);
    p = DF_MASS_FMA(p, r, kC4);
    p = DF_MASS_FMA(p, r, kC3);
    p = DF_MASS_FMA(p, r, 0.5f);
    p = DF_MASS_FMA(p, r, 1.f);
    p = DF_MASS_FMA(p, r, 1.f);
    return DF_MASS_U64(ldexp(static_cast<double>(p), static_cast<int>(k) + kMassBits));  // exact: a power of 2
}

#undef DF_MASS_SUB
#undef DF_MASS_MUL
#undef DF_MASS_FMA
#undef DF_MASS_RINT
#undef DF_MASS_U64

#ifndef __CUDA_ARCH__
// Backend::row_mass's argument contract, checked on the host before any work.
inline void check_row_mass(int n) {
    if (n < 1) throw std::invalid_argument("row_mass: n = " + std::to_string(n) + " (at least 1)");
}
#endif

}  // namespace df
