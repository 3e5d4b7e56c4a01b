// The readers of a deferred imma launch's output (ImmaArgs::defer, kernels.h's ImmaDeferred):
// the conversion for the next imma matmul (act_quant.cu) and the RMSNorm after an accumulating
// one (norm.cu) add up the tiles that several warps shared as they load them.
#pragma once

#include "backend/cuda/act_quant.cuh"
#include "backend/cuda/imma.cuh"

namespace df::cuda {

// A lane's 8 rows e0 .. e0 + 7 of token tok: they lie in one 16-row tile. A tile one warp
// covered is read as written (whole: true); a shared one is summed from its contributors' slots
// in their order (the fix-up's order), then silu(gate) * up (d.pair), added to the rows' old
// values (an accumulating launch: d.add) or taken as they are.
// kKind: what the caller knows d to be, so that the code of the other cases is left out (its
// registers made the GDN step spill; the norm's and the conversion's code size costs them
// instruction-cache misses): kDeferAny, kDeferValues (one matrix's values: !d.pair, !d.add),
// kDeferAdd (one matrix added to its old values: !d.pair, d.add), kDeferPair (d.pair).
inline constexpr int kDeferAny = 0, kDeferValues = 1, kDeferAdd = 2, kDeferPair = 3;
template <int kKind = kDeferAny>
DF_DEV void deferred_rows(const ImmaDeferred& d, int tok, int e0, float (&v)[8], bool& whole) {
    const bool pair = kKind == kDeferPair || (kKind == kDeferAny && d.pair);
    const bool add = kKind == kDeferAdd || (kKind == kDeferAny && d.add);
    const int tile = e0 >> 4, r0 = e0 & 15;
    const uint32_t upt = static_cast<uint32_t>(d.cols / kImmaUnit);
    const uint32_t units = static_cast<uint32_t>((d.rows + 15) / 16) * upt;
    const ImmaSplit split{units, min(static_cast<uint32_t>(d.warps), units)};
    const uint32_t first = static_cast<uint32_t>(tile) * upt;
    const uint32_t c0 = split.warp_of(first), c1 = split.warp_of(first + upt - 1);
    whole = c0 == c1;
    const float* row = d.out + static_cast<size_t>(tok) * d.rows + e0;
    if (whole) {
        load8<true>(row, v);
        return;
    }
    // The parts are loaded a round at a time and added in contributor order: 4 contributors' gate
    // and up (pair), else 8 contributors' sums; one dependent trip to L2 per round, where a
    // loop over the contributors took one each (down's 68-unit tiles have ~8).
    const auto part = [&](uint32_t c) {
        const int slot = c == c0 && split.start(c0) < first ? 1 : 0;  // slot 1: c's last tile
        return reinterpret_cast<const float4*>(d.partial + (static_cast<size_t>(c) * 2 + slot) * ImmaDeferred::kSlotFloats +
                                               tok * 16 + r0);
    };
    float res[8];
    if (!pair && add) load8<true>(row, res);
    float gs[8] = {}, us[8] = {};
    const uint32_t per = pair ? 4 : 8;
    for (uint32_t base = c0; base <= c1; base += per) {
        float4 a[4][2], b[4][2];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const uint32_t ca = base + k, cb = pair ? ca : base + 4 + k;
            if (ca <= c1) {
                const float4* q = part(ca);
                a[k][0] = __ldcg(q);
                a[k][1] = __ldcg(q + 1);
            }
            if (cb <= c1) {
                const float4* q = part(cb) + (pair ? 8 * 16 / 4 : 0);
                b[k][0] = __ldcg(q);
                b[k][1] = __ldcg(q + 1);
            }
        }
        const auto sum_into = [](float(&s)[8], const float4(&x)[2]) {
            s[0] += x[0].x, s[1] += x[0].y, s[2] += x[0].z, s[3] += x[0].w;
            s[4] += x[1].x, s[5] += x[1].y, s[6] += x[1].z, s[7] += x[1].w;
        };
#pragma unroll
        for (int k = 0; k < 4; ++k)
            if (base + k <= c1) {
                sum_into(gs, a[k]);
                if (pair) sum_into(us, b[k]);
            }
        if (!pair)
#pragma unroll
            for (int k = 0; k < 4; ++k)
                if (base + 4 + k <= c1) sum_into(gs, b[k]);
    }
    if (pair) {
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = silu_f(gs[j]) * us[j];
    } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = add ? res[j] + gs[j] : gs[j];
    }
}

}  // namespace df::cuda
