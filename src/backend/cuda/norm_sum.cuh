// The sum of squares behind an RMSNorm of a row of n values (n a multiple of 256, at most 64
// units), in one fixed order that every kernel computing it shares: rmsnorm_units_kernel (norm.cu)
// and the f32 matvec that folds the norm into its input (matvec.cuh) get the same scale to the
// last bit, so folding changes no result.
//
// The order: `rms_warps(n)` groups; group w sums units w, w + warps, ... with lane l taking
// values 8l .. 8l + 7 of each unit (in order, from 0.0, each square rounded to f32 first); each
// group's lanes are added by warp_sum, then the group totals by warp_sum over lanes < warps.
#pragma once

#include "backend/cuda/device_util.cuh"

namespace df::cuda {

inline constexpr int kRmsUnitsPerWarp = 2;
inline constexpr int kRmsMaxWarps = 32;

__host__ __device__ constexpr int rms_warps(int n) {
    const int units = n / 256;
    return units <= kRmsMaxWarps ? units : (units + 1) / 2;
}

// Adds a lane's 8 values of one unit to its part.
DF_DEV void rms_add8(double& s, const float (&v)[8]) {
#pragma unroll
    for (int j = 0; j < 8; ++j) s += static_cast<double>(__fmul_rn(v[j], v[j]));
}

// Lane's part of group w (the caller adds the lanes with warp_sum).
DF_DEV double rms_lane_sumsq(const float* xr, int n, int w, int lane) {
    const int units = n / 256, warps = rms_warps(n);
    double s = 0;
#pragma unroll
    for (int k = 0; k < kRmsUnitsPerWarp; ++k) {
        const int u = w + k * warps;
        if (u >= units) continue;
        const float4 a = __ldg(reinterpret_cast<const float4*>(xr + u * 256 + 8 * lane));
        const float4 b = __ldg(reinterpret_cast<const float4*>(xr + u * 256 + 8 * lane) + 1);
        const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        rms_add8(s, v);
    }
    return s;
}

DF_DEV float rms_scale(double sumsq, int n, float eps) {
    const float mean = static_cast<float>(sumsq / n);
    return 1.0f / sqrtf(mean + eps);
}

}  // namespace df::cuda
