// Prefill GEMM (T > 8) on exact f16 weights with wgmma (sm_90a): the product of gemm_q.cuh, for
// all its decoders, issued by a warpgroup instead of four warps.
//
// The decoders' registers are wgmma's A operand as they are: warp w of the block (one warpgroup)
// decodes rows 16 w + g and 16 w + g + 8 of the block's 64, exactly the m16n8k16 fragment that
// the register-A form of wgmma takes per warp. B, the activations, comes from shared memory: a
// slab holds each token's 8 chunks of 8 halves (launch_gemm_act's wg_order: chunk c has the pairs
// 2c, 2c + 1 of every lane's 8 columns, which is logical k 2q, 2q + 1 (c even) or 2q + 8, 2q + 9
// (c odd) of k16 step c / 2 % 2, hi for c < 4, lo after), one 128-byte row per token in the
// 128-byte swizzle (chunk c of token n at n 128 + (c ^ n % 8) 16; 8-token atoms 1024 bytes
// apart): a k16 step's 16 columns are 32 bytes of each row, so each of a slab's four products
// (hi and lo of both steps) is one wgmma m64n128k16 whose descriptor starts 32 bytes further.
// They go into a temporary accumulator that the float scale multiplies into the result once per
// scale group: a slab for Q8_0 (per-block d), a 256-column unit for the IQ types and K-quants.
// K-quants' mins (w = d sc q - dmin m) take four more products with the sub-block minimum as the
// weight into a second accumulator, which - dmin multiplies.
//
// Pipelining: the barrier, refill and decode of slab i + 1 run while slab i's wgmma group is in
// flight (A registers double-buffered); the scale FMAs wait for the group (ptxas serializes all
// wgmma of a kernel that reads accumulators while one is in flight), and the other resident
// block's wgmma fill that gap. Stages are refilled two slabs after their use.
//
// Block: 128 threads (one warpgroup), 64 rows x 128 tokens; weight units and activation slabs
// staged by cp.async in rings as in gemm_q.cuh.
#pragma once

#include "backend/cuda/gemm_q.cuh"
#include "backend/cuda/wgmma.cuh"

namespace df::cuda {

inline constexpr int kWgThreads = 128, kWgBM = kQGemmWgTileRows, kWgBN = 128, kWgStages = 5;
inline constexpr int kWgAhead = kWgStages - 2;      // slabs in flight ahead of the one decoded
inline constexpr int kWgSlabBytes = kWgBN * 128;    // tokens x 8 chunks x 16 bytes
static_assert(kWgBM == 64 && kWgThreads == 128, "one warpgroup, a warp per 16 rows");

template <class G>
constexpr int wg_unit_slots() { return (kWgAhead + qg_slabs_per_unit<G>() - 1) / qg_slabs_per_unit<G>() + 1; }
template <class G>
constexpr int wg_unit_bytes() { return kWgBM * (G::kStride + G::kHead); }
// + 1024: the slab stages start on a 1024-byte boundary (the swizzle atom).
template <class G>
constexpr int wg_smem_bytes() { return 1024 + kWgStages * kWgSlabBytes + wg_unit_slots<G>() * wg_unit_bytes<G>() + qg_tabs_bytes<G>(); }
// Q8_0's scale changes every slab; the other types' over a 256-column unit.
template <class G>
constexpr int wg_scale_slabs() { return G::kUnitCols == 64 ? 1 : qg_slabs_per_unit<G>(); }

// K-major, 128-byte swizzle, 8-row atoms 1024 bytes apart (the leading offset is unused).
DF_DEV uint64_t wg_desc_sw128(uint32_t addr) { return wg_desc(addr, 16, 1024) | (uint64_t{1} << 62); }

template <Type TY>
__global__ void __launch_bounds__(kWgThreads, kQGemmWgBlocksPerSm) qgemm_wg_kernel(const QGemmArgs a) {
    using G = GemmQ<TY>;
    constexpr int S = kWgStages, L = kWgAhead, SPU = qg_slabs_per_unit<G>(), US = wg_unit_slots<G>();
    constexpr int UB = wg_unit_bytes<G>(), BN = kWgBN, kPerRow = G::kBody / G::kCopy, SG = wg_scale_slabs<G>();
    static_assert(SPU % SG == 0 && SPU % 2 == 0, "scale groups tile the units; slabs in pairs");
    extern __shared__ __align__(16) uint8_t smem[];
    uint8_t* const slabs_smem = smem + ((1024 - (smem_addr(smem) & 1023)) & 1023);
    uint8_t* const units_smem = slabs_smem + S * kWgSlabBytes;
    auto& tabs = *reinterpret_cast<typename G::Tabs*>(units_smem + US * UB);

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2;
    const int rows = a.w.rows, T = a.T;
    const int m0 = blockIdx.x * kWgBM, n0 = blockIdx.y * BN;
    const QgUnitRange ur = qg_unit_range(a.w.cols / G::kUnitCols, blockIdx.z, a.splits);
    const int u0 = ur.u0, nk = (ur.u1 - ur.u0) * SPU;

    pdl_trigger();
    G::load_tabs(tabs, a.itables);
    // Copy roles: thread t copies row t % 64 of every unit, its chunks j = t / 64 (mod 2), and the
    // head if t < 64; of every slab, chunks cq and cq + 4 (cq = lane / 8) of tokens
    // 8 (warp + 4 k) + r (r = lane % 8, k < 4): a warp's copy is 8 tokens x 4 chunks, which the
    // swizzle spreads over all banks, and 64 contiguous bytes per token.
    const int a_row = tid & (kWgBM - 1), a_half = tid / kWgBM;
    const uint8_t* const a_src = a.w.data + static_cast<size_t>(min(m0 + a_row, rows - 1)) * a.w.row_stride;
    const int b_r = lane & 7, b_cq = lane >> 3, b_n = 8 * warp + b_r;
    const size_t tok_halves = 2 * static_cast<size_t>(a.w.cols);
    const uint16_t* const b_src = a.xhl + static_cast<size_t>(n0 + b_n) * tok_halves + b_cq * 8;
    auto issue_unit = [&](int lu) {
        const int u = u0 + lu;
        uint8_t* dst = units_smem + (lu % US) * UB;
        const uint8_t* src = a_src + static_cast<size_t>(u) * G::kBody;
#pragma unroll
        for (int j = 0; j < kPerRow; j += 2)
            if (j + a_half < kPerRow)
                cp_async<G::kCopy>(dst + a_row * G::kStride + (j + a_half) * G::kCopy, src + (j + a_half) * G::kCopy);
        if constexpr (G::kHead > 0)
            if (a_half == 0) cp_async<G::kHead>(dst + kWgBM * G::kStride + a_row * G::kHead, a_src + a.w.head_off + G::head_src(u));
    };
    // Slab i into stage i % S (and the unit starting there); always commits a group.
    auto issue = [&](int i) {
        if (i < nk) {
            if (i > 0 && i % SPU == 0) issue_unit(i / SPU);
            uint8_t* dst = slabs_smem + (i % S) * kWgSlabBytes + b_n * 128;
            const uint16_t* src = b_src + (static_cast<size_t>(u0) * SPU + i) * 64;
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const bool ok = n0 + b_n + 32 * k < T;
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    cp_async16_or_zero(dst + k * 4096 + (((b_cq + 4 * h) ^ b_r) << 4), ok ? src + k * 32 * tok_halves + h * 32 : a.xhl, ok);
            }
        }
        cp_async_commit();
    };
    issue_unit(0);
    cp_async_commit();
    pdl_wait();
#pragma unroll
    for (int i = 0; i < L; ++i) issue(i);

    const ImmaLane ln = G::lane(tabs, lane);
    const int r0 = 16 * warp + g, r1 = r0 + 8;
    constexpr bool kMins = decoder_has_mins<G>();
    constexpr int TM = kMins ? 64 : 1;
    float acc[64], t[64], sv[2][2];  // result, temporary accumulator, row scales per slab parity
    float tm[TM], svm[2][2];         // mins: sums of the sub-block minimum times x, - dmin per row
    uint32_t af[2][2][4];            // A fragments per slab parity and k16 step
    uint32_t am[2][4];               // mins: the rows' minimum pairs (the same at both k16 steps)
#pragma unroll
    for (int e = 0; e < 64; ++e) acc[e] = 0.f;

    // Waits for slab i, refills the stage of slab i - 2 (its wgmma group is done in every warp)
    // and decodes slab i into af[P] (and its group's scales into sv[P] at the group's end).
    auto prepare = [&]<int P>(int i) {
        cp_async_wait<L - 1>();
        fence_proxy_async();  // the copies' writes before wgmma's reads
        __syncthreads();
        issue(i + L);
        const int lu = i / SPU, m = i % SPU;
        const uint8_t* us = units_smem + (lu % US) * UB;
        uint32_t h0[4], h1[4];
        if constexpr (kMins) {
            uint32_t mn0, mn1;
            G::slab(ln, us + r0 * G::kStride, m, h0, mn0);
            G::slab(ln, us + r1 * G::kStride, m, h1, mn1);
            am[P][0] = mn0; am[P][1] = mn1; am[P][2] = mn0; am[P][3] = mn1;
        } else {
            G::slab(ln, us + r0 * G::kStride, m, h0);
            G::slab(ln, us + r1 * G::kStride, m, h1);
        }
        af[P][0][0] = h0[0]; af[P][0][1] = h1[0]; af[P][0][2] = h0[1]; af[P][0][3] = h1[1];
        af[P][1][0] = h0[2]; af[P][1][1] = h1[2]; af[P][1][2] = h0[3]; af[P][1][3] = h1[3];
        if (i % SG == SG - 1) {
            const uint8_t* hs = us + kWgBM * G::kStride;
            sv[P][0] = G::scale(us + r0 * G::kStride, hs + r0 * G::kHead, u0 + lu, m);
            sv[P][1] = G::scale(us + r1 * G::kStride, hs + r1 * G::kHead, u0 + lu, m);
            if constexpr (kMins) {
                svm[P][0] = -G::dmin_scale(us + r0 * G::kStride);
                svm[P][1] = -G::dmin_scale(us + r1 * G::kStride);
            }
        }
    };
    // Slab i's four products into t (the mins' four into tm); slab i + 1 is prepared while they
    // run. The accumulators are read (the fold) only with no wgmma in flight: ptxas serializes
    // every wgmma otherwise.
    auto compute = [&]<int P>(int i) {
        const uint32_t sb = smem_addr(slabs_smem + (i % S) * kWgSlabBytes);
        wgmma_fence();
        wgmma_m64n128k16_f16(t, af[P][0], wg_desc_sw128(sb + 0), i % SG != 0);  // step 0 hi
        wgmma_m64n128k16_f16(t, af[P][0], wg_desc_sw128(sb + 64), true);       // step 0 lo
        wgmma_m64n128k16_f16(t, af[P][1], wg_desc_sw128(sb + 32), true);       // step 1 hi
        wgmma_m64n128k16_f16(t, af[P][1], wg_desc_sw128(sb + 96), true);       // step 1 lo
        if constexpr (kMins) {  // - dmin sum_k m(k) x_k: the minimum as the weight
            wgmma_m64n128k16_f16(tm, am[P], wg_desc_sw128(sb + 0), i % SG != 0);
            wgmma_m64n128k16_f16(tm, am[P], wg_desc_sw128(sb + 64), true);
            wgmma_m64n128k16_f16(tm, am[P], wg_desc_sw128(sb + 32), true);
            wgmma_m64n128k16_f16(tm, am[P], wg_desc_sw128(sb + 96), true);
        }
        wgmma_commit();
        if (i + 1 < nk) {
            wgmma_wait<1>();  // slab i - 1's group: af[1 - P] is free
            prepare.template operator()<1 - P>(i + 1);
        }
        if (i % SG == SG - 1) {
            wgmma_wait<0>();
#pragma unroll
            for (int e = 0; e < 64; ++e) acc[e] = fmaf(t[e], sv[P][(e >> 1) & 1], acc[e]);
            if constexpr (kMins) {
#pragma unroll
                for (int e = 0; e < 64; ++e) acc[e] = fmaf(tm[e], svm[P][(e >> 1) & 1], acc[e]);
            }
        }
    };
    prepare.template operator()<0>(0);
    for (int i = 0; i < nk; i += 2) {  // nk is a multiple of the even slabs per unit
        compute.template operator()<0>(i);
        compute.template operator()<1>(i + 1);
    }
    cp_async_wait<0>();

    // acc[4 j + 2 v + h]: row 16 warp + g + 8 v, token 8 j + 2 q + h.
    const int q = lane & 3;
    float* const dst = a.splits > 1 ? a.partial + static_cast<size_t>(blockIdx.z) * T * rows : a.out;
    const bool add = a.splits == 1 && a.accumulate;
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int tk = n0 + 8 * j + 2 * q + h;
            if (tk >= T) continue;
            const float inv = __ldg(a.xinv + tk);
#pragma unroll
            for (int v = 0; v < 2; ++v) {
                const int r = m0 + r0 + 8 * v;
                if (r >= rows) continue;
                float* o = dst + static_cast<size_t>(tk) * rows + r;
                const float y = acc[4 * j + 2 * v + h] * inv;
                *o = add ? *o + y : y;
            }
        }
}

template <Type TY>
void qgemm_wg_launch(const QGemmArgs& a, cudaStream_t s) {
    constexpr int smem = wg_smem_bytes<GemmQ<TY>>();
    static_assert(kQGemmWgBlocksPerSm * (smem + 1024) <= 228 * 1024, "qgemm_wg: the blocks per SM must fit");
    DF_CUDA_REQUIRE(a.wg_order, "qgemm_wg: needs the activations in wg_order");
    qgemm_start<TY, qgemm_wg_kernel<TY>>(a, smem, kWgBM, kWgBN, kWgThreads, s);
}

template <Type TY>
constexpr QGemmEntry qgemm_entry() {
    if constexpr (!GemmQ<TY>::kSupported)
        return {nullptr, 0, nullptr};
    else if constexpr (kQGemmWgBuilt)
        return {qgemm_launch<TY>, GemmQ<TY>::kUnitCols, qgemm_wg_launch<TY>};
    else
        return {qgemm_launch<TY>, GemmQ<TY>::kUnitCols, nullptr};
}

}  // namespace df::cuda
