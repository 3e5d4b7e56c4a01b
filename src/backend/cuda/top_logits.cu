// Backend::top_logits: a sampler's k candidates of one row of logits, selected on the device so
// that a few KB cross the bus instead of the row (600 KB-1 MB) and the host skips its selection
// pass over the vocabulary.
//
// Keys (backend/top_key.h) are distinct, so the k largest are one set. Three kernels:
//   1. many blocks: a histogram of the keys' top 12 bits (sign, exponent, 3 mantissa bits);
//   2. many blocks: each finds the bin where the count from the top reaches k, and gathers every
//      key of that bin or above (typically a few hundred) into a candidate list;
//   3. one block: the k largest candidates, sorted by a bitonic network in shared memory (a
//      radix selection over the list first when it is longer than shared memory holds: rows of
//      many equal values); it clears the histogram and the count for the next call.
// (One block alone reading the row 3-4 times left a sampled 4B token ~0.17 ms slower than a
// greedy one on the H100; these three, none: bench/RESULTS.md, session 41.)
#include <algorithm>

#include "backend/cuda/check.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/row_mass.h"
#include "backend/top_key.h"

namespace df::cuda {
namespace {

constexpr int kBinShift = 52, kBins = 1 << (64 - kBinShift);  // 4096 bins of the top 12 bits
constexpr int kScanThreads = 256, kScanPer = 16;              // kernels 1 and 2: 4096 keys a block
constexpr int kSliceKeys = kScanThreads * kScanPer;
constexpr int kSelThreads = 1024, kSelMax = 4096;             // kernel 3
constexpr int kTopMax = 1024;                                 // Backend::kTopLogitsMax

__global__ void __launch_bounds__(kScanThreads) top_hist_kernel(const float* x, int n, unsigned* hist) {
    pdl_begin();
    __shared__ unsigned h[kBins];
    for (int b = threadIdx.x; b < kBins; b += kScanThreads) h[b] = 0;
    __syncthreads();
    const int base = blockIdx.x * kSliceKeys + threadIdx.x;
    float v[kScanPer];
#pragma unroll
    for (int j = 0; j < kScanPer; ++j) {  // every load in flight before the first atomic
        const int i = base + j * kScanThreads;
        v[j] = i < n ? x[i] : 0.f;
    }
#pragma unroll
    for (int j = 0; j < kScanPer; ++j) {
        const int i = base + j * kScanThreads;
        if (i < n) atomicAdd(&h[top_key(v[j], i) >> kBinShift], 1u);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < kBins; b += kScanThreads)
        if (h[b]) atomicAdd(&hist[b], h[b]);
}

// The bin where the count from the top reaches k (warp 0 of the block; lane l holds the l-th
// 128 bins from the top).
DF_DEV int top_threshold_bin(const unsigned* hist, int k, int lane) {
    constexpr int kPerLane = kBins / 32;
    const int hi = kBins - kPerLane * lane;  // this lane's bins: [hi - kPerLane, hi)
    unsigned own = 0;
    for (int b = hi - 1; b >= hi - kPerLane; --b) own += hist[b];
    unsigned before = own;  // inclusive prefix over the lanes (higher bins first)
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const unsigned t = __shfl_up_sync(0xffffffffu, before, o);
        if (lane >= o) before += t;
    }
    before -= own;
    int bin = -1;
    const unsigned need = static_cast<unsigned>(k);
    if (before < need && need <= before + own) {
        unsigned cum = before;
        for (int b = hi - 1; b >= hi - kPerLane; --b) {
            cum += hist[b];
            if (cum >= need) {
                bin = b;
                break;
            }
        }
    }
    const unsigned who = __ballot_sync(0xffffffffu, bin >= 0);
    return __shfl_sync(0xffffffffu, bin, __ffs(who) - 1);
}

__global__ void __launch_bounds__(kScanThreads) top_gather_kernel(const float* x, int n, int k, const unsigned* hist,
                                                                  unsigned* count, unsigned long long* cand) {
    pdl_begin();
    __shared__ int s_bin;
    const int lane = threadIdx.x & 31;
    if (threadIdx.x < 32) {
        const int bin = top_threshold_bin(hist, k, lane);
        if (lane == 0) s_bin = bin;
    }
    __syncthreads();
    const unsigned long long low = static_cast<unsigned long long>(s_bin) << kBinShift;
    const int base = blockIdx.x * kSliceKeys + threadIdx.x;
    float v[kScanPer];
#pragma unroll
    for (int j = 0; j < kScanPer; ++j) {
        const int i = base + j * kScanThreads;
        v[j] = i < n ? x[i] : 0.f;
    }
#pragma unroll
    for (int j = 0; j < kScanPer; ++j) {
        const int i = base + j * kScanThreads;
        const unsigned long long key = i < n ? top_key(v[j], i) : 0;
        const bool take = i < n && key >= low;
        const unsigned who = __ballot_sync(0xffffffffu, take);
        if (!who) continue;
        unsigned first = 0;
        if (lane == __ffs(who) - 1) first = atomicAdd(count, static_cast<unsigned>(__popc(who)));
        first = __shfl_sync(0xffffffffu, first, __ffs(who) - 1);
        if (take) cand[first + __popc(who & ((1u << lane) - 1))] = key;
    }
}

// The c candidates' radix selection (8 bits a pass from the top, over the keys matching the
// prefix found so far) until every key matching it is taken: afterwards exactly k keys are
// >= the prefix. Only for lists longer than kSelMax.
DF_DEV unsigned long long top_radix_prefix(const unsigned long long* cand, int c, int k, unsigned* hist256) {
    __shared__ unsigned long long s_prefix;
    __shared__ unsigned s_need;
    __shared__ bool s_done;
    const int tid = threadIdx.x, lane = tid & 31;
    unsigned long long prefix = 0, mask = 0;
    unsigned need = static_cast<unsigned>(k);
    for (int shift = 56; shift >= 0; shift -= 8) {
        for (int i = tid; i < 256; i += kSelThreads) hist256[i] = 0;
        __syncthreads();
        for (int i = tid; i < c; i += kSelThreads) {
            const unsigned long long key = cand[i];
            if ((key & mask) == prefix) atomicAdd(&hist256[(key >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (tid < 32) {
            unsigned h[8], own = 0;  // lane l: bins 8l .. 8l + 7
#pragma unroll
            for (int j = 0; j < 8; ++j) own += h[j] = hist256[8 * lane + j];
            unsigned suffix = own;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const unsigned t = __shfl_down_sync(0xffffffffu, suffix, o);
                if (lane + o < 32) suffix += t;
            }
            unsigned above = suffix - own;
#pragma unroll
            for (int j = 7; j >= 0; --j) {
                if (above < need && need <= above + h[j]) {
                    s_prefix = prefix | (static_cast<unsigned long long>(8 * lane + j) << shift);
                    s_need = need - above;
                    s_done = h[j] == need - above;
                }
                above += h[j];
            }
        }
        __syncthreads();
        prefix = s_prefix;
        need = s_need;
        mask |= 0xffull << shift;
        const bool done = s_done;
        __syncthreads();
        if (done) break;
    }
    return prefix;
}

__global__ void __launch_bounds__(kSelThreads) top_select_kernel(const float* x, int k, const int32_t* extra, int n_extra,
                                                                 unsigned* hist, unsigned* count,
                                                                 const unsigned long long* cand, int32_t* ids, float* vals) {
    pdl_begin();
    __shared__ unsigned long long sel[kSelMax];
    __shared__ unsigned hist256[256], s_count;
    const int tid = threadIdx.x;
    const int c = static_cast<int>(*count);
    if (c <= kSelMax) {
        for (int i = tid; i < kSelMax; i += kSelThreads) sel[i] = i < c ? cand[i] : 0;
    } else {
        const unsigned long long prefix = top_radix_prefix(cand, c, k, hist256);
        if (tid == 0) s_count = 0;
        for (int i = tid; i < kSelMax; i += kSelThreads) sel[i] = 0;
        __syncthreads();
        for (int i = tid; i < c; i += kSelThreads)
            if (cand[i] >= prefix) sel[atomicAdd(&s_count, 1u)] = cand[i];  // exactly k
    }
    // Sorted larger first by a bitonic network over a power of two (the rest 0: below every key).
    const int m = c <= kSelMax ? c : k;
    int P = 1;
    while (P < m) P <<= 1;
    for (int size = 2; size <= P; size <<= 1)
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            __syncthreads();
            for (int i = tid; i < P; i += kSelThreads) {
                const int j = i ^ stride;
                if (j > i) {
                    const unsigned long long a = sel[i], b = sel[j];
                    if ((a < b) == ((i & size) == 0)) {
                        sel[i] = b;
                        sel[j] = a;
                    }
                }
            }
        }
    __syncthreads();
    if (tid < k) {
        const int32_t id = top_key_index(sel[tid]);
        ids[tid] = id;
        vals[tid] = x[id];
    }
    for (int i = tid; i < n_extra; i += kSelThreads) {
        const int32_t id = extra[i];
        ids[k + i] = id;
        vals[k + i] = x[id];
    }
    // Ready for the next call.
    for (int b = tid; b < kBins; b += kSelThreads) hist[b] = 0;
    if (tid == 0) *count = 0;
}

}  // namespace

size_t top_logits_scratch_bytes(int n) {
    return sizeof(unsigned) * (kBins + 2) + sizeof(unsigned long long) * static_cast<size_t>(n);
}

void launch_top_logits(const float* x, int n, int k, const int32_t* extra, int n_extra, int32_t* ids, float* vals,
                       void* scratch, cudaStream_t s) {
    DF_CUDA_REQUIRE(k >= 1 && k <= kTopMax && k <= n, "top_logits: k outside 1..min(n, 1024)");
    auto* hist = static_cast<unsigned*>(scratch);
    unsigned* count = hist + kBins;
    auto* cand = reinterpret_cast<unsigned long long*>(hist + kBins + 2);  // 8-byte aligned
    const int blocks = (n + kSliceKeys - 1) / kSliceKeys;
    launch(top_hist_kernel, blocks, kScanThreads, 0, s, x, n, hist);
    launch(top_gather_kernel, blocks, kScanThreads, 0, s, x, n, k, static_cast<const unsigned*>(hist), count, cand);
    launch(top_select_kernel, 1, kSelThreads, 0, s, x, k, extra, n_extra, hist, count,
           static_cast<const unsigned long long*>(cand), ids, vals);
}

// Backend::row_mass: integer terms, so the blocks' atomic adds give the same sum in any order.
__global__ void __launch_bounds__(kScanThreads) row_mass_kernel(const float* x, int n, float lmax, unsigned long long* sum) {
    pdl_begin();
    unsigned long long own = 0;
    for (int i = blockIdx.x * kScanThreads + threadIdx.x; i < n; i += gridDim.x * kScanThreads) own += mass_term(x[i], lmax);
    for (int m = 16; m > 0; m >>= 1) own += __shfl_xor_sync(0xffffffffu, own, m);
    __shared__ unsigned long long warps[kScanThreads / 32];
    if ((threadIdx.x & 31) == 0) warps[threadIdx.x >> 5] = own;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long block = 0;
        for (int w = 0; w < kScanThreads / 32; ++w) block += warps[w];
        atomicAdd(sum, block);
    }
}

void launch_row_mass(const float* x, int n, float lmax, uint64_t* sum, int sm_count, cudaStream_t s) {
    DF_CUDA_CHECK(cudaMemsetAsync(sum, 0, sizeof(uint64_t), s));
    const int blocks = std::max(1, std::min((n + kSliceKeys - 1) / kSliceKeys, 4 * sm_count));
    launch(row_mass_kernel, dim3(blocks), dim3(kScanThreads), 0, s, x, n, lmax, reinterpret_cast<unsigned long long*>(sum));
}

}  // namespace df::cuda
