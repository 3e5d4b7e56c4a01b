// Per-token pieces of the gated delta rule shared by its kernels (gdn.cu, gdn_step.cu), so that
// every path rounds them alike.
#pragma once

#include "backend/cuda/device_util.cuh"

namespace df::cuda {

// L2 normalisation as ggml: x / max(sqrt(sum x^2), eps), the sum in double. Lane l holds
// elements l, l + 32, ... of the vector.
template <int NPL>
DF_DEV void l2_normalize(float (&x)[NPL], float eps) {
    double s = 0;
#pragma unroll
    for (int m = 0; m < NPL; ++m) s += static_cast<double>(__fmul_rn(x[m], x[m]));
    s = warp_sum(s);
    const float scale = 1.0f / fmaxf(static_cast<float>(sqrt(s)), eps);
#pragma unroll
    for (int m = 0; m < NPL; ++m) x[m] = __fmul_rn(x[m], scale);
}

// A value head's decay e^(softplus(alpha + dt_bias) a_neg), as ggml rounds it.
DF_DEV float gdn_decay(float alpha, float dt_bias, float a_neg) {
    return expf(__fmul_rn(softplus_f(__fadd_rn(alpha, dt_bias)), a_neg));
}

}  // namespace df::cuda
