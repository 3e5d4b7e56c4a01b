// Matrix-vector products for T <= 8 tokens (decode, speculative verify), templated on the block
// type; instantiated once per type in the generated quant_<type>.cu.
//
// Memory-bound: every weight byte is read once per call. A group of `warps_per_row` warps
// owns two rows (or, fused gate/up, one row of each matrix) and splits their units across its
// lanes; each lane dequantizes in registers and reuses every activation it loads for both rows
// (halving activation traffic, which would otherwise rival the weight bytes for 2-bit types).
// Partial sums are reduced with shuffles, then across the group's warps in shared memory.
#pragma once

#include <algorithm>

#include "backend/cuda/check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/norm_sum.cuh"
#include "backend/cuda/quant_traits.cuh"

namespace df::cuda {

inline constexpr int kMatvecThreads = 256;
inline constexpr size_t kMatvecMaxStage = 96 * 1024;  // staged activations, bytes per block
inline constexpr size_t kMatvecMaxRingSmem = 200 * 1024;  // a multi-token ring kernel's ring + activations

// Rows a warp group works on together: every activation load serves all of them (4 rows at
// T = 1 halve activation traffic on the shared L1 pipe; more tokens need the registers). In
// fused gate/up mode the rows alternate gate, up of consecutive outputs.
template <int NT>
constexpr int matvec_rows() { return NT == 1 ? 4 : 2; }
// Rows of a group in a kernel: the ring kernels keep 4 at any T (each token's activations are
// loaded once per 4 rows: at T = 8 that is 8 bytes per weight through L1 or shared memory; a
// row's sums do not depend on R).
template <int NT, int kRing>
constexpr int matvec_kernel_rows() { return kRing > 0 ? 4 : matvec_rows<NT>(); }

// Units per lane and row in one chunk: about 96 bytes of raw units per lane and chunk.
template <Type TY, int NT>
constexpr int matvec_unroll() {
    const int u = 96 / static_cast<int>(sizeof(typename Quant<TY>::Raw) * NT * matvec_rows<NT>());
    return u < 1 ? 1 : (u > 8 ? 8 : u);
}

// Occupancy target per kernel (registers are capped to reach it): many resident warps keep many
// loads in flight; T > 1 needs registers for the activations of every token.
// The next chunk is prefetched when the two register buffers stay small (<= 48 registers).
template <Type TY, int NT>
constexpr bool matvec_prefetch() {
    return NT <= 2 && 2 * matvec_rows<NT>() * sizeof(typename Quant<TY>::Raw) * matvec_unroll<TY, NT>() <= 192;
}

template <Type TY, int NT, int kRing = 0>
constexpr int matvec_min_blocks() {
    // A multi-token ring kernel: 4 rows x NT tokens of accumulators and chains (NT = 4 at two
    // blocks per SM fits 128 registers but passes cost 2.59 steps on the 4B against 2.41-2.45).
    if (kRing > 0 && NT > 1) return NT >= 4 ? 1 : 2;
    return NT >= 4 ? 1 : (matvec_prefetch<TY, NT>() && NT == 1 ? 3 : 2);
}

DF_DEV void group_barrier(int id, int threads) { asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads)); }

// Step `xor m` of warp_sum over the first n of a lane's values: with n > 1 the lane keeps one
// half (the upper one where `up`), adds its partner's partial of each kept value to its own and
// moves them to the front; with n <= 1 a plain warp_sum step on v[0]. Every value takes
// warp_sum's tree and order (a lane adds its partner's partial to its own): the same bits.
template <int kN, int n, int m>
DF_DEV void transposed_sum_step(float (&v)[kN], int lane) {
    if constexpr (n > 1) {
        const bool up = lane & m;
#pragma unroll
        for (int i = 0; i < n / 2; ++i) {
            const float send = up ? v[i] : v[i + n / 2];
            const float keep = up ? v[i + n / 2] : v[i];
            v[i] = keep + __shfl_xor_sync(0xffffffffu, send, m);
        }
    } else {
        v[0] += __shfl_xor_sync(0xffffffffu, v[0], m);
    }
}

// Block types whose decode unit is 16 body bytes plus one f16 scale in the split head array
// (Q8_0: half a block; Q4_0, IQ4_NL: a block), loaded as Raw {q[4], d}: the units of the per-warp
// cp.async rings (kRing below).
template <Type TY>
constexpr bool matvec_ring_type() { return TY == Type::Q8_0 || TY == Type::Q4_0 || TY == Type::IQ4_NL; }

// A lane's bytes per unit and row in a ring: the body, then the 4-byte word of the head array that
// holds the unit's scale. Per warp the ring is [kRing][R rows][32 lanes] bodies, then as many words.
inline constexpr int kRingBody = 16, kRingHead = 4;
template <int R>
constexpr size_t matvec_ring_warp_bytes(int ring) { return static_cast<size_t>(ring) * R * 32 * (kRingBody + kRingHead); }
template <int R>
constexpr size_t matvec_ring_bytes(int ring) { return (kMatvecThreads / 32) * matvec_ring_warp_bytes<R>(ring); }

// Persistent warps: a group of `warps_per_row` warps walks row groups (two rows, or the gate and
// up rows of one output) with a grid stride; each row is consumed in chunks of U units per lane,
// and the loads of the next chunk (of this row group or the next) are issued before the current
// chunk is decoded, so every warp keeps weight bytes in flight while it computes.
// kRing > 0 (the ring types' matvec at T = 1, and at T = 2..8 unless DF_CUDA_MATVEC_RING_MULTI=0;
// DF_CUDA_MATVEC_RING): instead of a register double
// buffer, each lane copies its own units of the next kRing chunks into its warp's ring in shared
// memory with cp.async, so bytes in flight hold no registers; a lane reads back only what it
// copied, so no barrier is needed. Same units, order and reductions: the same bits.
template <Type TY, int NT, bool kPair, int kRing = 0>
__global__ void __launch_bounds__(kMatvecThreads, matvec_min_blocks<TY, NT, kRing>()) matvec_kernel(const MatvecArgs a) {
    pdl_trigger();  // pdl_wait() comes after the weight-only prologue
    using Q = Quant<TY>;
    using Raw = typename Q::Raw;
    constexpr int R = matvec_kernel_rows<NT, kRing>();
    constexpr int kOut = kPair ? R / 2 : R;  // outputs per row group
    constexpr int kGroups = Q::kUnit / 8;
    constexpr int kWarps = kMatvecThreads / 32;
    constexpr int U = matvec_unroll<TY, NT>();
    __shared__ __align__(16) unsigned char tab_smem[table_smem_bytes<Q>()];
    // A group's cross-warp sums; the multi-token ring kernels alternate two buffers per row group.
    __shared__ float red[kRing > 0 && NT > 1 ? 2 : 1][kWarps][R * NT];
    extern __shared__ __align__(16) float xs[];  // staged activations (T > 1, or a folded norm)
    constexpr int XS = Q::kUnit + 4;             // a unit's row, padded so consecutive lanes hit distinct banks
    const GridTables* tab = stage_tables<Q>(reinterpret_cast<GridTables*>(tab_smem), a.tables);

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wpr = a.warps_per_row;
    const int groups_per_block = kWarps / wpr;
    const int gw = warp / wpr;                  // group within the block
    const int li = (warp % wpr) * 32 + lane;    // lane within the group
    const int L = wpr * 32;
    const int cols = a.w.cols, rows = a.w.rows;
    const int n_units = cols / Q::kUnit;
    const int chunk_units = U * L;
    const int chunks = (n_units + chunk_units - 1) / chunk_units;
    const int row_groups = (rows + kOut - 1) / kOut;
    const int stride = gridDim.x * groups_per_block;

    // The matrix of row group rg (MatvecArgs::segs): its data, output, first launch row and rows.
    struct Seg {
        const uint8_t* data;
        float* out;
        int row0, rows;
    };
    auto seg_of = [&](int rg) -> Seg {
        if (kPair || a.segs == 0) return {a.w.data, a.out, 0, rows};
        const int r = rg * R;
        const int k = (a.segs > 1 && r >= a.seg_row[1]) + (a.segs > 2 && r >= a.seg_row[2]);
        const int r0 = k == 0 ? 0 : k == 1 ? a.seg_row[1] : a.seg_row[2];
        const int r1 = k == 0 ? a.seg_row[1] : k == 1 ? a.seg_row[2] : a.seg_row[3];
        return {k == 0 ? a.seg_data[0] : k == 1 ? a.seg_data[1] : a.seg_data[2],
                k == 0 ? a.seg_out[0] : k == 1 ? a.seg_out[1] : a.seg_out[2], r0, r1 - r0};
    };
    auto row_base = [&](const Seg& sg, int rg, int r) {
        const int row = kPair ? rg * kOut + r / 2 : rg * R + r - sg.row0;
        const uint8_t* m = (kPair && (r & 1)) ? a.up : sg.data;
        return m + static_cast<size_t>(min(row, sg.rows - 1)) * a.w.row_stride;
    };
    // Lane li visits units li, li + L, li + 2L, ... in this order whatever T or U: a token's sum
    // is bit-identical in a one-token call and in a call of up to 8 tokens.
    auto load_chunk = [&](Raw (&dst)[U][R], int rg, int ch) {
        const Seg sg = seg_of(rg);
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const uint8_t* b = row_base(sg, rg, r);
#pragma unroll
            for (int i = 0; i < U; ++i) {
                const int u = ch * chunk_units + i * L + li;
                if (u < n_units) dst[i][r] = Q::load(b, b + a.w.head_off, u);
            }
        }
    };

    float acc[R][NT];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int t = 0; t < NT; ++t) acc[r][t] = 0.f;

    // Decodes unit u of each row and accumulates its dot with the activations of the unit,
    // token t's at xb + t * xstride (global memory, or the block's shared-memory stage).
    constexpr bool kOneScale = matvec_ring_type<TY>();  // the ring types: one scale per unit
    auto consume_from = [&](const Raw (&raw)[R], const float* xb, size_t xstride) {
        float dot[R][NT];  // the unit's chain so far (kOneScale)
        if constexpr (kRing > 0 && NT > 1) {
            // Verify-sized calls: a group's weights are decoded once for all rows and tokens, and
            // each token's activations are loaded once for all rows (registers: the decoded
            // weights of R rows, one token's 8 activations). Each (row, token) chain takes the
            // same operations in the same order as below: the one-token kernel's bits. Tokens
            // past T compute on token 0's activations (discarded): no branch, so the compiler can
            // interleave every token's chains (a branch per token left the warp waiting on each).
#pragma unroll
            for (int g = 0; g < kGroups; ++g) {
                float w[R][8], s[R];
#pragma unroll
                for (int r = 0; r < R; ++r) s[r] = Q::group(raw[r], g, w[r], tab);
#pragma unroll
                for (int t = 0; t < NT; ++t) {
                    const float4* xp = reinterpret_cast<const float4*>(xb + (t < a.T ? t : 0) * xstride + 8 * g);
                    const float4 lo = xp[0], hi = xp[1];
                    const float xv[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
                    for (int r = 0; r < R; ++r) {
                        float d = kOneScale && g > 0 ? fmaf(w[r][0], xv[0], dot[r][t]) : w[r][0] * xv[0];
#pragma unroll
                        for (int j = 1; j < 8; ++j) d = fmaf(w[r][j], xv[j], d);
                        if (!kOneScale || g == kGroups - 1)
                            acc[r][t] = fmaf(s[r], d, acc[r][t]);
                        else
                            dot[r][t] = d;
                    }
                }
            }
        } else {
#pragma unroll
            for (int g = 0; g < kGroups; ++g) {
                float xv[NT][8];
#pragma unroll
                for (int t = 0; t < NT; ++t) {
                    if (NT == 1 || t < a.T) {  // a one-token kernel has T = 1
                        const float4* xp = reinterpret_cast<const float4*>(xb + t * xstride + 8 * g);
                        const float4 lo = xp[0], hi = xp[1];
                        xv[t][0] = lo.x; xv[t][1] = lo.y; xv[t][2] = lo.z; xv[t][3] = lo.w;
                        xv[t][4] = hi.x; xv[t][5] = hi.y; xv[t][6] = hi.z; xv[t][7] = hi.w;
                    } else {
#pragma unroll
                        for (int j = 0; j < 8; ++j) xv[t][j] = 0.f;
                    }
                }
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    float w[8];
                    const float s = Q::group(raw[r], g, w, tab);
#pragma unroll
                    for (int t = 0; t < NT; ++t) {
                        // One scale for the whole unit: the groups' products form one chain, scaled once.
                        float d = kOneScale && g > 0 ? fmaf(w[0], xv[t][0], dot[r][t]) : w[0] * xv[t][0];
#pragma unroll
                        for (int j = 1; j < 8; ++j) d = fmaf(w[j], xv[t][j], d);
                        if (!kOneScale || g == kGroups - 1)
                            acc[r][t] = fmaf(s, d, acc[r][t]);
                        else
                            dot[r][t] = d;
                    }
                }
            }
        }
    };
    const bool fold = kRing == 0 && NT == 1 && a.norm_x;  // the ring kernels are launched without a fold
    // A multi-token ring kernel's activations, staged whole after its ring (a.stage_x): every
    // token's row of units, each padded as above. From global memory, the T x 4 bytes per column
    // that each row group reads again overflowed L1 and came from L2.
    const bool ring_staged = kRing > 0 && NT > 1 && a.stage_x;
    float* const xring = xs + (kRing > 0 ? matvec_ring_bytes<R>(kRing) / sizeof(float) : 0);
    auto consume = [&](const Raw (&raw)[R], int u) {
        if (fold)
            consume_from(raw, xs + u * XS, 0);
        else if (ring_staged)
            consume_from(raw, xring + u * XS, static_cast<size_t>(n_units) * XS);
        else
            consume_from(raw, a.x + static_cast<size_t>(u) * Q::kUnit, static_cast<size_t>(cols));
    };
    // The folded norm (after pdl_wait, by the whole block): the warps find the sum of squares'
    // group totals (norm_sum.cuh's groups, up to 4 per warp, their loads in flight together),
    // warp 0 adds them, then every thread stages its share of y = (x scale) w, the products of
    // rmsnorm_units_kernel.
    __shared__ float scale;
    __shared__ double gsum[kRmsMaxWarps];
    auto stage_norm = [&] {
        const int groups = rms_warps(cols);
        double part[kRmsMaxWarps / kWarps];
#pragma unroll
        for (int k = 0; k < kRmsMaxWarps / kWarps; ++k) {
            const int gi = warp + kWarps * k;
            part[k] = gi < groups ? rms_lane_sumsq(a.norm_x, cols, gi, lane) : 0.0;
        }
#pragma unroll
        for (int k = 0; k < kRmsMaxWarps / kWarps; ++k) {
            const int gi = warp + kWarps * k;
            const double t = warp_sum(part[k]);
            if (gi < groups && lane == 0) gsum[gi] = t;
        }
        __syncthreads();
        if (warp == 0) {
            const double s = warp_sum(lane < groups ? gsum[lane] : 0.0);
            if (lane == 0) scale = rms_scale(s, cols, a.norm_eps);
        }
        __syncthreads();
        for (int i = threadIdx.x; i < cols / 4; i += blockDim.x) {
            const float4 x4 = __ldg(reinterpret_cast<const float4*>(a.norm_x) + i);
            const float4 w4 = __ldg(reinterpret_cast<const float4*>(a.norm_w) + i);
            const float4 y = make_float4(__fmul_rn(__fmul_rn(x4.x, scale), w4.x), __fmul_rn(__fmul_rn(x4.y, scale), w4.y),
                                         __fmul_rn(__fmul_rn(x4.z, scale), w4.z), __fmul_rn(__fmul_rn(x4.w, scale), w4.w));
            const int e = 4 * i;
            *reinterpret_cast<float4*>(xs + (e / Q::kUnit) * XS + e % Q::kUnit) = y;
            if (blockIdx.x == 0 && a.norm_out) reinterpret_cast<float4*>(a.norm_out)[i] = y;
        }
        __syncthreads();
    };

    // Accumulating calls: each writer lane (lane r * NT + t of the group's first warp) reads its
    // output's old value when the row group starts, so that read's latency passes while the row
    // group's chunks are decoded instead of after the reduction (only the writer stores there).
    // A multi-token ring kernel reduces its R x NT sums transposed (finish): value i ends in the
    // lanes from i << kXShift on, the first of them writes it; elsewhere lane i writes value i.
    constexpr bool kTransposed = kRing > 0 && NT > 1;
    constexpr int kN = R * NT;
    constexpr int kXShift = kN >= 32 ? 0 : kN == 16 ? 1 : 2;
    static_assert(!kTransposed || (kN == 8 || kN == 16 || kN == 32), "transposed sums: 8, 16 or 32 values");
    const int my_value = kTransposed ? lane >> kXShift : lane;
    const bool value_lane = kTransposed ? (lane & ((1 << kXShift) - 1)) == 0 : lane < kN;
    float old = 0.f;
    auto fetch_old = [&](int rg) {
        if (!a.accumulate || kPair || warp % wpr != 0 || !value_lane || rg >= row_groups) return;
        const int r = my_value / NT, t = my_value % NT;
        const Seg sg = seg_of(rg);
        const int row = rg * R + r - sg.row0;
        if (t < a.T && row < sg.rows) old = sg.out[static_cast<size_t>(t) * sg.rows + row];
    };
    int red_round = 0;  // row groups this warp finished: the same for every warp of its group
    auto finish = [&](int rg) {
        float (&rb)[kWarps][R * NT] = red[kTransposed ? red_round++ & 1 : 0];
        if constexpr (kTransposed) {
            // warp_sum's tree for every value (xor 16, 8, ..., each lane adding its partner's
            // partial to its own: the same bits), but at each step a lane keeps half of its values
            // and sends the other half: 31 shuffles for 32 values instead of 160, and one lane
            // per value at the end.
            float v[kN];
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int t = 0; t < NT; ++t) v[r * NT + t] = acc[r][t];
            transposed_sum_step<kN, kN, 16>(v, lane);
            transposed_sum_step<kN, kN / 2, 8>(v, lane);
            transposed_sum_step<kN, kN / 4, 4>(v, lane);
            transposed_sum_step<kN, kN / 8, 2>(v, lane);
            transposed_sum_step<kN, kN / 16, 1>(v, lane);
            float val = v[0];  // value my_value's warp sum
            bool writer = true;
            if (wpr > 1) {
                if (value_lane) rb[warp][my_value] = val;
                // rb alternates with the row groups, so no second barrier: before a warp of the
                // group writes this buffer again, every warp (the writer too) has passed the next
                // row group's barrier.
                group_barrier(1 + gw, L);
                writer = warp % wpr == 0;
                if (writer) {
                    float w = 0.f;
                    for (int k = 0; k < wpr; ++k) w += rb[warp + k][my_value];
                    val = w;
                }
            }
            if (writer) {
                const int r = my_value / NT, t = my_value % NT;
                if constexpr (kPair) {
                    const float upv = __shfl_sync(0xffffffffu, val, ((my_value + NT) << kXShift) & 31);
                    const int o = rg * kOut + r / 2;
                    if (value_lane && t < a.T && (r & 1) == 0 && o < rows) a.out[static_cast<size_t>(t) * rows + o] = silu_f(val) * upv;
                } else {
                    const Seg sg = seg_of(rg);
                    const int row = rg * R + r - sg.row0;
                    if (value_lane && t < a.T && row < sg.rows)
                        sg.out[static_cast<size_t>(t) * sg.rows + row] = a.accumulate ? old + val : val;
                }
            }
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int t = 0; t < NT; ++t) acc[r][t] = 0.f;
        } else {
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int t = 0; t < NT; ++t) acc[r][t] = warp_sum(acc[r][t]);
            bool writer = true;
            if (wpr > 1) {
                if (lane == 0) {
#pragma unroll
                    for (int r = 0; r < R; ++r)
#pragma unroll
                        for (int t = 0; t < NT; ++t) rb[warp][r * NT + t] = acc[r][t];
                }
                group_barrier(1 + gw, L);
                writer = warp % wpr == 0;
                if (writer) {
#pragma unroll
                    for (int r = 0; r < R; ++r)
#pragma unroll
                        for (int t = 0; t < NT; ++t) {
                            float v = 0.f;
                            for (int k = 0; k < wpr; ++k) v += rb[warp + k][r * NT + t];
                            acc[r][t] = v;
                        }
                }
                group_barrier(1 + gw, L);  // rb is rewritten by the next row group
            }
            if (writer) {
                // One lane per output value.
                const Seg sg = seg_of(rg);
#pragma unroll
                for (int r = 0; r < R; ++r)
#pragma unroll
                    for (int t = 0; t < NT; ++t) {
                        if (lane != r * NT + t || t >= a.T) continue;
                        if constexpr (kPair) {
                            const int o = rg * kOut + r / 2;
                            if ((r & 1) == 0 && o < rows) a.out[static_cast<size_t>(t) * rows + o] = silu_f(acc[r][t]) * acc[r + 1][t];
                        } else {
                            const int row = rg * R + r - sg.row0;
                            if (row < sg.rows) sg.out[static_cast<size_t>(t) * sg.rows + row] = a.accumulate ? old + acc[r][t] : acc[r][t];
                        }
                    }
            }
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int t = 0; t < NT; ++t) acc[r][t] = 0.f;
        }
    };

    // Round k gives row group k * stride + gw * gridDim.x + blockIdx.x to group gw of a block:
    // a last, part-full round keeps some groups of every block busy (so of every SM), where
    // block-major numbering left whole blocks idle and others full. Which warp does a row group
    // does not change its sums.
    const int first_rg = gw * gridDim.x + blockIdx.x;
    if constexpr (NT > 1 && kRing == 0) {
        if (a.stage_x) {
            // T > 1: the activations of one chunk of columns are staged in shared memory for all
            // warp groups of the block at once (one L2 read per block instead of one per row
            // pair); the groups walk their row groups and chunks in lockstep. Each unit's row is
            // padded by 4 floats so consecutive lanes hit distinct banks.
            pdl_wait();
            // Round k while any group of the block has a row group (the block-uniform bound keeps
            // the barriers below reached by every thread); numbered as above.
            for (int k = 0; k * stride + static_cast<int>(blockIdx.x) < row_groups; ++k) {
                const int my_rg = k * stride + first_rg;
                const bool live = my_rg < row_groups;
                fetch_old(my_rg);
                for (int c = 0; c < chunks; ++c) {
                    const int u0 = c * chunk_units;
                    __syncthreads();
                    const int per_t = chunk_units * (Q::kUnit / 4);
                    for (int i = threadIdx.x; i < NT * per_t; i += blockDim.x) {
                        const int t = i / per_t, ul = (i % per_t) / (Q::kUnit / 4), q4 = i % (Q::kUnit / 4);
                        const int u = u0 + ul;
                        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
                        if (t < a.T && u < n_units)
                            v = __ldg(reinterpret_cast<const float4*>(a.x + static_cast<size_t>(t) * cols + u * Q::kUnit) + q4);
                        *reinterpret_cast<float4*>(xs + (t * chunk_units + ul) * XS + 4 * q4) = v;
                    }
                    __syncthreads();
                    if (live) {
                        Raw raw[U][R];
                        load_chunk(raw, my_rg, c);
#pragma unroll
                        for (int i = 0; i < U; ++i) {
                            const int ul = i * L + li;
                            if (u0 + ul < n_units)
                                consume_from(raw[i], xs + ul * XS, static_cast<size_t>(chunk_units) * XS);
                        }
                    }
                }
                if (live) finish(my_rg);
            }
            return;
        }
    }
    int rg = first_rg, ch = 0;
    auto step = [&](int& g, int& c) {  // the chunk after chunk c of row group g, for this warp group
        if (++c == chunks) {
            c = 0;
            g += stride;
        }
    };
    auto advance = [&](int& nrg, int& nch) {
        nrg = rg;
        nch = ch;
        step(nrg, nch);
    };
    auto consume_chunk = [&](const Raw (&raw)[U][R]) {
#pragma unroll
        for (int i = 0; i < U; ++i) {
            const int u = ch * chunk_units + i * L + li;
            if (u < n_units) consume(raw[i], u);
        }
    };
    Raw cur[U][R];
    if constexpr (kRing > 0) {
        static_assert(matvec_ring_type<TY>() && U == 1, "the ring path is the matvec of the ring types, a unit per lane and row");
        static_assert(Q::kHead == 2 && Q::kBody * Q::kUnit / Q::kBlock == kRingBody, "a ring unit: 16 body bytes, one f16 scale");
        // The unit's scale is number u * kUnit / kBlock of the row's head array.
        auto scale_index = [](int u) { return u / (Q::kBlock / Q::kUnit); };
        // This lane's slots: body of (slot, row) at ring_b + (slot * R + r) * 32 * kRingBody, head
        // word at ring_h + (slot * R + r) * 32 * kRingHead.
        // (Shared-window addresses, formed once: from generic pointers the compiler re-derived
        // the window base in every iteration.)
        const uint32_t ring = smem_addr(xs) + warp * static_cast<uint32_t>(matvec_ring_warp_bytes<R>(kRing));
        const uint32_t ring_b = ring + lane * kRingBody;
        const uint32_t ring_h = ring + kRing * R * 32 * kRingBody + lane * kRingHead;
        // The copy cursor (qg, qc) walks ahead of the consumer; the start addresses of its row
        // group's rows are set once per row group, so a chunk's copies cost one add per address
        // (the lane's body offset 16 u; its head word's offset past the head array).
        const uint8_t* rowp[R];
        auto set_rows = [&](int g) {
            if (g >= row_groups) return;
            const Seg sg = seg_of(g);
#pragma unroll
            for (int r = 0; r < R; ++r) rowp[r] = row_base(sg, g, r);
        };
        constexpr int kPerBlock = Q::kBlock / Q::kUnit;  // units per block: 2 (Q8_0) or 1
        static_assert(kPerBlock == 1 || kPerBlock == 2, "a ring unit is a block or half of one");
        const uint32_t lane_body = kRingBody * li,
                       lane_head = static_cast<uint32_t>(a.w.head_off) + kRingHead * (scale_index(li) >> 1);
        auto issue = [&](int slot, int g, int c) {  // chunk c of row group g into `slot`
            const int u = c * chunk_units + li;
            if (g < row_groups && u < n_units) {
                // chunk_units is a multiple of 32: the chunk adds whole head words.
                const uint32_t ob = lane_body + kRingBody * c * chunk_units, oh = lane_head + 2 * c * chunk_units / kPerBlock;
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    cp_async<kRingBody>(ring_b + (slot * R + r) * 32 * kRingBody, rowp[r] + ob);
                    // The aligned word of the head array holding the unit's scale (it may
                    // reach 2 bytes past an odd-length array: inside the row's 16-byte padding).
                    cp_async<kRingHead>(ring_h + (slot * R + r) * 32 * kRingHead, rowp[r] + oh);
                }
            }
            cp_async_commit();  // one group per chunk, empty past the end: wait counts stay uniform
        };
        auto step_issue = [&](int& g, int& c) {
            step(g, c);
            if (c == 0) set_rows(g);
        };
        // The sequence of (row group, chunk) this warp group walks; the first kRing requested
        // before pdl_wait (weights only).
        int qg = rg, qc = 0;
        set_rows(qg);
#pragma unroll
        for (int k = 0; k < kRing; ++k) {
            issue(k, qg, qc);
            step_issue(qg, qc);
        }
        pdl_wait();
        if (ring_staged) {
            // Every copy in flight at once (a load-then-store loop waited for each load: ~20-40 us
            // for 100-160 KB); tokens past T are not staged (consume reads token 0's for them).
            // One more cp.async group, waited for here: the ring's wait counts stay as they were.
            constexpr int kQ4 = Q::kUnit / 4;  // float4s per unit
            const int per_t = n_units * kQ4;
            const uint32_t xr = smem_addr(xring);
            for (int i = threadIdx.x; i < a.T * per_t; i += blockDim.x) {
                const int t = i / per_t, ul = (i % per_t) / kQ4, q4 = i % kQ4;
                cp_async<16>(xr + sizeof(float) * ((t * n_units + ul) * XS + 4 * q4),
                             a.x + static_cast<size_t>(t) * cols + ul * Q::kUnit + 4 * q4);
            }
            cp_async_commit();
            cp_async_wait<0>();
            __syncthreads();
        }
        for (int k = 0; rg < row_groups; ++k) {
            const int slot = k % kRing;
            if (ch == 0) fetch_old(rg);
            cp_async_wait<kRing - 1>();  // this lane's copies of chunk k have landed
            const int u = ch * chunk_units + li;
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const uint4 body = lds128_at(ring_b + (slot * R + r) * 32 * kRingBody);
                const uint32_t h = lds32_at(ring_h + (slot * R + r) * 32 * kRingHead);
                cur[0][r].q[0] = body.x;
                cur[0][r].q[1] = body.y;
                cur[0][r].q[2] = body.z;
                cur[0][r].q[3] = body.w;
                cur[0][r].d = f16_bits_to_f32((scale_index(u) & 1) ? h >> 16 : h);  // the unit's block's scale
            }
            issue(slot, qg, qc);  // the slot is read: chunk k + kRing goes there
            step_issue(qg, qc);
            if (u < n_units) consume(cur[0], u);
            int nrg, nch;
            advance(nrg, nch);
            if (nch == 0) finish(rg);
            rg = nrg;
            ch = nch;
        }
        cp_async_wait<0>();  // no copy outlives the block
    } else if constexpr (matvec_prefetch<TY, NT>()) {
        Raw nxt[U][R];
        if (rg < row_groups) load_chunk(cur, rg, 0);
        pdl_wait();  // the first weights are in flight; activations and outputs from here
        if (fold) stage_norm();
        while (rg < row_groups) {
            if (ch == 0) fetch_old(rg);
            int nrg, nch;
            advance(nrg, nch);
            if (nrg < row_groups) load_chunk(nxt, nrg, nch);
            consume_chunk(cur);
            if (nch == 0) finish(rg);
            rg = nrg;
            ch = nch;
#pragma unroll
            for (int i = 0; i < U; ++i)
#pragma unroll
                for (int r = 0; r < R; ++r) cur[i][r] = nxt[i][r];
        }
    } else {
        pdl_wait();
        if (fold) stage_norm();
        while (rg < row_groups) {
            if (ch == 0) fetch_old(rg);
            load_chunk(cur, rg, ch);
            consume_chunk(cur);
            int nrg, nch;
            advance(nrg, nch);
            if (nch == 0) finish(rg);
            rg = nrg;
            ch = nch;
        }
    }
}

// Shared memory of the staged-activation path (T > 1), or 0 when it does not fit.
template <Type TY, int NT>
size_t matvec_stage_bytes(int warps_per_row) {
    if (NT == 1) return 0;
    const size_t b = sizeof(float) * NT * matvec_unroll<TY, NT>() * 32 * warps_per_row * (Quant<TY>::kUnit + 4);
    return b <= kMatvecMaxStage ? b : 0;
}

// Shared memory of a folded norm's activations (T = 1): every unit of the row, padded.
inline size_t matvec_norm_bytes(int cols, int unit) { return sizeof(float) * (cols / unit) * (unit + 4); }

template <Type TY, int NT, bool kPair, int kRing = 0>
void matvec_launch_kernel(const MatvecArgs& a_in, cudaStream_t s) {
    MatvecArgs a = a_in;
    constexpr int R = matvec_kernel_rows<NT, kRing>();
    size_t smem = kRing > 0 ? 0 : matvec_stage_bytes<TY, NT>(a.warps_per_row);
    a.stage_x = smem > 0;
    if (NT == 1 && a.norm_x) smem = matvec_norm_bytes(a.w.cols, Quant<TY>::kUnit);
    if (kRing > 0) {
        smem = matvec_ring_bytes<R>(kRing);
        const size_t stage = sizeof(float) * NT * (a.w.cols / Quant<TY>::kUnit) * (Quant<TY>::kUnit + 4);
        // Staged from 3 tokens (at 2 the staging's wait cost more than L1 misses: 1.77 vs 1.52
        // steps per pass on the 4B).
        a.stage_x = NT >= 4 && matvec_ring_multi() == 2 && smem + stage <= kMatvecMaxRingSmem;
        if (a.stage_x) smem += stage;
    }
    // Persistent grid: as many blocks as stay resident (per shared-memory size, cached: ops are
    // issued from one thread), fewer when there is less work.
    static size_t cached_smem[2] = {~size_t{0}, ~size_t{0}};
    static int cached_resident[2] = {0, 0};
    int slot = cached_smem[0] == smem ? 0 : cached_smem[1] == smem ? 1 : -1;
    if (slot < 0) {
        int dev = 0, sms = 0, per_sm = 0;
        DF_CUDA_CHECK(cudaFuncSetAttribute(matvec_kernel<TY, NT, kPair, kRing>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(kRing > 0 && NT > 1 ? kMatvecMaxRingSmem : kMatvecMaxStage)));
        DF_CUDA_CHECK(cudaGetDevice(&dev));
        DF_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        DF_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, matvec_kernel<TY, NT, kPair, kRing>, kMatvecThreads, smem));
        slot = cached_smem[0] == ~size_t{0} ? 0 : 1;  // the second size replaces itself
        cached_smem[slot] = smem;
        cached_resident[slot] = sms * std::max(per_sm, 1);
    }
    const int resident = cached_resident[slot];
    const int groups_per_block = (kMatvecThreads / 32) / a.warps_per_row;
    constexpr int kOut = kPair ? R / 2 : R;
    const int row_groups = (a.w.rows + kOut - 1) / kOut;
    const int blocks = std::min(resident, (row_groups + groups_per_block - 1) / groups_per_block);
    launch(matvec_kernel<TY, NT, kPair, kRing>, blocks, kMatvecThreads, smem, s, a);
}

template <Type TY, int NT>
void matvec_launch_nt(const MatvecArgs& a, cudaStream_t s) {
    if constexpr (matvec_ring_type<TY>()) {
        if (!a.norm_x && (NT == 1 || matvec_ring_multi() > 0)) {
            switch (matvec_ring()) {
                case 2: a.up ? matvec_launch_kernel<TY, NT, true, 2>(a, s) : matvec_launch_kernel<TY, NT, false, 2>(a, s); return;
                case 3: a.up ? matvec_launch_kernel<TY, NT, true, 3>(a, s) : matvec_launch_kernel<TY, NT, false, 3>(a, s); return;
                case 4: a.up ? matvec_launch_kernel<TY, NT, true, 4>(a, s) : matvec_launch_kernel<TY, NT, false, 4>(a, s); return;
                default: break;
            }
        }
    }
    if (a.up)
        matvec_launch_kernel<TY, NT, true>(a, s);
    else
        matvec_launch_kernel<TY, NT, false>(a, s);
}

template <Type TY>
void matvec_launch(const MatvecArgs& a, cudaStream_t s) {
    DF_CUDA_REQUIRE(a.T >= 1 && a.T <= 8, "matvec: T must be in 1..8");
    DF_CUDA_REQUIRE(a.w.cols % Quant<TY>::kUnit == 0, "matvec: cols must be a multiple of the decode unit");
    DF_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(a.x) % 16 == 0, "matvec: x must be 16-byte aligned");
    DF_CUDA_REQUIRE(!a.up || !a.accumulate, "matvec: fused gate/up does not accumulate");
    DF_CUDA_REQUIRE(a.segs == 0 || (!a.up && a.segs <= kMatvecSegs && a.seg_row[0] == 0 && a.seg_row[a.segs] == a.w.rows),
                    "matvec: bad matrix segments");
    for (int k = 1; k < a.segs; ++k)
        DF_CUDA_REQUIRE(a.seg_row[k] % 4 == 0 && a.seg_row[k] > a.seg_row[k - 1], "matvec: segments must start at multiples of 4 rows");
    DF_CUDA_REQUIRE(!a.norm_x || (a.T == 1 && matvec_can_fold_norm(a.w.cols, Quant<TY>::kUnit)),
                    "matvec: a folded norm needs T = 1 and a row of at most 64 units of 256");
    if (a.T == 1)
        matvec_launch_nt<TY, 1>(a, s);
    else if (a.T == 2)
        matvec_launch_nt<TY, 2>(a, s);
    else if (a.T <= 4)
        matvec_launch_nt<TY, 4>(a, s);
    else
        matvec_launch_nt<TY, 8>(a, s);
}

// ---- embedding rows ----------------------------------------------------------------------------

template <Type TY>
__global__ void __launch_bounds__(128) embed_kernel(const EmbedArgs a) {
    pdl_begin();
    using Q = Quant<TY>;
    __shared__ __align__(16) unsigned char tab_smem[table_smem_bytes<Q>()];
    const GridTables* tab = stage_tables<Q>(reinterpret_cast<GridTables*>(tab_smem), a.tables);
    const int t = blockIdx.y;
    const int u = blockIdx.x * blockDim.x + threadIdx.x;
    const int n_units = a.w.cols / Q::kUnit;
    if (u >= n_units) return;
    const int id = a.tokens[t];
    float4* o = reinterpret_cast<float4*>(a.out + static_cast<size_t>(t) * a.w.cols + static_cast<size_t>(u) * Q::kUnit);
    if (id < 0 || id >= a.w.rows) {
#pragma unroll
        for (int i = 0; i < Q::kUnit / 4; ++i) o[i] = make_float4(0.f, 0.f, 0.f, 0.f);
        return;
    }
    const uint8_t* base = a.w.data + static_cast<size_t>(id) * a.w.row_stride;
    const typename Q::Raw raw = Q::load(base, base + a.w.head_off, u);
#pragma unroll
    for (int g = 0; g < Q::kUnit / 8; ++g) {
        float w[8];
        const float sc = Q::group(raw, g, w, tab);
        o[2 * g] = make_float4(w[0] * sc, w[1] * sc, w[2] * sc, w[3] * sc);
        o[2 * g + 1] = make_float4(w[4] * sc, w[5] * sc, w[6] * sc, w[7] * sc);
    }
}

template <Type TY>
void embed_launch(const EmbedArgs& a, cudaStream_t s) {
    if (a.T <= 0) return;
    DF_CUDA_REQUIRE(a.w.cols % Quant<TY>::kUnit == 0, "embed: cols must be a multiple of the decode unit");
    DF_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(a.out) % 16 == 0, "embed: out must be 16-byte aligned");
    const int n_units = a.w.cols / Quant<TY>::kUnit;
    const dim3 grid((n_units + 127) / 128, a.T);
    launch_after_all(embed_kernel<TY>, grid, 128, 0, s, a);  // a forward's first kernel
}

}  // namespace df::cuda
