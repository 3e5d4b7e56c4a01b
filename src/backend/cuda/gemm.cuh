// Tiled GEMM for prefill (T > 8), templated on the block type; tensor cores (mma.sync bf16,
// f32 accumulation) with the weight tile dequantized by the loader.
//
// A block computes 128 weight rows x 64 tokens, stepping K by 64. Each K step: raw weight units
// and activations for the next step are loaded into registers while the tensor cores work on
// the current one; then they are dequantized / converted to bf16 into shared memory.
// Precision: with `split`, every operand v is held as hi = bf16(v) and lo = bf16(v - hi) and
// the tile product is hi*hi + hi*lo + lo*hi (error ~2^-16 relative per product, f32-like);
// without, one bf16 product (error ~2^-8), for callers that accept rounded activations.
#pragma once

#include <cuda_bf16.h>

#include "backend/cuda/check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/quant_traits.cuh"

namespace df::cuda {

inline constexpr int kGemmBM = 128, kGemmBN = 64, kGemmBK = 64, kGemmThreads = 256;
inline constexpr int kGemmLd = kGemmBK + 8;  // smem row stride (bf16): conflict-free ldmatrix

template <bool kSplit>
constexpr size_t gemm_smem_bytes() {
    return static_cast<size_t>(kSplit ? 2 : 1) * (kGemmBM + kGemmBN) * kGemmLd * sizeof(__nv_bfloat16);
}

// Packs v[0..7] as bf16 hi (and lo = v - hi) into two 16-byte shared-memory stores.
template <bool kSplit>
DF_DEV void store_split8(const float (&v)[8], __nv_bfloat16* hi, __nv_bfloat16* lo) {
    uint32_t h[4], l[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const __nv_bfloat162 hv = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
        h[i] = *reinterpret_cast<const uint32_t*>(&hv);
        if constexpr (kSplit) {
            const float2 hf = __bfloat1622float2(hv);
            const __nv_bfloat162 lv = __floats2bfloat162_rn(v[2 * i] - hf.x, v[2 * i + 1] - hf.y);
            l[i] = *reinterpret_cast<const uint32_t*>(&lv);
        }
    }
    *reinterpret_cast<uint4*>(hi) = make_uint4(h[0], h[1], h[2], h[3]);
    if constexpr (kSplit) *reinterpret_cast<uint4*>(lo) = make_uint4(l[0], l[1], l[2], l[3]);
}

// The weight elements of one thread per K step: 32 consecutive columns of one row, i.e. 4 groups
// of 8. kUnit >= 32: one raw unit; kUnit == 8 (float types): four.
template <Type TY>
struct GemmALoad {
    using Q = Quant<TY>;
    static constexpr int kRaws = Q::kUnit >= 32 ? 1 : 32 / Q::kUnit;
    typename Q::Raw raw[kRaws];
};

// Groups G0 .. G0+n-1 of one raw unit into v[i0 ..]: 4 groups (kUnit >= 32) or all kUnit/8.
template <Type TY, int G0>
DF_DEV void gemm_decode_groups(const typename Quant<TY>::Raw& raw, int i0, float (&v)[4][8],
                               const GridTables* t) {
#pragma unroll
    for (int i = 0; i < (Quant<TY>::kUnit >= 32 ? 4 : Quant<TY>::kUnit / 8); ++i) {
        const float sc = Quant<TY>::group(raw, G0 + i, v[i0 + i], t);
#pragma unroll
        for (int j = 0; j < 8; ++j) v[i0 + i][j] *= sc;
    }
}

template <Type TY, bool kSplit>
__global__ void __launch_bounds__(kGemmThreads) gemm_kernel(const GemmArgs a) {
    pdl_begin();
    using Q = Quant<TY>;
    extern __shared__ __align__(16) unsigned char gemm_smem[];
    __shared__ __align__(16) unsigned char tab_smem[table_smem_bytes<Q>()];
    const GridTables* tab = stage_tables<Q>(reinterpret_cast<GridTables*>(tab_smem), a.tables);
    auto* a_hi = reinterpret_cast<__nv_bfloat16*>(gemm_smem);
    auto* b_hi = a_hi + kGemmBM * kGemmLd;
    auto* a_lo = b_hi + kGemmBN * kGemmLd;   // only with kSplit
    auto* b_lo = a_lo + kGemmBM * kGemmLd;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int rows = a.w.rows, cols = a.w.cols, T = a.T;
    const int m0 = blockIdx.x * kGemmBM, n0 = blockIdx.y * kGemmBN;

    // Loader roles. A: row (warp/2)*32 + lane, column part (warp & 1) * 32 of the K step.
    const int a_row = (warp >> 1) * 32 + lane, a_part = warp & 1;
    const uint8_t* a_base = a.w.data + static_cast<size_t>(min(m0 + a_row, rows - 1)) * a.w.row_stride;
    // B: token tid/4, 16 columns at (tid%4)*16.
    const int b_tok = tid >> 2, b_col = (tid & 3) * 16;
    const bool b_ok = n0 + b_tok < T;
    const float* b_base = a.x + static_cast<size_t>(min(n0 + b_tok, T - 1)) * cols;

    GemmALoad<TY> al;
    float4 bl[4];
    auto fetch = [&](int k0) {
        const int c0 = k0 + a_part * 32;
        if (c0 < cols) {
            if constexpr (Q::kUnit >= 32) {
                al.raw[0] = Q::load(a_base, a_base + a.w.head_off, c0 / Q::kUnit);
            } else {
#pragma unroll
                for (int i = 0; i < GemmALoad<TY>::kRaws; ++i)
                    if (c0 + i * Q::kUnit < cols) al.raw[i] = Q::load(a_base, a_base + a.w.head_off, c0 / Q::kUnit + i);
            }
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int c = k0 + b_col + 4 * i;
            bl[i] = (b_ok && c < cols) ? __ldg(reinterpret_cast<const float4*>(b_base + c)) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
    };
    auto stage = [&](int k0) {
        const int c0 = k0 + a_part * 32;
        float v[4][8];
        if constexpr (Q::kUnit >= 32) {
            const int g0 = (c0 % Q::kUnit) / 8;  // warp-uniform; 0 when kUnit == 32
            if (g0 == 0) gemm_decode_groups<TY, 0>(al.raw[0], 0, v, tab);
            if constexpr (Q::kUnit >= 64) {
                if (g0 == 4) gemm_decode_groups<TY, 4>(al.raw[0], 0, v, tab);
            }
            if constexpr (Q::kUnit >= 128) {
                if (g0 == 8) gemm_decode_groups<TY, 8>(al.raw[0], 0, v, tab);
                if (g0 == 12) gemm_decode_groups<TY, 12>(al.raw[0], 0, v, tab);
            }
        } else {
#pragma unroll
            for (int i = 0; i < GemmALoad<TY>::kRaws; ++i) gemm_decode_groups<TY, 0>(al.raw[i], i * (Q::kUnit / 8), v, tab);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            if (c0 + 8 * i >= cols) {
#pragma unroll
                for (int j = 0; j < 8; ++j) v[i][j] = 0.f;
            }
            const int off = a_row * kGemmLd + a_part * 32 + 8 * i;
            store_split8<kSplit>(v[i], a_hi + off, a_lo + off);
        }
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const float v8[8] = {bl[2 * i].x, bl[2 * i].y, bl[2 * i].z, bl[2 * i].w,
                                 bl[2 * i + 1].x, bl[2 * i + 1].y, bl[2 * i + 1].z, bl[2 * i + 1].w};
            const int off = b_tok * kGemmLd + b_col + 8 * i;
            store_split8<kSplit>(v8, b_hi + off, b_lo + off);
        }
    };

    // Compute roles: warp tile 32 rows x 32 tokens.
    const int wm = (warp & 3) * 32, wn = (warp >> 2) * 32;
    float acc[2][4][4] = {};

    fetch(0);
    for (int k0 = 0; k0 < cols; k0 += kGemmBK) {
        __syncthreads();  // the previous step's fragments are read
        stage(k0);
        __syncthreads();
        if (k0 + kGemmBK < cols) fetch(k0 + kGemmBK);
#pragma unroll
        for (int kk = 0; kk < kGemmBK; kk += 16) {
            uint32_t ah[2][4], al_[2][4], bh[2][4], bl_[2][4];
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                const int off = (wm + 16 * i + (lane & 15)) * kGemmLd + kk + (lane >> 4) * 8;
                ldsm_x4(ah[i], smem_addr(a_hi + off));
                if constexpr (kSplit) ldsm_x4(al_[i], smem_addr(a_lo + off));
            }
#pragma unroll
            for (int jj = 0; jj < 2; ++jj) {
                const int off = (wn + 16 * jj + (lane & 7) + (lane >> 4) * 8) * kGemmLd + kk + ((lane >> 3) & 1) * 8;
                ldsm_x4(bh[jj], smem_addr(b_hi + off));
                if constexpr (kSplit) ldsm_x4(bl_[jj], smem_addr(b_lo + off));
            }
#pragma unroll
            for (int i = 0; i < 2; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const int jj = j >> 1, h = (j & 1) * 2;
                    if constexpr (kSplit) {
                        mma_bf16(acc[i][j], al_[i], bh[jj][h], bh[jj][h + 1]);
                        mma_bf16(acc[i][j], ah[i], bl_[jj][h], bl_[jj][h + 1]);
                    }
                    mma_bf16(acc[i][j], ah[i], bh[jj][h], bh[jj][h + 1]);
                }
        }
    }

    // Epilogue: c0,c1 = (row g, tokens 2q, 2q+1), c2,c3 = (row g+8, same tokens).
    const int g = lane >> 2, q = lane & 3;
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int r = m0 + wm + 16 * i + g + (e >> 1) * 8;
                const int t = n0 + wn + 8 * j + 2 * q + (e & 1);
                if (r < rows && t < T) {
                    float* o = a.out + static_cast<size_t>(t) * rows + r;
                    *o = a.accumulate ? *o + acc[i][j][e] : acc[i][j][e];
                }
            }
}

template <Type TY, bool kSplit>
void gemm_launch_impl(const GemmArgs& a, cudaStream_t s) {
    constexpr size_t smem = gemm_smem_bytes<kSplit>();
    static const bool attr_set = [] {
        DF_CUDA_CHECK(cudaFuncSetAttribute(gemm_kernel<TY, kSplit>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(smem)));
        return true;
    }();
    (void)attr_set;
    const dim3 grid((a.w.rows + kGemmBM - 1) / kGemmBM, (a.T + kGemmBN - 1) / kGemmBN);
    launch(gemm_kernel<TY, kSplit>, grid, kGemmThreads, smem, s, a);
}

template <Type TY>
void gemm_launch(const GemmArgs& a, cudaStream_t s) {
    if (a.T <= 0) return;
    DF_CUDA_REQUIRE(a.w.cols % Quant<TY>::kUnit == 0, "gemm: cols must be a multiple of the decode unit");
    DF_CUDA_REQUIRE(a.w.cols % 16 == 0 || Quant<TY>::kUnit >= 32, "gemm: cols must be a multiple of 16");
    DF_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(a.x) % 16 == 0, "gemm: x must be 16-byte aligned");
    if (a.split)
        gemm_launch_impl<TY, true>(a, s);
    else
        gemm_launch_impl<TY, false>(a, s);
}

}  // namespace df::cuda
