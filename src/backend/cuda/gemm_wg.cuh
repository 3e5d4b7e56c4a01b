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
// apart): a k16 step's 16 columns are 32 bytes of each row, so each of a slab's products is one
// wgmma whose descriptor starts 0, 32 (the other step), 64 or 96 (lo) bytes further.
//
// Two forms. With the scales folded (the K-quants and weights whose block scales are too
// large for the other form): four products per slab (hi and lo of both steps, m64n128k16) into a
// temporary accumulator that the float scale multiplies into the result once per scale group (a
// slab for Q8_0, a 256-column unit for the others); K-quants' mins (w = d sc q - dmin m) take four
// more products with the sub-block minimum as the weight into a second accumulator, which - dmin
// multiplies. With the scales in the weights (kInA: Q8_0 and the IQ types): the decoder
// gives d q s as f16 hi + lo (exact: gemm_q.cuh's scale_hi_lo), and three products per step
// (hi x_hi, hi x_lo, lo x_hi) go straight into the result: no temporary accumulator, so 256
// tokens per block (m64n256k16) and no wait for any slab's products.
//
// Pipelining: the barrier, refill and decode of slab i + 1 run while slab i's wgmma group is in
// flight (A registers double-buffered); the folded form's scale FMAs wait for the group (ptxas
// serializes all wgmma of a kernel that reads accumulators while one is in flight), and the
// other resident block's wgmma fill that gap. Stages are refilled two slabs after their use.
//
// Short T (<= 16, <= 64) takes 16- or 64-token blocks of either form, three / two per SM (kInA:
// six slab stages): a wide block would pay for all its tokens' products.
// Block: the folded form 128 threads (one warpgroup), 64 rows x 128 tokens, two blocks per SM;
// kInA two warpgroups, 128 rows x 256 tokens, one block per SM: both warpgroups read each slab,
// so an SM holds half the slab bytes per product and four stages fit (three as two blocks of one
// warpgroup): slabs are requested ~4x further ahead of their use. Each warpgroup copies and
// waits for its own rows' weight units and meets only its own warps (a named barrier), so the
// two drift freely within the slabs in flight. Weight units staged by cp.async in a ring as in
// gemm_q.cuh. Activation slabs come by TMA (tma.cuh) into a ring of
// stages, one mbarrier per stage counting its bytes. In the folded form the C blocks of a thread
// block cluster hold consecutive row tiles of the same tokens, and block r copies tokens
// r/C .. (r+1)/C of each slab into all C blocks at once (multicast: the GEMM's L2 traffic, 75-85 %
// of L2's peak with a block's own copies, fell by half, its time by a little; session 29). A
// stage is refilled when every block of the cluster has released it (a second mbarrier per
// stage, one arrival per block); in kInA by the warpgroup whose release (a count per stage)
// completes the round.
#pragma once

#include "backend/cuda/gemm_q.cuh"
#include "backend/cuda/tma.cuh"
#include "backend/cuda/wgmma.cuh"

namespace df::cuda {

// Warpgroups per block of a form (each 64 rows, a warp per 16), its rows and threads.
template <bool kInA>
inline constexpr int kWgGroupsOf = kInA ? kQGemmWgInAGroups : 1;
template <bool kInA>
inline constexpr int kWgBMOf = 64 * kWgGroupsOf<kInA>;
template <bool kInA>
inline constexpr int kWgThreadsOf = 128 * kWgGroupsOf<kInA>;
static_assert(kWgBMOf<false> == kQGemmWgTileRows && kWgBMOf<true> == kQGemmWgInATileRows, "kernels.h's tile rows");

// Tokens per block of a form: the folded form 128, kInA 256; both 16 / 64 for short T (kernels.h's
// qgemm_wg_ina_tokens, qgemm_wg_fold_tokens).
template <bool kInA>
inline constexpr int kWgBNOf = kInA ? kQGemmWgInATokens : 128;
// Slab stages and resident blocks per SM of a form and its tokens per block; L = stages - 2 slabs
// are in flight ahead of the one decoded.
template <bool kInA, int BN>
inline constexpr int kWgStagesOf = !kInA ? 5 : BN == kQGemmWgInATokens ? kQGemmWgInAStages : kQGemmWgNarrowStages;
template <bool kInA, int BN>
inline constexpr int kWgBlocksOf = !kInA ? qgemm_wg_fold_blocks_per_sm(BN) : qgemm_wg_ina_blocks_per_sm(BN);
// The bytes of a slab stage (tokens x 8 chunks x 16 bytes).
template <int BN>
inline constexpr int kWgSlabBytesOf = BN * 128;

// acc (+)= a b over BN tokens: one m64nBNk16 wgmma.
template <int BN>
DF_DEV void wgmma_f16(float (&acc)[BN / 2], const uint32_t (&a)[4], uint64_t b, bool accumulate) {
    static_assert(BN == 16 || BN == 64 || BN == 128 || BN == 256, "wgmma_f16: no such token tile");
    if constexpr (BN == 256)
        wgmma_m64n256k16_f16(acc, a, b, accumulate);
    else if constexpr (BN == 128)
        wgmma_m64n128k16_f16(acc, a, b, accumulate);
    else if constexpr (BN == 64)
        wgmma_m64n64k16_f16(acc, a, b, accumulate);
    else
        wgmma_m64n16k16_f16(acc, a, b, accumulate);
}

template <class G, bool kInA, int BN>
constexpr int wg_unit_slots() { return (kWgStagesOf<kInA, BN> - 2 + qg_slabs_per_unit<G>() - 1) / qg_slabs_per_unit<G>() + 1; }
template <class G, bool kInA>
constexpr int wg_unit_bytes() { return kWgBMOf<kInA> * (G::kStride + G::kHead); }
// + 1024: the slab stages start on a 1024-byte boundary (the swizzle atom).
template <class G, bool kInA, int BN = kWgBNOf<kInA>>
constexpr int wg_smem_bytes() {
    return 1024 + kWgStagesOf<kInA, BN> * kWgSlabBytesOf<BN> + wg_unit_slots<G, kInA, BN>() * wg_unit_bytes<G, kInA>() +
           qg_tabs_bytes<G>();
}
// Whether BN-token blocks of a form fit an SM as many times as the form wants.
template <class G, bool kInA, int BN>
constexpr bool wg_blocks_fit() { return kWgBlocksOf<kInA, BN> * (wg_smem_bytes<G, kInA, BN>() + 1024 + 64) <= 228 * 1024; }
// Q8_0's scale changes every slab; the other types' over a 256-column unit.
template <class G>
constexpr int wg_scale_slabs() { return G::kUnitCols == 64 ? 1 : qg_slabs_per_unit<G>(); }

// The decoder of a form (kInA: the scales in the weights), and whether a type runs that form: it
// has one and its blocks fit an SM (IQ2_S only with two warpgroups per block: its tables).
template <Type TY, bool kInA>
using WgDecoder = std::conditional_t<kInA, GemmQInA<TY>, GemmQ<TY>>;
template <Type TY>
constexpr bool qgemm_wg_in_a() {
    if constexpr (requires { GemmQ<TY>::kScaleInA; })
        return wg_blocks_fit<WgDecoder<TY, true>, true, kQGemmWgInATokens>();  // the narrow tiles then fit too (asserted)
    else
        return false;
}

// QGemmEntry::wide_scale_bits of a type.
template <Type TY>
constexpr uint16_t qgemm_wg_scale_bits() {
    if constexpr (qgemm_wg_in_a<TY>())
        return GemmQ<TY>::kWideScaleBits;
    else
        return 0;
}

// K-major, 128-byte swizzle, 8-row atoms 1024 bytes apart (the leading offset is unused).
DF_DEV uint64_t wg_desc_sw128(uint32_t addr) { return wg_desc(addr, 16, 1024) | (uint64_t{1} << 62); }

// kInA: the weights as d q s = hi + lo in A (the decoder's slab_hl), three products per k16 step
// (hi x, lo x_hi; lo x_lo dropped, ~2^-22) straight into the result: no temporary accumulator,
// no fold and no wait for any slab's products.
template <Type TY, bool kInA, int BN>
__global__ void __launch_bounds__(kWgThreadsOf<kInA>, (kWgBlocksOf<kInA, BN>))
    qgemm_wg_kernel(const QGemmArgs a, const __grid_constant__ CUtensorMap xmap) {
    using G = WgDecoder<TY, kInA>;
    constexpr int S = kWgStagesOf<kInA, BN>, L = S - 2, SPU = qg_slabs_per_unit<G>(), US = wg_unit_slots<G, kInA, BN>();
    constexpr int UB = wg_unit_bytes<G, kInA>(), BM = kWgBMOf<kInA>, kSlabBytes = kWgSlabBytesOf<BN>, kPerRow = G::kBody / G::kCopy, SG = wg_scale_slabs<G>();
    static_assert(SPU % SG == 0 && SPU % 2 == 0, "scale groups tile the units; slabs in pairs");
    extern __shared__ __align__(16) uint8_t smem[];
    uint8_t* const slabs_smem = smem + ((1024 - (smem_addr(smem) & 1023)) & 1023);
    uint8_t* const units_smem = slabs_smem + S * kSlabBytes;
    auto& tabs = *reinterpret_cast<typename G::Tabs*>(units_smem + US * UB);

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2;
    const int rows = a.w.rows, T = a.T;
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const QgUnitRange ur = qg_unit_range(a.w.cols / G::kUnitCols, blockIdx.z, a.splits);
    const int u0 = ur.u0, nk = (ur.u1 - ur.u0) * SPU;

    // full[s]: stage s's slab has landed (one arrival, the slab's bytes); empty[s] (the folded
    // form): every block of the cluster is done with it (one arrival per block); released[s]
    // (kInA): how many times a warpgroup released it, the last of a round refilling it.
    __shared__ __align__(8) uint64_t bars[2 * S];
    __shared__ uint32_t released[S];
    const uint32_t full0 = smem_addr(bars), empty0 = full0 + 8 * S;
    const uint32_t C = cluster_blocks(), rank = cluster_rank();
    const int slice = BN / static_cast<int>(C);  // tokens this block copies into every block

    pdl_trigger();
    G::load_tabs(tabs, a.itables);
    if (tid == 0) {
        for (int st = 0; st < S; ++st) {
            mbar_init(full0 + 8 * st, 1);
            mbar_init(empty0 + 8 * st, C);
            released[st] = 0u;
        }
        mbar_init_fence();
    }
    // Copy roles: thread t of warpgroup w copies row 64 w + t % 64 of every unit (a warpgroup only
    // its own rows), its chunks j = t / 64 (mod 2), and the head if t < 64; thread 0 issues the
    // first slabs' copies.
    const int wg = tid >> 7, a_row = 64 * wg + (tid & 63), a_half = (tid >> 6) & 1;
    const uint8_t* const a_src = a.w.data + static_cast<size_t>(min(m0 + a_row, rows - 1)) * a.w.row_stride;
    auto issue_unit = [&](int lu) {
        const int u = u0 + lu;
        uint8_t* dst = units_smem + (lu % US) * UB;
        const uint8_t* src = a_src + static_cast<size_t>(u) * G::kBody;
#pragma unroll
        for (int j = 0; j < kPerRow; j += 2)
            if (j + a_half < kPerRow)
                cp_async<G::kCopy>(dst + a_row * G::kStride + (j + a_half) * G::kCopy, src + (j + a_half) * G::kCopy);
        if constexpr (G::kHead > 0)
            if (a_half == 0) cp_async<G::kHead>(dst + BM * G::kStride + a_row * G::kHead, a_src + a.w.head_off + G::head_src(u));
    };
    // Slab i into stage i % S (and the unit starting there); always commits a group (of the
    // units' copies). The slab: this block's slice of its tokens into every block of the cluster,
    // once all of them have released the stage's previous slab (i - S); rows past T are zeros.
    auto issue = [&](int i, bool issuer) {
        if (i < nk) {
            if (i > 0 && i % SPU == 0) issue_unit(i / SPU);
            // Every thread waits for the stage (no branch on the thread: see tma.cuh); `issuer` copies.
            const int st = i % S;
            if constexpr (!kInA)  // kInA: its issuer is the stage's last releaser
                if (i >= S) mbar_wait(empty0 + 8 * st, (i / S - 1) & 1);
            mbar_arrive_expect_tx(issuer, full0 + 8 * st, kSlabBytes);
            tma_load_2d(issuer, smem_addr(slabs_smem + st * kSlabBytes) + rank * slice * 128, &xmap, full0 + 8 * st,
                        (u0 * SPU + i) * 64, n0 + static_cast<int>(rank) * slice, static_cast<uint16_t>((1u << C) - 1));
        }
        cp_async_commit();
    };
    issue_unit(0);
    cp_async_commit();
    cluster_sync_all();  // every block's barriers are initialized before copies or arrivals reach them
    pdl_wait();
#pragma unroll
    for (int i = 0; i < L; ++i) issue(i, tid == 0);

    const ImmaLane ln = G::lane(tabs, lane);
    const uint64_t desc0 = wg_desc_sw128(smem_addr(slabs_smem));
    const int r0 = 16 * warp + g, r1 = r0 + 8;
    constexpr bool kMins = decoder_has_mins<G>();
    constexpr int TM = kMins ? BN / 2 : 1;
    float acc[BN / 2], t[kInA ? 1 : BN / 2], sv[2][2];  // result, temporary accumulator, row scales per slab parity
    float tm[TM], svm[2][2];         // mins: sums of the sub-block minimum times x, - dmin per row
    uint32_t af[2][2][4];            // A fragments per slab parity and k16 step (kInA: the hi halves)
    uint32_t al[kInA ? 2 : 1][2][4]; // kInA: the lo halves
    uint32_t am[2][4];               // mins: the rows' minimum pairs (the same at both k16 steps)
#pragma unroll
    for (int e = 0; e < BN / 2; ++e) acc[e] = 0.f;

    // Waits for slab i, releases the stage of slab i - 2 (its wgmma group is done in every warp)
    // in every block of the cluster, refills it with slab i + L and decodes slab i into af[P] (and
    // its group's scales into sv[P] at the group's end). kInA's warpgroups meet only their own
    // warps here: each releases the stage (i + L = i - 2 mod S) by a count, and the one whose
    // release completes a round refills it, so neither waits for the other's products.
    auto prepare = [&]<int P>(int i) {
        cp_async_wait<L - 1>();
        mbar_wait(full0 + 8 * (i % S), (i / S) & 1);
        bool issuer = tid == 0;
        if constexpr (kInA) {
            warpgroup_sync(wg);  // its units' copies landed, its slab i - 2 products done
            const uint32_t n = atomic_add_shared(tid % 128 == 0, smem_addr(released + (i + L) % S));
            issuer = tid % 128 == 0 && n % kWgGroupsOf<kInA> == kWgGroupsOf<kInA> - 1;
        } else {
            __syncthreads();
            if (i >= 2) mbar_arrive_remote(tid < static_cast<int>(C), empty0 + 8 * ((i - 2) % S), static_cast<uint32_t>(tid) % C);
        }
        issue(i + L, issuer);
        const int lu = i / SPU, m = i % SPU;
        const uint8_t* us = units_smem + (lu % US) * UB;
        uint32_t h0[4], h1[4];
        if constexpr (kInA) {
            const uint8_t* hs = us + BM * G::kStride;
            uint32_t l0[4], l1[4];
            G::slab_hl(ln, us + r0 * G::kStride, hs + r0 * G::kHead, u0 + lu, m, h0, l0);
            G::slab_hl(ln, us + r1 * G::kStride, hs + r1 * G::kHead, u0 + lu, m, h1, l1);
            al[P][0][0] = l0[0]; al[P][0][1] = l1[0]; al[P][0][2] = l0[1]; al[P][0][3] = l1[1];
            al[P][1][0] = l0[2]; al[P][1][1] = l1[2]; al[P][1][2] = l0[3]; al[P][1][3] = l1[3];
        } else if constexpr (kMins) {
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
        if (!kInA && i % SG == SG - 1) {
            const uint8_t* hs = us + BM * G::kStride;
            sv[P][0] = G::scale(us + r0 * G::kStride, hs + r0 * G::kHead, u0 + lu, m);
            sv[P][1] = G::scale(us + r1 * G::kStride, hs + r1 * G::kHead, u0 + lu, m);
            if constexpr (kMins) {
                svm[P][0] = -G::dmin_scale(us + r0 * G::kStride);
                svm[P][1] = -G::dmin_scale(us + r1 * G::kStride);
            }
        }
    };
    // Slab i's four products into t (the mins' four into tm; kInA: six into acc); slab i + 1 is
    // prepared while they run. The accumulators are read (the fold) only with no wgmma in flight:
    // ptxas serializes every wgmma otherwise.
    auto compute = [&]<int P>(int i) {
        // The stage's descriptor: the base's plus the stage's offset (16-byte units, no carry out of
        // the 14-bit address field); the steps' 32-byte offsets likewise.
        const uint64_t sb = desc0 + static_cast<uint32_t>((i % S) * (kSlabBytes >> 4));
        wgmma_fence();
        if constexpr (kInA) {
            wgmma_f16<BN>(acc, af[P][0], sb + 0, true);  // step 0: hi x_hi
            wgmma_f16<BN>(acc, af[P][0], sb + 4, true);  // hi x_lo
            wgmma_f16<BN>(acc, al[P][0], sb + 0, true);  // lo x_hi
            wgmma_f16<BN>(acc, af[P][1], sb + 2, true);  // step 1
            wgmma_f16<BN>(acc, af[P][1], sb + 6, true);
            wgmma_f16<BN>(acc, al[P][1], sb + 2, true);
            wgmma_commit();
            if (i + 1 < nk) {
                wgmma_wait<1>();  // slab i - 1's group: af, al[1 - P] are free
                prepare.template operator()<1 - P>(i + 1);
            }
        } else {
            wgmma_f16<BN>(t, af[P][0], sb + 0, i % SG != 0);  // step 0 hi
            wgmma_f16<BN>(t, af[P][0], sb + 4, true);         // step 0 lo
            wgmma_f16<BN>(t, af[P][1], sb + 2, true);         // step 1 hi
            wgmma_f16<BN>(t, af[P][1], sb + 6, true);         // step 1 lo
            if constexpr (kMins) {  // - dmin sum_k m(k) x_k: the minimum as the weight
                wgmma_f16<BN>(tm, am[P], sb + 0, i % SG != 0);
                wgmma_f16<BN>(tm, am[P], sb + 4, true);
                wgmma_f16<BN>(tm, am[P], sb + 2, true);
                wgmma_f16<BN>(tm, am[P], sb + 6, true);
            }
            wgmma_commit();
            if (i + 1 < nk) {
                wgmma_wait<1>();  // slab i - 1's group: af[1 - P] is free
                prepare.template operator()<1 - P>(i + 1);
            }
            if (i % SG == SG - 1) {
                wgmma_wait<0>();
#pragma unroll
                for (int e = 0; e < BN / 2; ++e) acc[e] = fmaf(t[e], sv[P][(e >> 1) & 1], acc[e]);
                if constexpr (kMins) {
#pragma unroll
                    for (int e = 0; e < BN / 2; ++e) acc[e] = fmaf(tm[e], svm[P][(e >> 1) & 1], acc[e]);
                }
            }
        }
    };
    prepare.template operator()<0>(0);
    for (int i = 0; i < nk; i += 2) {  // nk is a multiple of the even slabs per unit
        compute.template operator()<0>(i);
        compute.template operator()<1>(i + 1);
    }
    if constexpr (kInA) wgmma_wait<0>();
    cp_async_wait<0>();

    // acc[4 j + 2 v + h]: row 16 warp + g + 8 v, token 8 j + 2 q + h.
    const int q = lane & 3;
    float* const dst = a.splits > 1 ? a.partial + static_cast<size_t>(blockIdx.z) * T * rows : a.out;
    const bool add = a.splits == 1 && a.accumulate;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int tk = n0 + 8 * j + 2 * q + h;
            if (tk >= T) continue;
            float inv = __ldg(a.xinv + tk);
            if constexpr (kInA) inv *= G::kInAFactor;  // a power of two
#pragma unroll
            for (int v = 0; v < 2; ++v) {
                const int r = m0 + r0 + 8 * v;
                if (r >= rows) continue;
                float* o = dst + static_cast<size_t>(tk) * rows + r;
                const float y = acc[4 * j + 2 * v + h] * inv;
                *o = add ? *o + y : y;
            }
        }
    cluster_sync_all();  // no block leaves while another may still arrive on its barriers
}

template <Type TY, bool kInA, int BN = kWgBNOf<kInA>>
void qgemm_wg_start(const QGemmArgs& a, cudaStream_t s) {
    constexpr int smem = wg_smem_bytes<WgDecoder<TY, kInA>, kInA, BN>();
    static_assert(kWgBlocksOf<kInA, BN> * (smem + 1024) <= 228 * 1024, "qgemm_wg: the blocks per SM must fit");
    static bool attr_set = false;  // ops are issued from one thread
    if (!attr_set) {
        DF_CUDA_CHECK(cudaFuncSetAttribute(qgemm_wg_kernel<TY, kInA, BN>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        attr_set = true;
    }
    const dim3 grid((a.w.rows + kWgBMOf<kInA> - 1) / kWgBMOf<kInA>, (a.T + BN - 1) / BN, a.splits);
    // The clusters tile the row blocks. kInA runs alone (its warpgroups release stages by a count
    // in shared memory; as three blocks per SM it gained nothing from sharing slabs, 4B prefill
    // at 4096 -1.5 % in clusters of 2).
    int C = kInA ? 1 : qgemm_cluster();
    while (grid.x % C != 0 || BN / C < 8) C /= 2;  // slices of whole 8-token swizzle atoms
    // The activations as T rows of 2 cols halves (wg_order); a box is one slab's 64 halves of a
    // block's slice of the tokens.
    const CUtensorMap xmap = tensor_map_u16_sw128(a.xhl, 2 * static_cast<uint64_t>(a.w.cols), static_cast<uint64_t>(a.T),
                                                  4 * static_cast<uint64_t>(a.w.cols), 64, static_cast<uint32_t>(BN / C));
    launch_cluster(qgemm_wg_kernel<TY, kInA, BN>, grid, kWgThreadsOf<kInA>, smem, s, C, a, xmap);
}

template <Type TY>
void qgemm_wg_launch(const QGemmArgs& a, cudaStream_t s) {
    DF_CUDA_REQUIRE(a.wg_order, "qgemm_wg: needs the activations in wg_order");
    qgemm_check<TY>(a);
    if constexpr (qgemm_wg_in_a<TY>()) {
        if (!a.fold_scales) {
            const int tokens = a.tokens > 0 ? a.tokens : qgemm_wg_ina_tokens(a.T);
            DF_CUDA_REQUIRE(tokens == 16 || tokens == 64 || tokens == kQGemmWgInATokens, "qgemm_wg: no such token tile");
            if (tokens == 16) return qgemm_wg_start<TY, true, 16>(a, s);
            if (tokens == 64) return qgemm_wg_start<TY, true, 64>(a, s);
            return qgemm_wg_start<TY, true>(a, s);
        }
    }
    const int tokens = a.tokens > 0 ? a.tokens : qgemm_wg_fold_tokens(a.T);
    DF_CUDA_REQUIRE(tokens == 16 || tokens == 64 || tokens == kWgBNOf<false>, "qgemm_wg: no such token tile");
    if (tokens == 16) return qgemm_wg_start<TY, false, 16>(a, s);
    if (tokens == 64) return qgemm_wg_start<TY, false, 64>(a, s);
    qgemm_wg_start<TY, false>(a, s);
}

template <Type TY>
constexpr QGemmEntry qgemm_entry() {
    if constexpr (!GemmQ<TY>::kSupported)
        return {nullptr, 0, nullptr};
    else if constexpr (kQGemmWgBuilt)
        return {qgemm_launch<TY>, GemmQ<TY>::kUnitCols, qgemm_wg_launch<TY>, qgemm_wg_scale_bits<TY>()};
    else
        return {qgemm_launch<TY>, GemmQ<TY>::kUnitCols, nullptr};
}

}  // namespace df::cuda
