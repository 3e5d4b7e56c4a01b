// Causal GQA attention over the KV cache: flash decoding for up to 8 tokens (prefill chunks
// of 64, 128 or 256-wide heads go to the tensor-core kernel of attention_prefill.cu).
//
// Grid (split, kv head x head chunk, token). A block takes up to 8 query heads that share one
// KV head (so each K/V row read serves all of them) and one contiguous range of that token's keys
// [0, pos[t]]; the range is cut into `nsplit` parts on the device from pos, so a captured graph
// stays valid as the context grows. Each warp runs an online softmax over its keys with the
// head's output slice in registers (lane owns head_dim/32 consecutive dims); the block's warps
// are merged in shared memory, and the splits by a second kernel when nsplit > 1, or (the cluster
// form, attn_cluster() > 0) by the blocks of a thread block cluster through distributed shared
// memory, which saves the second kernel's launch and drain in every decode step.
#include <cooperative_groups.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <type_traits>

#include "backend/cuda/attention_prefill.h"
#include "backend/cuda/check.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/norm_sum.cuh"

namespace df::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kAttnWarps = 4;
constexpr int kMaxGroup = 8;  // query heads per block
constexpr int kMaxDecodeTokens = 8;  // up to this T: split flash decoding; above: the prefill kernel
#ifndef DF_ATTN_CLUSTER_WARPS  // build-time knob for A/B builds
#define DF_ATTN_CLUSTER_WARPS 8
#endif
constexpr int kClusterWarps = DF_ATTN_CLUSTER_WARPS;  // warps per block of the cluster kernel
#ifndef DF_ATTN_AHEAD_SMALL  // keys in flight per warp (head dims <= 128 / larger): A/B build knobs
#define DF_ATTN_AHEAD_SMALL 4
#endif
#ifndef DF_ATTN_AHEAD_LARGE
#define DF_ATTN_AHEAD_LARGE 2
#endif

// How a context of n_kv keys is split: pieces of `per` keys, at least split_keys (a short context
// does not pay for many nearly empty blocks and a combine) and few enough that `used` <= the
// launched nsplit. Every used split is non-empty: (used - 1) * per < n_kv. A function of the
// position only, so decode steps and verify passes split a token's keys the same way.
struct KeySplit {
    int per, used;
};
DF_DEV KeySplit key_split(int n_kv, int nsplit, int split_keys) {
    const int per = max(split_keys, (n_kv + nsplit - 1) / nsplit);
    return {per, (n_kv + per - 1) / per};
}

// The cluster kernel's split: a token's keys spread evenly over the C blocks of its cluster.
DF_DEV KeySplit cluster_key_split(int n_kv, int C) {
    const int per = (n_kv + C - 1) / C;
    return {per, (n_kv + per - 1) / per};
}

// One lane's DPL values of a cache row as loaded (f16 pairs or f32), converted when used, so that
// a warp keeps the next keys' rows in flight while it scores one.
template <int DPL, bool kHalf>
struct RawRow {
    static constexpr bool kPairs = kHalf && DPL % 2 == 0;  // f16 pairs; else one value per word
    uint32_t w[kPairs ? DPL / 2 : DPL];
};

// The lane's DPL values of a row at p into r: 32-bit words by the widest vector load that divides
// them (f16 pairs, f32), or one 16-bit load per value (f16, odd DPL). kGlobal: global memory
// through the read-only path (the caches); else shared memory (the split kernel's rings).
template <bool kGlobal, int DPL, bool kHalf>
DF_DEV void fill_raw(const void* p, RawRow<DPL, kHalf>& r) {
    auto ld = [](const auto* q) {
        if constexpr (kGlobal) return __ldg(q);
        else return *q;
    };
    constexpr int N = sizeof(r.w) / sizeof(r.w[0]);
    if constexpr (kHalf && !RawRow<DPL, kHalf>::kPairs) {
#pragma unroll
        for (int e = 0; e < DPL; ++e) r.w[e] = ld(static_cast<const unsigned short*>(p) + e);
    } else if constexpr (N % 4 == 0) {
#pragma unroll
        for (int e = 0; e < N / 4; ++e) {
            const uint4 v = ld(static_cast<const uint4*>(p) + e);
            r.w[4 * e] = v.x; r.w[4 * e + 1] = v.y; r.w[4 * e + 2] = v.z; r.w[4 * e + 3] = v.w;
        }
    } else if constexpr (kHalf && N % 2 == 0) {  // f32 rows of other widths keep 4-byte loads
#pragma unroll
        for (int e = 0; e < N / 2; ++e) {
            const uint2 v = ld(static_cast<const uint2*>(p) + e);
            r.w[2 * e] = v.x; r.w[2 * e + 1] = v.y;
        }
    } else {
#pragma unroll
        for (int e = 0; e < N; ++e) r.w[e] = ld(static_cast<const uint32_t*>(p) + e);
    }
}

// Element idx of a cache (f16 or f32) at base.
template <int DPL, bool kHalf>
DF_DEV void load_raw(const void* base, int64_t idx, RawRow<DPL, kHalf>& r) {
    fill_raw<true>(static_cast<const uint8_t*>(base) + idx * (kHalf ? 2 : 4), r);
}

template <int DPL, bool kHalf>
DF_DEV void unpack_row(const RawRow<DPL, kHalf>& r, float (&v)[DPL]) {
    if constexpr (RawRow<DPL, kHalf>::kPairs) {
#pragma unroll
        for (int i = 0; i < DPL / 2; ++i) {
            const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&r.w[i]));
            v[2 * i] = f.x;
            v[2 * i + 1] = f.y;
        }
    } else if constexpr (kHalf) {
#pragma unroll
        for (int e = 0; e < DPL; ++e) v[e] = __half2float(__ushort_as_half(static_cast<unsigned short>(r.w[e])));
    } else {
#pragma unroll
        for (int e = 0; e < DPL; ++e) v[e] = __uint_as_float(r.w[e]);
    }
}

// load_raw for a row staged in shared memory: the lane's DPL values at p.
template <int DPL, bool kHalf>
DF_DEV void read_raw(const uint8_t* p, RawRow<DPL, kHalf>& r) {
    fill_raw<false>(p, r);
}

// A warp's start over its keys: lane's dims of the group's queries times `scale` in qv (heads
// group .. G - 1 repeat the last one), an empty softmax state.
template <int DPL, int G>
DF_DEV void attend_init(const float* q, int q_stride, int group, int lane, float scale, float (&qv)[G][DPL],
                        float (&m)[G], float (&l)[G], float (&acc)[G][DPL]) {
#pragma unroll
    for (int i = 0; i < G; ++i) {
        const float* qp = q + static_cast<int64_t>(min(i, group - 1)) * q_stride + lane * DPL;
#pragma unroll
        for (int e = 0; e < DPL; ++e) qv[i][e] = qp[e] * scale;
        m[i] = -INFINITY;
        l[i] = 0.f;
#pragma unroll
        for (int e = 0; e < DPL; ++e) acc[i][e] = 0.f;
    }
}

// The split kernel's keys in tiles (long contexts): per key and head the per-key form below
// spends a 5-step warp reduction and two exponentials on 2 x DPL multiply-adds, which bound it
// by instruction issue at ~30 % of bandwidth. Here a warp takes KT keys at a time:
//  - the tile's K and V rows stream through a per-warp ring of shared memory (cp.async, S
//    stages), so several tiles are in flight without holding registers;
//  - lane l scores slot j against row j ^ perm(l), perm(l) = bits of l above 32 / KT, so the
//    KT partial dot products reduce by a transposing butterfly (KT - 1 + log2(32 / KT)
//    shuffles per head instead of 5 KT) after which lane l holds key perm(l)'s full score;
//  - one running maximum per tile (log2 KT shuffles), one rescale of the outputs per tile, each
//    lane exponentiates its own key and keeps its own share of the denominator (summed at the
//    end over the KT key lanes);
//  - V rows in order: the key's weight comes from its lane by one shuffle per head.
// Every sum runs in an order fixed by the key range: a token's bits do not depend on T.
// Output as attend_keys: per head m (the running max), l (the denominator, on every lane) and
// acc (lane's dims).
// Keys per tile: 8 where the partial scores (G x KT registers) fit beside q and the outputs and
// four blocks' rings fit an SM's shared memory, else 4.
inline constexpr int kRingStages = 3;
template <int DPL, bool kHalf, int G>
constexpr int ring_tile_keys() {
    return DPL * G <= 48 && kAttnWarps * kRingStages * 2 * 8 * 32 * DPL * (kHalf ? 2 : 4) <= 56 * 1024 ? 8 : 4;
}
template <int DPL, bool kHalf, int G>
constexpr int ring_tile_bytes() { return ring_tile_keys<DPL, kHalf, G>() * 32 * DPL * (kHalf ? 2 : 4); }
template <int DPL, bool kHalf, int G, int W>
constexpr int ring_smem_bytes() { return W * kRingStages * 2 * ring_tile_bytes<DPL, kHalf, G>(); }

template <int DPL, bool kHalf, int G, int W>
DF_DEV void attend_keys_ring(const AttnArgs& a, const void* k_cache, const void* v_cache, const float* q, int q_stride,
                             int group, int kvh, int k_begin, int k_end, int warp, int lane, uint8_t* ring, float (&m)[G], float (&l)[G], float (&acc)[G][DPL]) {
    constexpr int D = 32 * DPL, E = kHalf ? 2 : 4, RB = D * E, KT = ring_tile_keys<DPL, kHalf, G>(), LK = KT == 8 ? 3 : 2;
    constexpr int S = kRingStages, TB = ring_tile_bytes<DPL, kHalf, G>(), CH = TB / 16, NC = (CH + 31) / 32;
    constexpr unsigned kAll = 0xffffffffu;
    static_assert(RB % 16 == 0, "attention ring: cache rows must be a multiple of 16 bytes");
    float qv[G][DPL];
    attend_init<DPL, G>(q, q_stride, group, lane, a.scale, qv, m, l, acc);
    const int tiles = (k_end - k_begin + KT - 1) / KT;
    const int mine = warp < tiles ? (tiles - warp + W - 1) / W : 0;  // tiles warp, warp + W, ...
    const auto* kc = static_cast<const uint8_t*>(k_cache);
    const auto* vc = static_cast<const uint8_t*>(v_cache);
    const int64_t row_bytes = static_cast<int64_t>(a.kv_heads) * RB, head_off = static_cast<int64_t>(kvh) * RB;
    auto issue = [&](int i) {
        if (i < mine) {
            const int key0 = k_begin + (warp + W * i) * KT;
            uint8_t* dst = ring + (i % S) * 2 * TB;
#pragma unroll
            for (int c = 0; c < NC; ++c) {
                const int idx = lane + 32 * c;
                if (CH % 32 != 0 && idx >= CH) break;
                const int r = idx / (RB / 16), off = (idx % (RB / 16)) * 16, key = key0 + r;
                const bool ok = key < k_end;  // rows past the range are zeros (their weights are 0)
                const int64_t src = (ok ? key : k_begin) * row_bytes + head_off + off;
                cp_async16_or_zero(dst + r * RB + off, kc + src, ok);
                cp_async16_or_zero(dst + TB + r * RB + off, vc + src, ok);
            }
        }
        cp_async_commit();
    };
#pragma unroll
    for (int i = 0; i < S - 1; ++i) issue(i);
    const int perm = (lane >> (5 - LK)) & (KT - 1);
    for (int i = 0; i < mine; ++i) {
        issue(i + S - 1);
        cp_async_wait<S - 1>();
        __syncwarp();
        const uint8_t* kt = ring + (i % S) * 2 * TB;
        const uint8_t* vt = kt + TB;
        const int key0 = k_begin + (warp + W * i) * KT;
        float p[G][KT];
#pragma unroll
        for (int j = 0; j < KT; ++j) {
            RawRow<DPL, kHalf> raw;
            read_raw<DPL, kHalf>(kt + (j ^ perm) * RB + lane * DPL * E, raw);
            float kr[DPL];
            unpack_row(raw, kr);
#pragma unroll
            for (int h = 0; h < G; ++h) {
                float d = 0.f;
#pragma unroll
                for (int e = 0; e < DPL; ++e) d = fmaf(qv[h][e], kr[e], d);
                p[h][j] = d;
            }
        }
        // Slot j of lane l holds key j ^ perm(l); the partner across lane bit `mask` holds the
        // same key in slot j + half, so each step keeps the lower half of the slots.
#pragma unroll
        for (int half = KT / 2, mask = 16; half >= 1; half /= 2, mask /= 2)
#pragma unroll
            for (int h = 0; h < G; ++h)
#pragma unroll
                for (int j = 0; j < half; ++j) p[h][j] += __shfl_xor_sync(kAll, p[h][j + half], mask);
#pragma unroll
        for (int mask = 16 / KT; mask >= 1; mask /= 2)
#pragma unroll
            for (int h = 0; h < G; ++h) p[h][0] += __shfl_xor_sync(kAll, p[h][0], mask);
        const bool live = key0 + perm < k_end;
        float pk[G];
#pragma unroll
        for (int h = 0; h < G; ++h) {
            const float sc = live ? p[h][0] : -INFINITY;
            float mt = sc;
#pragma unroll
            for (int mask = 16; mask >= 32 / KT; mask /= 2) mt = fmaxf(mt, __shfl_xor_sync(kAll, mt, mask));
            const float mn = fmaxf(m[h], mt);  // finite: a tile's first key is in range
            const float corr = expf(m[h] - mn);
            pk[h] = expf(sc - mn);
            m[h] = mn;
            l[h] = fmaf(l[h], corr, pk[h]);
#pragma unroll
            for (int e = 0; e < DPL; ++e) acc[h][e] *= corr;
        }
#pragma unroll
        for (int j = 0; j < KT; ++j) {
            RawRow<DPL, kHalf> raw;
            read_raw<DPL, kHalf>(vt + j * RB + lane * DPL * E, raw);
            float vr[DPL];
            unpack_row(raw, vr);
#pragma unroll
            for (int h = 0; h < G; ++h) {
                const float w = __shfl_sync(kAll, pk[h], j << (5 - LK));
#pragma unroll
                for (int e = 0; e < DPL; ++e) acc[h][e] = fmaf(w, vr[e], acc[h][e]);
            }
        }
        __syncwarp();  // the slot is refilled by the next issue
    }
    cp_async_wait<0>();
#pragma unroll
    for (int h = 0; h < G; ++h)
#pragma unroll
        for (int mask = 16; mask >= 32 / KT; mask /= 2) l[h] += __shfl_xor_sync(kAll, l[h], mask);
}

// One warp's online softmax over its keys k_begin + warp + W j (j = 0, 1, ...) below k_end, for
// the `group` query heads at q, q + q_stride, ... held in G >= group registers (a power of two):
// heads group .. G - 1 repeat the last one and are not written, so the per-key loop over the
// heads has no branch and their independent reductions interleave (with a break at `group` they
// ran one after another). Lane owns dims lane * DPL .. lane * DPL + DPL - 1 of acc.
// The warp's first keys below `settled` (rows no kernel of this forward writes: cache_settled)
// are requested before wait() (the caller's pdl_wait), so their latency overlaps the kernels
// before; q and the other rows after it. fresh: null, or the row at `settled` (the token's own
// K row, then its V row, in the cache's format) in shared memory, which the cache may not hold yet.
template <int DPL, bool kHalf, int G, int W, class Wait>
DF_DEV void attend_keys(const AttnArgs& a, const void* k_cache, const void* v_cache, const float* q, int q_stride,
                        int group, int kvh, int k_begin, int k_end, int settled, const uint8_t* fresh, int warp, int lane,
                        Wait&& wait, float (&m)[G], float (&l)[G], float (&acc)[G][DPL]) {
    constexpr int D = 32 * DPL, E = kHalf ? 2 : 4;
    const int64_t kv_row = static_cast<int64_t>(a.kv_heads) * D;
    const int64_t col = static_cast<int64_t>(kvh) * D + lane * DPL;
    auto fetch = [&](int key, RawRow<DPL, kHalf>& kr, RawRow<DPL, kHalf>& vr) {
        if (fresh && key == settled) {
            read_raw<DPL, kHalf>(fresh + lane * DPL * E, kr);
            read_raw<DPL, kHalf>(fresh + D * E + lane * DPL * E, vr);
        } else {
            load_raw<DPL, kHalf>(k_cache, key * kv_row + col, kr);
            load_raw<DPL, kHalf>(v_cache, key * kv_row + col, vr);
        }
    };
    // Slot j % kAhead holds the rows of the warp's key j, refilled with key j + kAhead's as soon
    // as it is consumed.
    constexpr int kAhead = DPL <= 4 ? DF_ATTN_AHEAD_SMALL : DF_ATTN_AHEAD_LARGE;
    RawRow<DPL, kHalf> kraw[kAhead], vraw[kAhead];
#pragma unroll
    for (int j = 0; j < kAhead; ++j) {
        const int key = k_begin + warp + W * j;
        if (key < k_end && key < settled) fetch(key, kraw[j], vraw[j]);
    }
    wait();
#pragma unroll
    for (int j = 0; j < kAhead; ++j) {
        const int key = k_begin + warp + W * j;
        if (key < k_end && key >= settled) fetch(key, kraw[j], vraw[j]);
    }
    float qv[G][DPL];
    attend_init<DPL, G>(q, q_stride, group, lane, 1.f, qv, m, l, acc);
    for (int base = k_begin + warp; base < k_end; base += kAhead * W) {
#pragma unroll
        for (int j = 0; j < kAhead; ++j) {
            const int key = base + W * j;
            if (key >= k_end) break;
            float kr[DPL], vr[DPL];
            unpack_row(kraw[j], kr);
            unpack_row(vraw[j], vr);
            const int next = key + kAhead * W;
            if (next < k_end) fetch(next, kraw[j], vraw[j]);
#pragma unroll
            for (int i = 0; i < G; ++i) {
                float p = 0.f;
#pragma unroll
                for (int e = 0; e < DPL; ++e) p = fmaf(qv[i][e], kr[e], p);
                const float sc = warp_sum(p) * a.scale;
                const float mn = fmaxf(m[i], sc);
                const float corr = expf(m[i] - mn), pe = expf(sc - mn);
                m[i] = mn;
                l[i] = l[i] * corr + pe;
#pragma unroll
                for (int e = 0; e < DPL; ++e) acc[i][e] = fmaf(pe, vr[e], acc[i][e] * corr);
            }
        }
    }
}

// Merges the block's W warps: M = max m_w, L = sum l_w e^(m_w - M), O = sum acc_w e^(m_w - M)
// (warp order), through shared memory sm_m, sm_l, sm_f [W][G] and sm_acc [W][G][D]; the weights
// e^(m_w - M) are formed once per warp and head (not per output), then the block's threads call
// emit(i, d, M, L, O) once for each head i < group and dim d.
template <int DPL, int G, int W, class Emit>
DF_DEV void merge_warps(int group, int warp, int lane, const float (&m)[G], const float (&l)[G],
                        const float (&acc)[G][DPL], float* sm_m, float* sm_l, float* sm_f, float* sm_acc, Emit&& emit) {
    constexpr int D = 32 * DPL;
#pragma unroll
    for (int i = 0; i < G; ++i) {
        if (i >= group) break;
        if (lane == 0) {
            sm_m[warp * G + i] = m[i];
            sm_l[warp * G + i] = l[i];
        }
#pragma unroll
        for (int e = 0; e < DPL; ++e) sm_acc[(warp * G + i) * D + lane * DPL + e] = acc[i][e];
    }
    __syncthreads();
    __shared__ float sm_hm[G], sm_hl[G];  // per head: M, L
    if (threadIdx.x < W * group) {
        const int w = threadIdx.x / group, i = threadIdx.x % group;
        float M = -INFINITY;
#pragma unroll
        for (int v = 0; v < W; ++v) M = fmaxf(M, sm_m[v * G + i]);
        const float mw = sm_m[w * G + i];
        sm_f[w * G + i] = mw == -INFINITY ? 0.f : expf(mw - M);
        if (w == 0) sm_hm[i] = M;
    }
    __syncthreads();
    if (threadIdx.x < group) {
        const int i = threadIdx.x;
        float L = 0.f;
#pragma unroll
        for (int w = 0; w < W; ++w) L += sm_l[w * G + i] * sm_f[w * G + i];
        sm_hl[i] = L;
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < group * D; idx += blockDim.x) {
        const int i = idx / D, d = idx % D;
        float O = 0.f;
#pragma unroll
        for (int w = 0; w < W; ++w) O += sm_acc[(w * G + i) * D + d] * sm_f[w * G + i];
        emit(i, d, sm_hm[i], sm_hl[i], O);
    }
}

// Grid (split, kv head x head chunk, token); the splits' results are written to `partial` and
// combined by attn_combine_kernel (or written directly when the context takes one split).
// Token t's keys and values (both kernels): the call's caches, or (rows of several sequences,
// Backend::attention_lanes: the *_rows_kernel instances) each row's own. The rows' pointers are a
// parameter of those instances alone, so the lone kernels' parameters stay as they were.
struct CallCaches {
    const AttnArgs& a;
    DF_DEV const void* k(int) const { return a.k_cache; }
    DF_DEV const void* v(int) const { return a.v_cache; }
};
struct PerRowCaches {
    const RowCaches& rc;
    DF_DEV const void* k(int t) const { return param_pick(rc.k, t); }
    DF_DEV const void* v(int t) const { return param_pick(rc.v, t); }
};

// The rows of token t's cache that no kernel of this forward writes: those below the least
// position among the forward's tokens sharing that cache (each token's prep stores its own row;
// the forward's first kernel starts only after every earlier forward completed: launch.cuh).
template <class Caches>
DF_DEV int cache_settled(const AttnArgs& a, const Caches& caches, int t) {
    int settled = a.pos[t];
    const void* const k = caches.k(t);
    for (int u = 0; u < a.T; ++u)
        if (caches.k(u) == k) settled = min(settled, a.pos[u]);
    return settled;
}

template <int DPL, bool kHalf, int G, class Caches>
DF_DEV void attn_split_block(const AttnArgs& a, int group, int nsplit, const Caches& caches) {
    pdl_trigger();  // the split before pdl_wait: no kernel of this forward writes positions (launch.cuh)
    constexpr int D = 32 * DPL;
    const int split = blockIdx.x, t = blockIdx.z;
    const int ratio = a.heads / a.kv_heads, chunks = ratio / group;
    const int kvh = blockIdx.y / chunks;
    const int h0 = kvh * ratio + (blockIdx.y % chunks) * group;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

    const int n_kv = a.pos[t] + 1;
    const auto [per, used] = key_split(n_kv, nsplit, a.split_keys);
    if (split >= used || n_kv <= a.skip_upto) return;
    const int k_begin = split * per, k_end = min(n_kv, k_begin + per);
    pdl_wait();

    extern __shared__ __align__(16) uint8_t ring[];  // the warps' rings, then the warps' outputs
    float m[G], l[G], acc[G][DPL];
    const float* q = a.q + static_cast<int64_t>(t) * a.q_row + static_cast<int64_t>(h0) * a.q_stride;
    attend_keys_ring<DPL, kHalf, G, kAttnWarps>(a, caches.k(t), caches.v(t), q, a.q_stride, group, kvh, k_begin, k_end, warp, lane,
                                                ring + warp * (ring_smem_bytes<DPL, kHalf, G, kAttnWarps>() / kAttnWarps), m, l, acc);
    trace_phase(1);  // its keys done
    __shared__ float sm_m[kAttnWarps * G], sm_l[kAttnWarps * G], sm_f[kAttnWarps * G];
    static_assert(sizeof(float) * kAttnWarps * G * D <= ring_smem_bytes<DPL, kHalf, G, kAttnWarps>());
    float* sm_acc = reinterpret_cast<float*>(ring);
    __syncthreads();  // every warp is done with its ring
    merge_warps<DPL, G, kAttnWarps>(group, warp, lane, m, l, acc, sm_m, sm_l, sm_f, sm_acc, [&](int i, int d, float M, float L, float O) {
        const int h = h0 + i;
        if (used == 1) {
            a.out[(static_cast<int64_t>(t) * a.heads + h) * D + d] = O / L;
        } else {
            float* pp = a.partial + ((static_cast<int64_t>(t) * a.heads + h) * nsplit + split) * (D + 2);
            if (d == 0) {
                pp[0] = M;
                pp[1] = L;
            }
            pp[2 + d] = O;
        }
    });
    trace_phase(2);  // merged and written
}

template <int DPL, bool kHalf, int G>
__global__ void __launch_bounds__(kAttnWarps * 32) attn_kernel(const AttnArgs a, int group, int nsplit) {
    attn_split_block<DPL, kHalf, G>(a, group, nsplit, CallCaches{a});
}
template <int DPL, bool kHalf, int G>
__global__ void __launch_bounds__(kAttnWarps * 32) attn_rows_kernel(const AttnArgs a, int group, int nsplit, const RowCaches rc) {
    attn_split_block<DPL, kHalf, G>(a, group, nsplit, PerRowCaches{rc});
}

// The same attention without a second kernel. Grid (C, kv head x head chunk, token) in clusters
// of C blocks along x: block s takes split s of cluster_key_split(n_kv, C) (a split may be empty:
// its block still takes part in the cluster's barriers), and the C blocks merge their results
// through distributed shared memory, each block producing 1/C of the outputs. One cluster takes
// any context (launch_attention sends contexts beyond cluster x cluster_keys keys to the split
// kernels where the host's hint says so; without a hint one cluster still covers them, slowly).
// Every order is fixed by the shape and pos: the bits do not depend on T.
inline constexpr int kClusterMax = 16;

template <int DPL, int G, int W>
constexpr size_t attn_cluster_smem_bytes() {
    return sizeof(float) * (3 * W * G + W * G * 32 * DPL + 2 * G + G * 32 * DPL + kClusterMax * G + G);
}

// The folded prep's shared memory (attn_cluster_prep_kernel): the angles' cosines and sines (128
// each), the block's query heads [G][D], a head's scratch per warp [W][D], the new K and V rows in
// the cache's format (at most 4 bytes a value). It lies over the warps' outputs (sm_acc), which
// are written only once every warp is done with its keys, so the kernel's shared memory grows
// only where the region is larger than those.
template <int DPL, int G, int W>
constexpr size_t attn_prep_smem_at() { return (sizeof(float) * 3 * W * G + 15) / 16 * 16; }
template <int DPL, int G, int W>
constexpr size_t attn_prep_smem_bytes() { return sizeof(float) * (256 + (G + W + 2) * 32 * DPL); }
template <int DPL, int G, int W>
constexpr size_t attn_cluster_prep_smem_bytes() {
    return std::max(attn_cluster_smem_bytes<DPL, G, W>(), attn_prep_smem_at<DPL, G, W>() + attn_prep_smem_bytes<DPL, G, W>());
}

// One head's RMSNorm (weights norm_w; null: none) and NeoX rotation of its first n_rot dims by
// one warp, in attn_prep_kernel's order (norm.cu; attention_prep.cu's warp form keeps it too):
// the sum of squares in double, lane l adding element 32 w + l (+ 128, ...) of group w, each
// group by warp_sum, the groups in order; the same roundings. put(i, value) for each dim i;
// buf: the warp's D floats of shared memory.
template <class Put>
DF_DEV void head_norm_rope_warp(const float* src, const float* norm_w, int D, int n_rot, float eps, const float* rc,
                                const float* rs, float* buf, int lane, Put&& put) {
    __syncwarp();  // the warp's previous head is done with buf
    for (int i = lane; i < D; i += 32) buf[i] = src[i];
    __syncwarp();
    if (norm_w) {
        double tot = 0;
#pragma unroll
        for (int w = 0; w < 4; ++w) {
            double sw = 0;
            for (int i = 32 * w + lane; i < D; i += 128) sw += static_cast<double>(__fmul_rn(buf[i], buf[i]));
            tot = w == 0 ? warp_sum(sw) : tot + warp_sum(sw);
        }
        const float scale = rms_scale(tot, D, eps);
        for (int i = lane; i < D; i += 32) buf[i] = __fmul_rn(__fmul_rn(buf[i], scale), norm_w[i]);
        __syncwarp();
    }
    const int half = n_rot / 2;
    for (int i = lane; i < D; i += 32) {
        if (i < half) {
            const float c = rc[i], sn = rs[i], x0 = buf[i], x1 = buf[i + half];
            put(i, __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, sn)));
            put(i + half, __fadd_rn(__fmul_rn(x0, sn), __fmul_rn(x1, c)));
        } else if (i >= n_rot) {
            put(i, buf[i]);
        }
    }
}

// The block's share of the folded prep, after pdl_wait: warp w takes jobs w, w + W, ... of the
// group's query heads (normed and rotated into qs [group][D]) and the KV head (k normed and
// rotated, v as it is, both in the cache's format into `fresh`; with `store` also into the cache
// at the token's position, as attn_prep_kernel stores them).
template <int DPL, bool kHalf, int W>
DF_DEV void prep_heads(const AttnArgs& a, const HeadPrep& p, int group, int h0, int kvh, bool store, int t, int warp,
                       int lane, const float* rc, const float* rs, float* qs, float* bufs, uint8_t* fresh) {
    constexpr int D = 32 * DPL;
    using Elem = std::conditional_t<kHalf, __half, float>;
    auto conv = [](float x) -> Elem {
        if constexpr (kHalf) return __float2half_rn(x);
        else return x;
    };
    float* const buf = bufs + warp * D;
    for (int j = warp; j <= group; j += W) {
        if (j < group) {
            const float* src = a.q + static_cast<int64_t>(t) * a.q_row + static_cast<int64_t>(h0 + j) * a.q_stride;
            head_norm_rope_warp(src, p.q_norm, D, p.n_rot, p.eps, rc, rs, buf, lane, [&](int i, float x) { qs[j * D + i] = x; });
            continue;
        }
        const int64_t row = static_cast<int64_t>(a.kv_heads) * D, head = static_cast<int64_t>(kvh) * D;
        const int64_t at = static_cast<int64_t>(a.pos[t]) * row + head;
        Elem* const fk = reinterpret_cast<Elem*>(fresh);
        Elem* const fv = fk + D;
        Elem* const ck = static_cast<Elem*>(p.k_cache) + at;
        Elem* const cv = static_cast<Elem*>(p.v_cache) + at;
        const float* const vs = p.v + t * row + head;
        for (int i = lane; i < D; i += 32) {
            const Elem e = conv(vs[i]);
            fv[i] = e;
            if (store) cv[i] = e;
        }
        head_norm_rope_warp(p.k + t * row + head, p.k_norm, D, p.n_rot, p.eps, rc, rs, buf, lane, [&](int i, float x) {
            const Elem e = conv(x);
            fk[i] = e;
            if (store) ck[i] = e;
        });
    }
}

// No folded prep (the plain cluster kernels).
struct NoPrep {};

// Prep: NoPrep, or (attn_cluster_prep_kernel, one token) the q/k norm, RoPE and KV store that
// attn_prep_kernel would have run before: the raw q heads at a.q, the new row from shared memory.
template <int DPL, bool kHalf, int G, int W, class Caches, class Prep = NoPrep>
DF_DEV void attn_cluster_block(const AttnArgs& a, int group, const Caches& caches, const Prep& prep = {}) {
    pdl_trigger();  // the split before pdl_wait: no kernel of this forward writes positions (launch.cuh)
    constexpr bool kPrep = std::is_same_v<Prep, HeadPrep>;
    constexpr int D = 32 * DPL;
    cg::cluster_group cluster = cg::this_cluster();
    const int C = static_cast<int>(cluster.num_blocks());
    const int split = blockIdx.x, t = blockIdx.z;  // the grid's x extent is one cluster: split = the block's rank
    const int ratio = a.heads / a.kv_heads, chunks = ratio / group;
    const int kvh = blockIdx.y / chunks;
    const int h0 = kvh * ratio + (blockIdx.y % chunks) * group;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

    const int n_kv = a.pos[t] + 1;
    // The whole cluster returns (none of its blocks reaches a barrier): a token of the split kernels.
    if (a.skip_above > 0 && n_kv > a.skip_above) return;
    const int per = cluster_key_split(n_kv, C).per;
    const int k_begin = min(split * per, n_kv), k_end = min(n_kv, k_begin + per);

    extern __shared__ float smem[];
    float* const rc = smem + attn_prep_smem_at<DPL, G, W>() / sizeof(float);  // kPrep's region
    float* const rs = rc + 128;
    float* const qs = rs + 128;
    float* const bufs = qs + G * D;
    uint8_t* const fresh = reinterpret_cast<uint8_t*>(bufs + W * D);
    if constexpr (kPrep) {
        for (int i = threadIdx.x; i < prep.n_rot / 2; i += blockDim.x) {
            // ggml's rope cache, as attn_prep_kernel: theta_i by i repeated f32 multiplications.
            float theta = static_cast<float>(a.pos[t]);
            for (int k = 0; k < i; ++k) theta *= prep.theta_scale;
            rc[i] = cosf(theta);
            rs[i] = sinf(theta);
        }
    }
    auto wait = [&] {
        pdl_wait();
        if constexpr (kPrep) {
            __syncthreads();  // the angles are in place
            prep_heads<DPL, kHalf, W>(a, prep, group, h0, kvh, split == 0, t, warp, lane, rc, rs, qs, bufs, fresh);
            __syncthreads();  // the block's queries and the new row are in place
            trace_phase(7);
        }
    };

    float m[G], l[G], acc[G][DPL];
    const float* q = kPrep ? qs : a.q + static_cast<int64_t>(t) * a.q_row + static_cast<int64_t>(h0) * a.q_stride;
    attend_keys<DPL, kHalf, G, W>(a, caches.k(t), caches.v(t), q, kPrep ? D : a.q_stride, group, kvh, k_begin, k_end,
                                  cache_settled(a, caches, t), kPrep ? fresh : nullptr, warp, lane, wait, m, l, acc);
    trace_phase(1);  // its keys done
    if constexpr (kPrep) __syncthreads();  // every warp is done with the prep's region

    float* sm_m = smem;                     // [W][G]
    float* sm_l = sm_m + W * G;             // [W][G]
    float* sm_f = sm_l + W * G;             // [W][G]
    float* sm_acc = sm_f + W * G;           // [W][G][D]
    float* blk_m = sm_acc + W * G * D;      // the block's merged result: [G]
    float* blk_l = blk_m + G;               // [G]
    float* blk_o = blk_l + G;               // [G][D]
    float* cl_f = blk_o + G * D;            // the cluster's blocks' weights e^(m_c - M): [C][G]
    float* hd_l = cl_f + kClusterMax * G;   // per head: the denominator over the cluster
    merge_warps<DPL, G, W>(group, warp, lane, m, l, acc, sm_m, sm_l, sm_f, sm_acc, [&](int i, int d, float M, float L, float O) {
        if (d == 0) {
            blk_m[i] = M;
            blk_l[i] = L;
        }
        blk_o[i * D + d] = O;
    });
    trace_phase(2);  // the block's warps merged
    cluster.sync();  // every block's result is in its shared memory
    trace_phase(3);
    // The cluster's weights: lane c of head i's C consecutive lanes reads block c's (m, l); the
    // maximum and the weighted sum go across those lanes by shuffles (a fixed tree: C is a power
    // of two), all heads at once. The participating warps are whole (lanes past group * C idle).
    if (threadIdx.x < (group * C + 31) / 32 * 32) {
        const int i = threadIdx.x / C, c = threadIdx.x % C;
        const bool live = i < group;
        const float mc = live ? *cluster.map_shared_rank(blk_m + i, c) : -INFINITY;
        const float lc = live ? *cluster.map_shared_rank(blk_l + i, c) : 0.f;
        float M = mc;
        for (int o = 1; o < C; o <<= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
        const float f = mc == -INFINITY ? 0.f : expf(mc - M);
        float L = lc * f;
        for (int o = 1; o < C; o <<= 1) L += __shfl_xor_sync(0xffffffffu, L, o);
        if (live) {
            cl_f[c * G + i] = f;
            if (c == 0) hd_l[i] = L;
        }
    }
    __syncthreads();
    trace_phase(4);  // the cluster's weights
    for (int idx = split * blockDim.x + threadIdx.x; idx < group * D; idx += C * blockDim.x) {
        const int i = idx / D, d = idx % D, h = h0 + i;
        float oc[kClusterMax];  // unrolled with c < C predicates: the remote loads in flight together
#pragma unroll
        for (int c = 0; c < kClusterMax; ++c) oc[c] = c < C ? *cluster.map_shared_rank(blk_o + i * D + d, c) : 0.f;
        float O = 0.f;
#pragma unroll
        for (int c = 0; c < kClusterMax; ++c)
            if (c < C) O += cl_f[c * G + i] * oc[c];
        a.out[(static_cast<int64_t>(t) * a.heads + h) * D + d] = O / hd_l[i];
    }
    trace_phase(5);  // its outputs written
    cluster.sync();  // no block leaves while another may still read its shared memory
    trace_phase(6);
}

template <int DPL, bool kHalf, int G, int W>
__global__ void __launch_bounds__(W * 32) attn_cluster_kernel(const AttnArgs a, int group) {
    attn_cluster_block<DPL, kHalf, G, W>(a, group, CallCaches{a});
}
template <int DPL, bool kHalf, int G, int W>
__global__ void __launch_bounds__(W * 32) attn_cluster_rows_kernel(const AttnArgs a, int group, const RowCaches rc) {
    attn_cluster_block<DPL, kHalf, G, W>(a, group, PerRowCaches{rc});
}
template <int DPL, bool kHalf, int G, int W>
__global__ void __launch_bounds__(W * 32) attn_cluster_prep_kernel(const AttnArgs a, int group, const HeadPrep p) {
    attn_cluster_block<DPL, kHalf, G, W>(a, group, CallCaches{a}, p);
}

// out = sum_s O_s e^(M_s - M) / sum_s L_s e^(M_s - M) over the splits of one (token, head).
// A block takes kCombineDims of the head's values (32 where that does not divide the head): thread
// s reads split s's (M, L) and forms its weight; then kCombineThreads / dims thread groups each
// sum every groups-th split, with all of a thread's loads issued before the first is used, and
// the group sums are added in order.
constexpr int kCombineThreads = 256, kCombineDims = 64, kMaxSplits = 128;
__host__ __device__ constexpr int combine_dims(int D) { return D % kCombineDims == 0 ? kCombineDims : 32; }
__global__ void __launch_bounds__(kCombineThreads) attn_combine_kernel(const float* partial, int heads, int D, int nsplit,
                                                                       int split_keys, int skip_upto, const int32_t* pos,
                                                                       float* out) {
    pdl_trigger();  // the split before pdl_wait: no kernel of this forward writes positions (launch.cuh)
    const int dims = combine_dims(D), parts = D / dims, h = blockIdx.x / parts, t = blockIdx.y, tid = threadIdx.x;
    const int used = key_split(pos[t] + 1, nsplit, split_keys).used;
    if (used == 1 || pos[t] + 1 <= skip_upto) return;  // the attention kernel wrote the result, or the cluster kernel
    pdl_wait();
    const float* pp = partial + (static_cast<int64_t>(t) * heads + h) * nsplit * (D + 2);
    // Thread s < used holds split s's (M, L); the maximum and the weighted sum of the L by two
    // block-wide trees in a fixed order (not a serial loop over the splits).
    static_assert(kMaxSplits <= kCombineThreads);
    __shared__ float sm_f[kMaxSplits], sm_o[kCombineThreads], sm_w[kCombineThreads / 32];
    const float ms = tid < used ? __ldcg(pp + tid * (D + 2)) : -INFINITY;
    const float ls = tid < used ? __ldcg(pp + tid * (D + 2) + 1) : 0.f;
    auto block_reduce = [&]<bool kMax>(float v) {  // the maximum or the sum over the block
        v = kMax ? warp_max(v) : warp_sum(v);
        __syncthreads();  // sm_w's previous use is over
        if ((tid & 31) == 0) sm_w[tid >> 5] = v;
        __syncthreads();
        v = sm_w[0];
#pragma unroll
        for (int w = 1; w < kCombineThreads / 32; ++w) v = kMax ? fmaxf(v, sm_w[w]) : v + sm_w[w];
        return v;
    };
    const float M = block_reduce.template operator()<true>(ms);
    const float f = ms == -INFINITY ? 0.f : expf(ms - M);
    if (tid < kMaxSplits) sm_f[tid] = f;
    const float L = block_reduce.template operator()<false>(ls * f);  // its barriers publish sm_f
    const int groups = kCombineThreads / dims, sg = tid / dims, d = (blockIdx.x % parts) * dims + tid % dims;
    auto sum = [&]<int kPer>() {  // kPer: splits per thread at most
        float v[kPer];
#pragma unroll
        for (int k = 0; k < kPer; ++k) {
            const int s = sg + k * groups;
            v[k] = s < used ? __ldcg(pp + s * (D + 2) + 2 + d) : 0.f;
        }
        float O = 0.f;
#pragma unroll
        for (int k = 0; k < kPer; ++k) {
            const int s = sg + k * groups;
            if (s < used) O = fmaf(v[k], sm_f[s], O);
        }
        return O;
    };
    sm_o[tid] = dims == kCombineDims ? sum.template operator()<kMaxSplits * kCombineDims / kCombineThreads>()
                                     : sum.template operator()<kMaxSplits * 32 / kCombineThreads>();
    __syncthreads();
    if (tid < dims) {
        float v = sm_o[tid];
        for (int k = 1; k < groups; ++k) v += sm_o[k * dims + tid];
        out[(static_cast<int64_t>(t) * heads + h) * D + d] = v / L;
    }
}

// The split kernel: as many blocks as are resident at once (latency is hidden by warps as much
// as by each warp's ring), bounded by the scratch for partial results, then the combine kernel.
// The split depends on the head layout and the device only (not on T): a token's result is then
// the same in a one-token step and in a verify pass of up to 8 tokens.
template <int DPL, int G>
void attn_split_launch(const AttnArgs& a, const RowCaches* rows, int base_blocks, int group, cudaStream_t s) {
    const size_t per_split = static_cast<size_t>(kMaxDecodeTokens) * a.heads * (a.head_dim + 2);
    int nsplit = 1;
    auto go = [&]<bool kHalf>() {
        auto* lone = attn_kernel<DPL, kHalf, G>;
        auto* per_row = attn_rows_kernel<DPL, kHalf, G>;
        constexpr int smem = ring_smem_bytes<DPL, kHalf, G, kAttnWarps>();
        static int per_sm = 0;  // ops are issued from one thread
        if (per_sm == 0) {
            DF_CUDA_CHECK(cudaFuncSetAttribute(lone, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
            DF_CUDA_CHECK(cudaFuncSetAttribute(per_row, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
            DF_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, lone, kAttnWarps * 32, smem));
            per_sm = std::max(per_sm, 1);
        }
        // One wave of one token's blocks: the device's resident blocks over the head groups (the
        // lone kernel's, for rows of several sequences too: the split is what fixes the bits).
        nsplit = std::clamp(per_sm * a.sm_count / base_blocks, 1, kMaxSplits);
        while (nsplit > 1 && per_split * nsplit > a.partial_floats) --nsplit;
        const dim3 grid(nsplit, base_blocks, a.T);
        if (rows)
            launch(per_row, grid, kAttnWarps * 32, smem, s, a, group, nsplit, *rows);
        else
            launch(lone, grid, kAttnWarps * 32, smem, s, a, group, nsplit);
    };
    if (a.half_cache)
        go.template operator()<true>();
    else
        go.template operator()<false>();
    if (nsplit > 1)
        launch(attn_combine_kernel, dim3(a.heads * (a.head_dim / combine_dims(a.head_dim)), a.T), kCombineThreads, 0,
               s, a.partial, a.heads, a.head_dim, nsplit, a.split_keys, a.skip_upto, a.pos, a.out);
}

// Before a cluster kernel's launch: its shared memory and cluster-size attributes, set once
// (`ready`: the caller's flag per instantiation; ops are issued from one thread), and the size C.
void cluster_kernel_setup(std::initializer_list<const void*> kernels, size_t smem, bool& ready, int C) {
    if (!ready) {
        for (const void* k : kernels) {
            DF_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
            DF_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
        }
        ready = true;
    }
    DF_CUDA_REQUIRE(C <= kClusterMax && (C & (C - 1)) == 0, "attention: cluster size must be 1, 2, 4, 8 or 16");
}

// f.template operator()<G>() with the cluster kernels' head registers for a group of `group`
// query heads: a power of two >= group.
template <class F>
void with_cluster_group(int group, F&& f) {
    if (group == 1)
        f.template operator()<1>();
    else if (group == 2)
        f.template operator()<2>();
    else if (group <= 4)
        f.template operator()<4>();
    else
        f.template operator()<kMaxGroup>();
}

// The cluster kernel: one cluster of C blocks per head group and token.
template <int DPL, bool kHalf, int G>
void attn_cluster_launch(const AttnArgs& a, const RowCaches* rows, int base_blocks, int group, cudaStream_t s) {
    constexpr int W = kClusterWarps;
    auto* lone = attn_cluster_kernel<DPL, kHalf, G, W>;
    auto* per_row = attn_cluster_rows_kernel<DPL, kHalf, G, W>;
    constexpr size_t smem = attn_cluster_smem_bytes<DPL, G, W>();
    static bool ready = false;
    const int C = a.cluster;
    cluster_kernel_setup({reinterpret_cast<const void*>(lone), reinterpret_cast<const void*>(per_row)}, smem, ready, C);
    const dim3 grid(C, base_blocks, a.T);
    if (rows)
        launch_cluster(per_row, grid, W * 32, smem, s, C, a, group, *rows);
    else
        launch_cluster(lone, grid, W * 32, smem, s, C, a, group);
}

// The cluster kernel with the prep folded in: one cluster per head group (one token).
template <int DPL, bool kHalf, int G>
void attn_cluster_prep_launch(const AttnArgs& a, const HeadPrep& p, int base_blocks, int group, cudaStream_t s) {
    constexpr int W = kClusterWarps;
    auto* kernel = attn_cluster_prep_kernel<DPL, kHalf, G, W>;
    constexpr size_t smem = attn_cluster_prep_smem_bytes<DPL, G, W>();
    static bool ready = false;
    const int C = a.cluster;
    cluster_kernel_setup({reinterpret_cast<const void*>(kernel)}, smem, ready, C);
    launch_cluster(kernel, dim3(C, base_blocks, 1), W * 32, smem, s, C, a, group, p);
}

// The largest divisor of ratio up to cap: query heads per block.
inline int head_group(int ratio, int cap) {
    for (int g = std::min(ratio, cap); g > 1; --g)
        if (ratio % g == 0) return g;
    return 1;
}

// The split kernels for head groups of `group` (at most split_heads): head registers exact for
// 3 and 6 (the 27B's groups of 6; its per-key work is by far the largest), else a power of two.
template <int DPL>
void attn_split_dispatch(const AttnArgs& a, const RowCaches* rows, cudaStream_t s) {
    const int ratio = a.heads / a.kv_heads, group = head_group(ratio, std::min(a.split_heads, kMaxGroup));
    const int base_blocks = a.kv_heads * (ratio / group);
    switch (group) {
        case 1: attn_split_launch<DPL, 1>(a, rows, base_blocks, group, s); break;
        case 2: attn_split_launch<DPL, 2>(a, rows, base_blocks, group, s); break;
        case 3: attn_split_launch<DPL, 3>(a, rows, base_blocks, group, s); break;
        case 4: attn_split_launch<DPL, 4>(a, rows, base_blocks, group, s); break;
        case 6: attn_split_launch<DPL, 6>(a, rows, base_blocks, group, s); break;
        default: attn_split_launch<DPL, kMaxGroup>(a, rows, base_blocks, group, s); break;
    }
}

// The cluster kernel for the tokens whose context fits one cluster, the split kernels for the
// others, as far as the host's pos0_hint tells which are there (a kernel launched alone takes
// every token, so a stale hint costs speed, never correctness).
template <int DPL>
void attn_dispatch(const AttnArgs& a, const RowCaches* rows, int last, cudaStream_t s) {
    if (a.cluster == 0) {
        attn_split_dispatch<DPL>(a, rows, s);
        return;
    }
    const int fits = a.cluster * a.cluster_keys;
    const bool short_ones = a.pos0_hint + 1 <= fits, long_ones = last + 1 > fits;
    if (short_ones) {
        AttnArgs c = a;
        c.skip_above = long_ones ? fits : 0;
        const int ratio = a.heads / a.kv_heads, group = head_group(ratio, kMaxGroup);
        const int base_blocks = a.kv_heads * (ratio / group);
        with_cluster_group(group, [&]<int G>() {
            if (a.half_cache)
                attn_cluster_launch<DPL, true, G>(c, rows, base_blocks, group, s);
            else
                attn_cluster_launch<DPL, false, G>(c, rows, base_blocks, group, s);
        });
    }
    if (long_ones) {
        AttnArgs b = a;
        b.skip_upto = short_ones ? fits : 0;
        attn_split_dispatch<DPL>(b, rows, s);
    }
}

// The checks of every decode attention launch's arguments.
void require_attn_args(const AttnArgs& a) {
    DF_CUDA_REQUIRE(a.head_dim % 32 == 0 && a.head_dim <= 256, "attention: head_dim must be 32, 64, ..., 256");
    DF_CUDA_REQUIRE(a.kv_heads > 0 && a.heads % a.kv_heads == 0, "attention: heads must be a multiple of kv_heads");
    DF_CUDA_REQUIRE(a.split_keys >= 1, "attention: split_keys must be positive");
    DF_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(a.k_cache) % 16 == 0 && reinterpret_cast<uintptr_t>(a.v_cache) % 16 == 0,
                    "attention: caches must be 16-byte aligned");
}

}  // namespace

void launch_attention(const AttnArgs& a, cudaStream_t s, const RowCaches* rows, int last_hint) {
    if (a.T <= 0) return;
    require_attn_args(a);
    const int ratio = a.heads / a.kv_heads, group = head_group(ratio, kMaxGroup);
    if (rows) {
        DF_CUDA_REQUIRE(a.T <= kMaxLaneRows, "attention: rows of several sequences take at most 8 tokens");
        for (int t = 0; t < a.T; ++t)
            DF_CUDA_REQUIRE(rows->k[t] && rows->v[t] && reinterpret_cast<uintptr_t>(rows->k[t]) % 16 == 0 &&
                                reinterpret_cast<uintptr_t>(rows->v[t]) % 16 == 0,
                            "attention: every row's caches must be set and 16-byte aligned");
    }
    const int last = rows ? last_hint : a.pos0_hint + a.T - 1;
    if (a.T > kMaxDecodeTokens) {
        if (attention_prefill_supported(a.head_dim)) {
            launch_attention_prefill(a, group, s);
            return;
        }
        // Other head dims: slices of up to 8 tokens through the split kernel below, whose
        // scratch for partial results holds 8 tokens.
        for (int t0 = 0; t0 < a.T; t0 += kMaxDecodeTokens) {
            AttnArgs b = a;
            b.T = std::min(kMaxDecodeTokens, a.T - t0);
            b.q = a.q + static_cast<int64_t>(t0) * a.q_row;
            b.pos = a.pos + t0;
            b.out = a.out + static_cast<int64_t>(t0) * a.heads * a.head_dim;
            launch_attention(b, s);
        }
        return;
    }
    switch (a.head_dim / 32) {
        case 1: attn_dispatch<1>(a, rows, last, s); break;
        case 2: attn_dispatch<2>(a, rows, last, s); break;
        case 3: attn_dispatch<3>(a, rows, last, s); break;
        case 4: attn_dispatch<4>(a, rows, last, s); break;
        case 5: attn_dispatch<5>(a, rows, last, s); break;
        case 6: attn_dispatch<6>(a, rows, last, s); break;
        case 7: attn_dispatch<7>(a, rows, last, s); break;
        case 8: attn_dispatch<8>(a, rows, last, s); break;
    }
}

bool launch_attention_prepped(const AttnArgs& a, const HeadPrep& p, cudaStream_t s) {
    const bool fits = a.cluster > 0 && a.pos0_hint + 1 <= a.cluster * a.cluster_keys;
    if (!attn_prep_fused() || a.T != 1 || !fits || (a.head_dim != 128 && a.head_dim != 256) || p.n_rot > a.head_dim ||
        p.n_rot % 2 != 0)
        return false;
    require_attn_args(a);
    DF_CUDA_REQUIRE(p.k_cache == a.k_cache && p.v_cache == a.v_cache, "attention: the prep stores into the caches it reads");
    const int ratio = a.heads / a.kv_heads, group = head_group(ratio, kMaxGroup);
    const int base_blocks = a.kv_heads * (ratio / group);
    AttnArgs c = a;
    c.skip_above = 0;  // one cluster takes any context (the hint only chose this path)
    auto by_dim = [&]<int DPL>() {
        with_cluster_group(group, [&]<int G>() {
            if (a.half_cache)
                attn_cluster_prep_launch<DPL, true, G>(c, p, base_blocks, group, s);
            else
                attn_cluster_prep_launch<DPL, false, G>(c, p, base_blocks, group, s);
        });
    };
    if (a.head_dim == 128)
        by_dim.template operator()<4>();
    else
        by_dim.template operator()<8>();
    return true;
}

}  // namespace df::cuda
