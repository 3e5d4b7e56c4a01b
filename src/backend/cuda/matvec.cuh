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
#include "backend/cuda/quant_traits.cuh"

namespace df::cuda {

inline constexpr int kMatvecThreads = 256;

// Units per lane and row in one chunk: the current chunk and the prefetched next one hold
// 2 * U * R raw units in registers, about 48 bytes per unit slot at T = 1.
template <Type TY, int NT>
constexpr int matvec_unroll() {
    const int u = 48 / static_cast<int>(sizeof(typename Quant<TY>::Raw) * NT);
    return u < 1 ? 1 : (u > 8 ? 8 : u);
}

// Occupancy target per kernel (registers are capped to reach it): many resident warps keep many
// loads in flight; T > 1 needs registers for the activations of every token.
// The next chunk is prefetched when the two register buffers stay small (<= 48 registers).
template <Type TY, int NT>
constexpr bool matvec_prefetch() {
    return NT <= 2 && 4 * sizeof(typename Quant<TY>::Raw) * matvec_unroll<TY, NT>() <= 192;
}

template <Type TY, int NT>
constexpr int matvec_min_blocks() { return NT >= 4 ? 1 : (matvec_prefetch<TY, NT>() && NT == 1 ? 3 : 2); }

DF_DEV void group_barrier(int id, int threads) { asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads)); }

// Persistent warps: a group of `warps_per_row` warps walks row groups (two rows, or the gate and
// up rows of one output) with a grid stride; each row is consumed in chunks of U units per lane,
// and the loads of the next chunk (of this row group or the next) are issued before the current
// chunk is decoded, so every warp keeps weight bytes in flight while it computes.
template <Type TY, int NT, bool kPair>
__global__ void __launch_bounds__(kMatvecThreads, matvec_min_blocks<TY, NT>()) matvec_kernel(const MatvecArgs a) {
    using Q = Quant<TY>;
    using Raw = typename Q::Raw;
    constexpr int R = 2;       // rows per group
    constexpr int kGroups = Q::kUnit / 8;
    constexpr int kWarps = kMatvecThreads / 32;
    constexpr int U = matvec_unroll<TY, NT>();
    __shared__ __align__(16) unsigned char tab_smem[table_smem_bytes<Q>()];
    __shared__ float red[kWarps][R * NT];
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
    const int row_groups = kPair ? rows : (rows + 1) / 2;
    const int stride = gridDim.x * groups_per_block;

    auto row_base = [&](int rg, int r) {
        const int row = kPair ? rg : min(2 * rg + r, rows - 1);
        const uint8_t* m = (kPair && r == 1) ? a.up : a.w.data;
        return m + static_cast<size_t>(min(row, rows - 1)) * a.w.row_stride;
    };
    // Lane li visits units li, li + L, li + 2L, ... in this order whatever T or U: a token's sum
    // is bit-identical in a one-token call and in a call of up to 8 tokens.
    auto load_chunk = [&](Raw (&dst)[U][R], int rg, int ch) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const uint8_t* b = row_base(rg, r);
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

    auto consume = [&](const Raw (&raw)[R], int u) {
#pragma unroll
        for (int g = 0; g < kGroups; ++g) {
            const int col = u * Q::kUnit + 8 * g;
            float xv[NT][8];
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                if (t < a.T) {
                    const float4* xp = reinterpret_cast<const float4*>(a.x + static_cast<size_t>(t) * cols + col);
                    const float4 lo = __ldg(xp), hi = __ldg(xp + 1);
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
                    float d = w[0] * xv[t][0];
#pragma unroll
                    for (int j = 1; j < 8; ++j) d = fmaf(w[j], xv[t][j], d);
                    acc[r][t] = fmaf(s, d, acc[r][t]);
                }
            }
        }
    };

    auto finish = [&](int rg) {
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
                    for (int t = 0; t < NT; ++t) red[warp][r * NT + t] = acc[r][t];
            }
            group_barrier(1 + gw, L);
            writer = warp % wpr == 0;
            if (writer) {
#pragma unroll
                for (int r = 0; r < R; ++r)
#pragma unroll
                    for (int t = 0; t < NT; ++t) {
                        float v = 0.f;
                        for (int k = 0; k < wpr; ++k) v += red[warp + k][r * NT + t];
                        acc[r][t] = v;
                    }
            }
            group_barrier(1 + gw, L);  // red is rewritten by the next row group
        }
        if (writer) {
            // One lane per output value.
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int t = 0; t < NT; ++t) {
                    if (lane != r * NT + t || t >= a.T) continue;
                    if constexpr (kPair) {
                        if (r == 0) a.out[static_cast<size_t>(t) * rows + rg] = silu_f(acc[0][t]) * acc[1][t];
                    } else {
                        const int row = 2 * rg + r;
                        if (row < rows) {
                            float* o = a.out + static_cast<size_t>(t) * rows + row;
                            *o = a.accumulate ? *o + acc[r][t] : acc[r][t];
                        }
                    }
                }
        }
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int t = 0; t < NT; ++t) acc[r][t] = 0.f;
    };

    int rg = blockIdx.x * groups_per_block + gw, ch = 0;
    auto advance = [&](int& nrg, int& nch) {
        nrg = rg;
        nch = ch + 1;
        if (nch == chunks) {
            nrg = rg + stride;
            nch = 0;
        }
    };
    auto consume_chunk = [&](const Raw (&raw)[U][R]) {
#pragma unroll
        for (int i = 0; i < U; ++i) {
            const int u = ch * chunk_units + i * L + li;
            if (u < n_units) consume(raw[i], u);
        }
    };
    Raw cur[U][R];
    if constexpr (matvec_prefetch<TY, NT>()) {
        Raw nxt[U][R];
        if (rg < row_groups) load_chunk(cur, rg, 0);
        while (rg < row_groups) {
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
        while (rg < row_groups) {
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

template <Type TY, int NT, bool kPair>
void matvec_launch_kernel(const MatvecArgs& a, cudaStream_t s) {
    // Persistent grid: as many blocks as stay resident, fewer when there is less work.
    static const int resident = [] {
        int dev = 0, sms = 0, per_sm = 0;
        DF_CUDA_CHECK(cudaGetDevice(&dev));
        DF_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        DF_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, matvec_kernel<TY, NT, kPair>, kMatvecThreads, 0));
        return sms * std::max(per_sm, 1);
    }();
    const int groups_per_block = (kMatvecThreads / 32) / a.warps_per_row;
    const int row_groups = kPair ? a.w.rows : (a.w.rows + 1) / 2;
    const int blocks = std::min(resident, (row_groups + groups_per_block - 1) / groups_per_block);
    matvec_kernel<TY, NT, kPair><<<blocks, kMatvecThreads, 0, s>>>(a);
    DF_CUDA_LAUNCH_CHECK();
}

template <Type TY, int NT>
void matvec_launch_nt(const MatvecArgs& a, cudaStream_t s) {
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
    embed_kernel<TY><<<grid, 128, 0, s>>>(a);
    DF_CUDA_LAUNCH_CHECK();
}

}  // namespace df::cuda
