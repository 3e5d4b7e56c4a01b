// Small device helpers shared by the kernels: loads with cache hints, exact small-integer to
// float conversion, warp reductions.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#ifdef DF_CUDA_TRACE
#include "backend/cuda/trace.h"
#endif

#define DF_DEV __device__ __forceinline__

namespace df::cuda {

// Weights are streamed once per token: keep them out of L1 so the grids and activations that
// are reused stay there.
DF_DEV uint4 ld_stream16(const void* p) {
    uint4 r;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}
DF_DEV uint2 ld_stream8(const void* p) {
    uint2 r;
    asm("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(r.x), "=r"(r.y) : "l"(p));
    return r;
}
DF_DEV uint32_t ld_stream4(const void* p) {
    uint32_t r;
    asm("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(r) : "l"(p));
    return r;
}
// Read-only loads that may hit L1 (block headers shared by several lanes).
// arr[i] of an array in a kernel's parameters for a run-time i < N, by N - 1 selects: indexing
// the parameters with a run-time value would copy them to local memory.
template <class P, int N>
DF_DEV P param_pick(const P (&arr)[N], int i) {
    P p = arr[0];
#pragma unroll
    for (int j = 1; j < N; ++j)
        if (i == j) p = arr[j];
    return p;
}

DF_DEV uint32_t ldg_u8(const uint8_t* p) { return __ldg(p); }
DF_DEV uint32_t ldg_u16(const uint8_t* p) { return __ldg(reinterpret_cast<const unsigned short*>(p)); }
DF_DEV uint32_t ldg_u32(const uint8_t* p) { return __ldg(reinterpret_cast<const unsigned int*>(p)); }
DF_DEV uint2 ldg_u64(const uint8_t* p) { return __ldg(reinterpret_cast<const uint2*>(p)); }
DF_DEV uint4 ldg_u128(const uint8_t* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

#ifdef DF_CUDA_TRACE
// The decode timeline (trace.h): this translation unit's pointer to the event buffer and its
// every-block switch (set by launch()), and the stamp of an event: kind 0 started, 1 past
// pdl_wait, 2 + k phase k. Block 0 stamps every kind; with DF_CUDA_TRACE_BLOCKS=1 every block
// (block 0 too) also stamps kinds 0 and 1 as a pair of records: the event with kTraceEveryBlock
// set, then (blockIdx.x | blockIdx.y << 24 | blockIdx.z << 44, %smid).
namespace {
__device__ unsigned long long* df_trace_buf;
__device__ int df_trace_blocks;
}
DF_DEV void trace_event(unsigned kind) {
    unsigned long long* b = df_trace_buf;
    if (!b || threadIdx.x != 0) return;
    const bool first = (blockIdx.x | blockIdx.y | blockIdx.z) == 0;
    const bool every = df_trace_blocks && (kind < 2 || kind == kTraceEnd);
    if (!first && !every) return;
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    const unsigned long long w = kind | (static_cast<unsigned long long>(blockDim.x) << kTraceBlock) |
                                 (static_cast<unsigned long long>(gridDim.x) << kTraceGridX) |
                                 (static_cast<unsigned long long>(gridDim.y) << kTraceGridY) |
                                 (static_cast<unsigned long long>(gridDim.z) << kTraceGridZ);
    if (first) {
        const unsigned long long i = atomicAdd(b, 1ull);
        if (i < kTraceCap) reinterpret_cast<ulonglong2*>(b)[1 + i] = make_ulonglong2(t, w);
    }
    if (every) {
        unsigned smid;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
        const unsigned long long i = atomicAdd(b, 2ull);
        if (i + 1 >= kTraceCap) return;
        const unsigned long long where = blockIdx.x | (static_cast<unsigned long long>(blockIdx.y) << 24) |
                                         (static_cast<unsigned long long>(blockIdx.z) << 44);
        reinterpret_cast<ulonglong2*>(b)[1 + i] = make_ulonglong2(t, w | kTraceEveryBlock);
        reinterpret_cast<ulonglong2*>(b)[2 + i] = make_ulonglong2(where, smid);
    }
}
#endif

// Programmatic dependent launch (launch.cuh). pdl_trigger: the next kernel in the stream may be
// scheduled now (it still waits for this one before touching shared data). pdl_wait: blocks
// until the previous kernel has completed and its writes are visible; a thread calls it before
// its first access to memory that another kernel writes or reads. No-ops without a dependency.
DF_DEV void pdl_trigger() {
#ifdef DF_CUDA_TRACE
    trace_event(0);
#endif
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
DF_DEV void pdl_wait() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
#ifdef DF_CUDA_TRACE
    trace_event(1);
#endif
}
// The block's end (trace builds; kind kTraceEnd, every block with DF_CUDA_TRACE_BLOCKS=1): all of
// its threads call it once they are done, so the stamp is the block's last moment.
DF_DEV void trace_block_end() {
#ifdef DF_CUDA_TRACE
    __syncthreads();
    trace_event(kTraceEnd);
#endif
}
// A stamp of phase k (0..12) inside a kernel, block 0 only (trace builds; kind 2 + k):
// scripts/trace_step.py prints them after the kernel's release. A no-op in normal builds.
DF_DEV void trace_phase(unsigned k) {
#ifdef DF_CUDA_TRACE
    trace_event(2 + k);
#endif
}

// Both, for kernels whose every access depends on the previous kernel.
DF_DEV void pdl_begin() {
    pdl_trigger();
    pdl_wait();
}

DF_DEV uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// Shared-memory loads from shared-window addresses. Volatile: they stay ordered with the cp.async
// copies and waits (also volatile asm) that fill the same bytes.
DF_DEV uint4 lds128_at(uint32_t a) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
    return v;
}
DF_DEV uint32_t lds32_at(uint32_t a) {
    uint32_t v;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(a));
    return v;
}

// A release + acquire fence at GPU scope: lighter than __threadfence()'s sequentially consistent one.
DF_DEV void fence_acq_rel_gpu() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }
// *p += v with release semantics at GPU scope (the writes before it, and those ordered before it
// by a barrier, are visible to whoever observes the new value); returns the old value.
DF_DEV unsigned atomic_add_release_gpu(unsigned* p, unsigned v) {
    unsigned old;
    asm volatile("atom.release.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
    return old;
}

// Asynchronous global -> shared copies of N = 4, 8 or 16 bytes (both addresses N-aligned);
// 16-byte copies bypass L1 (weights are streamed once).
template <int N>
DF_DEV void cp_async(uint32_t smem, const void* gmem) {  // smem: a shared-window address
    static_assert(N == 4 || N == 8 || N == 16);
    if constexpr (N == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem), "l"(gmem) : "memory");
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(smem), "l"(gmem), "n"(N) : "memory");
}
template <int N>
DF_DEV void cp_async(void* smem, const void* gmem) { cp_async<N>(smem_addr(smem), gmem); }
// 16 bytes global -> shared, or zeros when !ok (source size 0: gmem is not read, but must be valid).
DF_DEV void cp_async16_or_zero(void* smem, const void* gmem, bool ok) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(smem)), "l"(gmem), "r"(ok ? 16 : 0)
                 : "memory");
}
DF_DEV void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
DF_DEV void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

DF_DEV float f16_bits_to_f32(uint32_t h) { return __half2float(__ushort_as_half(static_cast<unsigned short>(h & 0xFFFFu))); }

// Byte k of w (0..255) as an exact float: the byte becomes the low mantissa bits of 2^23, one
// PRMT and one FADD instead of the slow integer-to-float unit. `off` is subtracted exactly.
DF_DEV float byte_to_f32(uint32_t w, int k, float off = 0.f) {
    return __int_as_float(__byte_perm(w, 0x4B000000u, 0x7650u | static_cast<unsigned>(k))) - (8388608.f + off);
}

// Byte k of w as a signed int8, exactly.
DF_DEV float sbyte_to_f32(uint32_t w, int k) { return byte_to_f32(w ^ 0x80808080u, k, 128.f); }

DF_DEV uint32_t byte_of(uint32_t w, int k) { return (w >> (8 * k)) & 0xFFu; }

// Spreads the 4 low bits of x to bit 0 of each byte (bit i -> bit 8i).
DF_DEV uint32_t spread4(uint32_t x) { return ((x & 0xFu) * 0x00204081u) & 0x01010101u; }

DF_DEV float flip_if(float f, uint32_t mask, int bit) { return (mask >> bit) & 1u ? -f : f; }

DF_DEV float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
DF_DEV float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
DF_DEV double warp_sum(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// ggml's scalar activations (accurate expf; the kernels are built without fast math).
DF_DEV float silu_f(float x) { return x / (1.0f + expf(-x)); }
DF_DEV float sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }
DF_DEV float softplus_f(float x) { return x > 20.0f ? x : logf(1.0f + expf(x)); }

}  // namespace df::cuda
