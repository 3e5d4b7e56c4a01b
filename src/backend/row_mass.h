// The sampler's probability mass of a logit, exp(x - max), as a fixed-point integer computed by
// the same IEEE operations on the host and on a GPU (explicit fused multiply-adds, no library
// exp): a row's mass is a sum of integers, the same in any order, so a GPU can sum the row and
// the host get the very normalizer it would have summed itself (top-p's cut, Sampler::truncate;
// Backend::row_mass).
#pragma once

#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define DF_ROW_MASS_FN __host__ __device__ inline
#else
#define DF_ROW_MASS_FN inline
#endif

namespace df {

// Scale of the fixed point: the max itself weighs 2^40, so 2^18 rows of the max sum below 2^63;
// a logit more than ~27.7 below the max weighs 0 (under 2^-40 of it).
inline constexpr int kMassBits = 40;

// floor(exp(x - lmax) * 2^40) up to the polynomial's ~1e-7 relative error; 0 for NaN, -inf and
// anything below lmax - 87. Expects x <= lmax (a larger x is clamped to lmax).
DF_ROW_MASS_FN uint64_t mass_term(float x, float lmax) {
    // exp(d) = 2^k exp(r), r = d - k ln 2 in [-ln2/2, ln2/2] (ln 2 in two parts, k * hi exact), exp(r) by
    // its Taylor polynomial of degree 6. Constants as hex floats: no decimal rounding in either compiler.
    constexpr float kLog2e = 0x1.715476p+0f, kLn2Hi = 0x1.62e4p-1f, kLn2Lo = 0x1.7f7d1cp-20f;
    constexpr float kC6 = 0x1.6c16c2p-10f, kC5 = 0x1.111112p-7f, kC4 = 0x1.555556p-5f, kC3 = 0x1.555556p-3f;
#ifdef __CUDA_ARCH__
    float d = __fsub_rn(x, lmax);
    if (!(d > -87.f)) return 0;
    if (d > 0.f) d = 0.f;
    const float k = rintf(__fmul_rn(d, kLog2e));
    const float r = __fmaf_rn(-k, kLn2Lo, __fmaf_rn(-k, kLn2Hi, d));
    float p = __fmaf_rn(kC6, r, kC5);
    p = __fmaf_rn(p, r, kC4);
    p = __fmaf_rn(p, r, kC3);
    p = __fmaf_rn(p, r, 0.5f);
    p = __fmaf_rn(p, r, 1.f);
    p = __fmaf_rn(p, r, 1.f);
    return __double2ull_rz(ldexp(static_cast<double>(p), static_cast<int>(k) + kMassBits));
#else
    float d = x - lmax;
    if (!(d > -87.f)) return 0;
    if (d > 0.f) d = 0.f;
    const float k = std::rint(d * kLog2e);
    const float r = std::fma(-k, kLn2Lo, std::fma(-k, kLn2Hi, d));
    float p = std::fma(kC6, r, kC5);
    p = std::fma(p, r, kC4);
    p = std::fma(p, r, kC3);
    p = std::fma(p, r, 0.5f);
    p = std::fma(p, r, 1.f);
    p = std::fma(p, r, 1.f);
    return static_cast<uint64_t>(std::ldexp(static_cast<double>(p), static_cast<int>(k) + kMassBits));
#endif
}

}  // namespace df
