// The activation format of the integer tensor-core matvec (imma.cuh explains it): one warp
// converts one 256-column unit of one token. Used by act_quant.cu and fused into RMSNorm.
#pragma once

#include <cstdint>

#include "backend/cuda/device_util.cuh"

namespace df::cuda {

// 8 consecutive floats, a lane's share of a unit (kVec: two 16-byte accesses, p 16-byte aligned).
template <bool kVec>
DF_DEV void load8(const float* p, float (&v)[8]) {
    if constexpr (kVec) {
        const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = p[j];
    }
}

template <bool kVec>
DF_DEV void store8(float* p, const float (&v)[8]) {
    if constexpr (kVec) {
        reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
        reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
    } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) p[j] = v[j];
    }
}

// v: elements 8 lane .. 8 lane + 7 of unit `unit` of token `tok`; slabs = cols / 32.
DF_DEV void act_quant_unit(const float (&v)[8], int tok, int unit, int n_units, int slabs, uint2* xq, float* xe,
                           int lane) {
    float m = 0.f;
    bool bad = false;  // fmaxf drops NaN: non-finite inputs poison the unit's exponent instead
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        m = fmaxf(m, fabsf(v[j]));
        bad = bad || !isfinite(v[j]);
    }
    m = warp_max(m);
    bad = __any_sync(0xffffffffu, bad);
    // x = 2^E q with |q| <= 2^30: E = exponent(max) - 30 (max < 2^exponent).
    int ex = 0;
    frexpf(m, &ex);
    const int E = m > 0.f ? ex - 30 : 0;
    if (lane == 0) xe[static_cast<size_t>(tok) * n_units + unit] = bad ? __int_as_float(0x7fc00000) : ldexpf(1.f, E);
    // q + 0x808080 = c0 + 2^8 c1 + 2^16 c2 + 2^24 l3 with bytes c_i, so q's balanced base-256
    // digits (limbs in [-128, 127], |l3| <= 65) are the bytes of (q + 0x808080) ^ 0x808080.
    const bool normal = E >= -126 && E <= 126;  // 2^-E is a normal float (else: tiny inputs)
    const float scale = normal ? __int_as_float((127 - E) << 23) : 0.f;
    uint32_t w[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const float y = normal ? v[j] * scale : ldexpf(v[j], -E);  // exact: a power of two
        const int q = bad ? 0 : __float2int_rn(y);
        w[j] = static_cast<uint32_t>(q + 0x808080) ^ 0x808080u;
    }
    // Transpose bytes: limb i of elements 4h .. 4h+3 -> one word.
    uint32_t limb[4][2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const uint32_t* a = w + 4 * h;
        const uint32_t t0 = __byte_perm(a[0], a[1], 0x5140), t1 = __byte_perm(a[2], a[3], 0x5140);
        const uint32_t t2 = __byte_perm(a[0], a[1], 0x7362), t3 = __byte_perm(a[2], a[3], 0x7362);
        limb[0][h] = __byte_perm(t0, t1, 0x5410);
        limb[1][h] = __byte_perm(t0, t1, 0x7632);
        limb[2][h] = __byte_perm(t2, t3, 0x5410);
        limb[3][h] = __byte_perm(t2, t3, 0x7632);
    }
    // Elements 8 lane .. of the unit are quad lane q = lane % 4 of slab 8 unit + lane / 4.
    const size_t slab = static_cast<size_t>(tok >> 1) * slabs + static_cast<size_t>(unit) * 8 + (lane >> 2);
#pragma unroll
    for (int i = 0; i < 4; ++i) xq[slab * 32 + (4 * (tok & 1) + i) * 4 + (lane & 3)] = make_uint2(limb[i][0], limb[i][1]);
}

}  // namespace df::cuda
