// Matrix-vector products for T <= 8 tokens (decode, speculative verify), templated on the block
// type; instantiated once per type in the generated quant_<type>.cu.
//
// Memory-bound: every weight byte is read once per call. A group of `warps_per_row` warps
// owns two rows (or, fused gate/up, one row of each matrix) and splits their units across its
// lanes; each lane dequantizes in registers and reuses every activation it loads for both rows
// (halving activation traffic, which would otherwise rival the weight bytes for 2-bit types).
// Partial sums are reduced with shuffles, then across the group's warps in shared memory.
#pragma once

#include "backend/cuda/check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/quant_traits.cuh"

namespace df::cuda {

inline constexpr int kMatvecThreads = 256;

// Units per lane and row loaded ahead of use: ~128 bytes of raw registers per row at T = 1.
template <Type TY, int NT>
constexpr int matvec_unroll() {
    const int u = 128 / static_cast<int>(sizeof(typename Quant<TY>::Raw) * NT);
    return u < 1 ? 1 : (u > 8 ? 8 : u);
}

template <Type TY, int NT, bool kPair>
__global__ void __launch_bounds__(kMatvecThreads) matvec_kernel(const MatvecArgs a) {
    using Q = Quant<TY>;
    constexpr int R = 2;       // rows per group
    constexpr int kGroups = Q::kUnit / 8;
    constexpr int kWarps = kMatvecThreads / 32;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wpr = a.warps_per_row;
    const int groups_per_block = kWarps / wpr;
    const int rg = blockIdx.x * groups_per_block + warp / wpr;  // row group
    const int li = (warp % wpr) * 32 + lane;
    const int L = wpr * 32;
    const int cols = a.w.cols, rows = a.w.rows;
    const int n_units = cols / Q::kUnit;

    const uint8_t* base[R];
    int row[R];
    if constexpr (kPair) {
        row[0] = row[1] = rg;
        const size_t off = static_cast<size_t>(min(rg, rows - 1)) * a.w.row_stride;
        base[0] = a.w.data + off;
        base[1] = a.up + off;
    } else {
#pragma unroll
        for (int r = 0; r < R; ++r) {
            row[r] = 2 * rg + r;
            base[r] = a.w.data + static_cast<size_t>(min(row[r], rows - 1)) * a.w.row_stride;
        }
    }

    float acc[R][NT];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int t = 0; t < NT; ++t) acc[r][t] = 0.f;

    auto consume = [&](const typename Q::Raw (&raw)[R], int u) {
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
                const float s = Q::group(raw[r], g, w, a.tables);
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

    // U units per lane per row in flight: all their loads are issued before the first is
    // consumed (~256 bytes per lane, fewer units when more tokens make each one costlier).
    // A lane always visits its units in the same order, whatever T or U, so every token's sum
    // is bit-identical to the one-token result (batch invariance for speculative verify).
    constexpr int U = matvec_unroll<TY, NT>();
    for (int u0 = li; u0 < n_units; u0 += U * L) {
        typename Q::Raw raw[U][R];
#pragma unroll
        for (int i = 0; i < U; ++i) {
            const int u = u0 + i * L;
            if (u < n_units) {
#pragma unroll
                for (int r = 0; r < R; ++r) raw[i][r] = Q::load(base[r], base[r] + a.w.head_off, u);
            }
        }
#pragma unroll
        for (int i = 0; i < U; ++i) {
            const int u = u0 + i * L;
            if (u < n_units) consume(raw[i], u);
        }
    }

#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int t = 0; t < NT; ++t) acc[r][t] = warp_sum(acc[r][t]);

    __shared__ float red[kWarps][R * NT];
    if (wpr > 1) {
        if (lane == 0) {
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int t = 0; t < NT; ++t) red[warp][r * NT + t] = acc[r][t];
        }
        __syncthreads();
        if (warp % wpr != 0) return;
        const int w0 = warp;
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                float v = 0.f;
                for (int k = 0; k < wpr; ++k) v += red[w0 + k][r * NT + t];
                acc[r][t] = v;
            }
    }
    // One lane per output value.
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            if (lane != r * NT + t || t >= a.T) continue;
            if constexpr (kPair) {
                if (r == 0 && rg < rows) {
                    float* o = a.out + static_cast<size_t>(t) * rows + rg;
                    *o = silu_f(acc[0][t]) * acc[1][t];
                }
            } else {
                if (row[r] < rows) {
                    float* o = a.out + static_cast<size_t>(t) * rows + row[r];
                    *o = a.accumulate ? *o + acc[r][t] : acc[r][t];
                }
            }
        }
}

template <Type TY, int NT>
void matvec_launch_nt(const MatvecArgs& a, cudaStream_t s) {
    const int groups_per_block = (kMatvecThreads / 32) / a.warps_per_row;
    const int row_groups = a.up ? a.w.rows : (a.w.rows + 1) / 2;
    const dim3 grid((row_groups + groups_per_block - 1) / groups_per_block);
    if (a.up)
        matvec_kernel<TY, NT, true><<<grid, kMatvecThreads, 0, s>>>(a);
    else
        matvec_kernel<TY, NT, false><<<grid, kMatvecThreads, 0, s>>>(a);
    DF_CUDA_LAUNCH_CHECK();
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
        const float sc = Q::group(raw, g, w, a.tables);
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
