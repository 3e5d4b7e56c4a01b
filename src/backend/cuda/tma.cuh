// Thread block clusters, mbarriers and bulk tensor copies (TMA) on sm_90, for the prefill GEMM's
// activation slabs (gemm_wg.cuh): one copy per block of a cluster, delivered to every block of it
// (multicast), so a slab crosses L2 once per cluster instead of once per block.
//
// Shared-memory addresses are 32-bit shared-window addresses (smem_addr). The instructions exist
// from sm_90 on; elsewhere these trap, and the host launches no kernel that uses them there.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "backend/cuda/device_util.cuh"

namespace df::cuda {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define DF_TMA_DEVICE 1
#else
#define DF_TMA_DEVICE 0
#endif

DF_DEV uint32_t cluster_rank() {
    uint32_t r = 0;
#if DF_TMA_DEVICE
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
#endif
    return r;
}
DF_DEV uint32_t cluster_blocks() {
    uint32_t n = 1;
#if DF_TMA_DEVICE
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
#endif
    return n;
}
// Every thread of every block of the cluster: what each did before is visible to all after.
DF_DEV void cluster_sync_all() {
#if DF_TMA_DEVICE
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
#else
    __trap();
#endif
}

DF_DEV void mbar_init(uint32_t bar, uint32_t arrivals) {
#if DF_TMA_DEVICE
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(arrivals) : "memory");
#endif
}
// After a block's mbar_init calls, before other blocks (or the copy engine) may use them.
DF_DEV void mbar_init_fence() {
#if DF_TMA_DEVICE
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}
// The calls taking `on` act only where it is true, as predicated instructions: a branch around
// them inside the wgmma GEMM's loop made ptxas serialize its wgmma (C7518).

// One arrival that also expects `bytes` of copies to complete on the barrier in this phase.
DF_DEV void mbar_arrive_expect_tx(bool on, uint32_t bar, uint32_t bytes) {
#if DF_TMA_DEVICE
    asm volatile(
        "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %0, 0;\n\t"
        "@p mbarrier.arrive.expect_tx.shared::cta.b64 _, [%1], %2;\n\t}" ::"r"(static_cast<int>(on)),
        "r"(bar), "r"(bytes)
        : "memory");
#endif
}
// One arrival on the barrier at the same offset in block `rank` of the cluster (the default
// release at CTA scope: a cluster-scope release is a MEMBAR per call, which stalled the GEMM).
DF_DEV void mbar_arrive_remote(bool on, uint32_t bar, uint32_t rank) {
#if DF_TMA_DEVICE
    asm volatile(
        "{\n\t.reg .b32 r;\n\t.reg .pred p;\n\tsetp.ne.b32 p, %0, 0;\n\tmapa.shared::cluster.u32 r, %1, %2;\n\t"
        "@p mbarrier.arrive.shared::cluster.b64 _, [r];\n\t}" ::"r"(static_cast<int>(on)),
        "r"(bar), "r"(rank)
        : "memory");
#endif
}
// Waits until the barrier's phase of this parity has completed.
DF_DEV void mbar_wait(uint32_t bar, uint32_t parity) {
#if DF_TMA_DEVICE
    asm volatile(
        "{\n\t.reg .pred p;\n\tW_%=:\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n\t"
        "@!p bra W_%=;\n\t}" ::"r"(bar),
        "r"(parity)
        : "memory");
#endif
}
// Barrier of warpgroup w's 128 threads (named barrier 1 + w; 0 is __syncthreads').
DF_DEV void warpgroup_sync(int w) {
#if DF_TMA_DEVICE
    asm volatile("bar.sync %0, 128;" ::"r"(1 + w) : "memory");
#endif
}
// Where `on`: the old value of the shared word at addr, incremented (the others get 0; predicated,
// no branch on the thread).
DF_DEV uint32_t atomic_add_shared(bool on, uint32_t addr) {
    uint32_t v = 0;
#if DF_TMA_DEVICE
    asm volatile(
        "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %1, 0;\n\t@p atom.shared::cta.add.u32 %0, [%2], 1;\n\t}"
        : "+r"(v)
        : "r"(static_cast<int>(on)), "r"(addr)
        : "memory");
#endif
    return v;
}
// The box of a 2-D tensor map at (c0, c1) (elements, innermost first) into shared memory at dst in
// every block of `mask` (bit r: rank r; the same offset in each), each block's barrier at `bar`
// counting the bytes that land there. Rows outside the map arrive as zeros (and count).
DF_DEV void tma_load_2d(bool on, uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1, uint16_t mask) {
#if DF_TMA_DEVICE
    const uint64_t m = reinterpret_cast<uint64_t>(map);
    asm volatile(
        "{\n\t.reg .pred p, s;\n\tsetp.ne.b32 p, %0, 0;\n\tsetp.eq.and.b16 s, %6, 1, p;\n\t"
        "@s cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%1], [%2, {%3, %4}], [%5];\n\t"
        "setp.ne.and.b16 s, %6, 1, p;\n\t"
        "@s cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%1], [%2, {%3, %4}], [%5], %6;\n\t}" ::"r"(static_cast<int>(on)),
        "r"(dst), "l"(m), "r"(c0), "r"(c1), "r"(bar), "h"(mask)
        : "memory");
#else
    __trap();
#endif
}

}  // namespace df::cuda
