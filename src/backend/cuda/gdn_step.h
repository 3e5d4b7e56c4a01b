// The GDN mixer after its projections for T <= 8 tokens in one kernel (gdn_step.cu), used by
// CudaBackend::gdn_mix for decode and speculative verify.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "backend/cuda/kernels.h"

namespace df::cuda {

// The results of launch_gdn_conv, launch_gdn_delta and launch_gated_rmsnorm_quant (with xq null:
// of launch_gated_rmsnorm, up to its summation order) bit for bit, where gdn_step_fits: T <= 8,
// head_dim 128, 4 conv taps, Hv even and a multiple of Hk, a counter per key head, z and out
// 16-byte aligned. qkv is only read (the conv's outputs stay inside); out must not alias qkv or z.
// One sequence of a batched pass (GdnStepArgs::lanes): its rows of the projections, its state.
struct GdnStepLane {
    const float* qkv = nullptr;
    const float* z = nullptr;
    const float* alpha = nullptr;
    const float* beta = nullptr;
    float* conv_state = nullptr;
    float* state = nullptr;
    float* out = nullptr;
    int T = 0;
};
inline constexpr int kGdnStepMaxLanes = 8;

struct GdnStepArgs {
    const float* qkv = nullptr;      // [T, (2 Hk + Hv) D] projections before the conv
    const float* z = nullptr;        // [T, Hv D] the norm's gate
    const float* alpha = nullptr;    // [T, Hv] raw
    const float* beta = nullptr;     // [T, Hv] raw
    const float* conv_w = nullptr;   // [C, taps]
    const float* dt_bias = nullptr;  // [Hv]
    const float* a_neg = nullptr;    // [Hv]
    const float* norm_w = nullptr;   // [D]
    int T = 0, k_heads = 0, v_heads = 0, head_dim = 0, taps = 0;
    float eps = 0.f;
    float* conv_state = nullptr;     // [taps - 1, C]
    float* state = nullptr;          // [Hv, D, D]
    float* out = nullptr;            // [T, Hv D]
    uint2* xq = nullptr;             // out in the imma activation format (act_quant.cuh), or null
    float* xe = nullptr;
    int blocks_per_head = 4;         // 1, 2 or 4: blocks per value head
    unsigned* counters = nullptr;    // counter_count >= Hk, zero (and left zero)
    int counter_count = 0;
    bool late_trigger = false;       // let the next kernel launch only once the outputs are near
    // qkv and z as a deferred imma launch left them (ImmaArgs::defer, out = qkv / z; both or
    // neither): the tiles several warps shared are summed from their parts as they are loaded,
    // and not written back (qkv and z have no other reader). Not with lanes.
    ImmaDeferred qkv_parts{}, z_parts{};
    // A batched pass (lanes > 0): lane[i] replaces qkv .. out and T for the blocks at
    // blockIdx.y = i, each with its own Hk counters (counters + i Hk); no xq. One launch instead
    // of one per sequence, each lane's bits those of its own call.
    int lanes = 0;
    GdnStepLane lane[kGdnStepMaxLanes];
};
bool gdn_step_fits(const GdnStepArgs& a);
void launch_gdn_step(const GdnStepArgs& a, cudaStream_t s);

}  // namespace df::cuda
