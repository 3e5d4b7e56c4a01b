// Microbenchmark: how fast can a chain of dependent kernels stream weight-sized byte ranges?
// Compares register loads (what the f32 matvec does) with bulk copies into a shared-memory ring
// (cp.async.bulk + mbarrier) that start before griddepcontrol.wait, at the sizes of the 4B's
// decode matrices, as a graph of back-to-back PDL launches reading ranges larger than L2.
//
//   cmake --build build-cuda --target stream_read && build-cuda/bench/stream_read
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_runtime.h>

#include "micro_util.cuh"



__device__ __forceinline__ uint4 ld_stream(const void* p) {
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}

// Register loads: each thread keeps U 16-byte loads in flight, the first batch issued before the wait.
template <int U>
__global__ void __launch_bounds__(256) ld_read(const uint4* __restrict__ src, size_t n16, unsigned* out, const unsigned* dep) {
    trigger();
    const size_t stride = size_t{gridDim.x} * blockDim.x;
    size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x;
    uint4 v[U];
#pragma unroll
    for (int k = 0; k < U; ++k) v[k] = i + k * stride < n16 ? ld_stream(src + i + k * stride) : make_uint4(0, 0, 0, 0);
    dep_wait();
    unsigned acc = *dep;
    for (;;) {
        i += U * stride;
        uint4 w[U];
#pragma unroll
        for (int k = 0; k < U; ++k) w[k] = i + k * stride < n16 ? ld_stream(src + i + k * stride) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int k = 0; k < U; ++k) acc += v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
        if (i >= n16) break;
#pragma unroll
        for (int k = 0; k < U; ++k) v[k] = w[k];
    }
    if (acc == 0x12345678u) out[blockIdx.x] = acc;  // keeps the loads
    if (threadIdx.x == 0 && blockIdx.x == 0) out[gridDim.x] = acc;
}

__device__ __forceinline__ uint32_t sa(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void mbar_init(uint64_t* b, unsigned n) { asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(sa(b)), "r"(n)); }
__device__ __forceinline__ void mbar_expect(uint64_t* b, unsigned tx) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sa(b)), "r"(tx) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* b) { asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(sa(b)) : "memory"); }
__device__ __forceinline__ void mbar_wait(uint64_t* b, unsigned parity) {
    asm volatile(
        "{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra W;\n}\n" ::"r"(sa(b)), "r"(parity)
        : "memory");
}
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes, uint64_t* b) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(sa(dst)), "l"(src),
                 "r"(bytes), "r"(sa(b))
                 : "memory");
}

// Bulk copies into a ring of S slots of SLOT bytes: warp 8 (one lane) produces, warps 0-7 consume.
// Each block streams a contiguous range; the first S slots are requested before the wait.
template <int S>
__global__ void __launch_bounds__(288) tma_read(const uint8_t* __restrict__ src, size_t bytes, unsigned slot, unsigned* out, const unsigned* dep) {
    trigger();
    extern __shared__ __align__(128) uint8_t ring[];
    __shared__ uint64_t full[S], empty[S];
    const size_t per = (bytes / gridDim.x + slot - 1) / slot * slot;
    const size_t b0 = per * blockIdx.x, b1 = b0 + per < bytes ? b0 + per : bytes;
    const int n = b1 > b0 ? static_cast<int>((b1 - b0 + slot - 1) / slot) : 0;
    if (threadIdx.x == 0) {
        for (int s = 0; s < S; ++s) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], 8);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (warp == 8) {
        if (lane == 0) {
            for (int c = 0; c < n; ++c) {
                const int s = c % S;
                if (c >= S) mbar_wait(&empty[s], ((c / S) - 1) & 1);
                const size_t off = b0 + size_t{slot} * c;
                const unsigned len = static_cast<unsigned>((b1 - off < slot ? b1 - off : size_t{slot}));
                mbar_expect(&full[s], len);
                bulk_copy(ring + size_t{slot} * s, src + off, len, &full[s]);
            }
        }
        return;
    }
    dep_wait();
    unsigned acc = *dep;
    for (int c = 0; c < n; ++c) {
        const int s = c % S;
        mbar_wait(&full[s], (c / S) & 1);
        const size_t off = b0 + size_t{slot} * c;
        const unsigned len = static_cast<unsigned>((b1 - off < slot ? b1 - off : size_t{slot}));
        const uint4* p = reinterpret_cast<const uint4*>(ring + size_t{slot} * s);
        for (unsigned k = threadIdx.x; k < len / 16; k += 256) {
            const uint4 v = p[k];
            acc += v.x ^ v.y ^ v.z ^ v.w;
        }
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[s]);
    }
    if (acc == 0x12345678u) out[blockIdx.x] = acc;
    if (threadIdx.x == 0 && blockIdx.x == 0) out[gridDim.x] = acc;
}

int main() {
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const size_t pool = size_t{1} << 30;
    uint8_t* buf;
    unsigned* out;
    CK(cudaMalloc(&buf, pool));
    CK(cudaMemset(buf, 1, pool));
    CK(cudaMalloc(&out, 1 << 20));
    CK(cudaMemset(out, 0, 1 << 20));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    const double MB = 1 << 20;
    auto al = [](double b) { return static_cast<size_t>(b) / 4096 * 4096; };
    const size_t sizes[] = {al(2.8 * MB), al(11.1 * MB), al(26.5 * MB), al(52.9 * MB), al(413 * MB)};
    struct V {
        const char* name;
        int kind, per_sm, S;
        unsigned slot;
    };
    const V vs[] = {{"ld U4 x3/SM", 0, 3, 0, 0},    {"ld U8 x3/SM", 1, 3, 0, 0},      {"ld U4 x4/SM", 0, 4, 0, 0},
                    {"tma 4x24K x1", 2, 1, 4, 24576}, {"tma 8x12K x1", 3, 1, 8, 12288}, {"tma 4x12K x2", 2, 2, 4, 12288},
                    {"tma 6x16K x1", 4, 1, 6, 16384}, {"tma 4x48K x1", 2, 1, 4, 49152}};
    CK(cudaFuncSetAttribute(tma_read<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
    CK(cudaFuncSetAttribute(tma_read<6>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
    CK(cudaFuncSetAttribute(tma_read<8>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
    // One read of sz bytes at p by variant v; launch i reads the flag launch i - 1 wrote.
    auto run = [&](const V& v, const uint8_t* p, size_t sz, int i) {
        unsigned* o = out + 4096 * (i & 1);
        const unsigned* d = out + 4096 * ((i + 1) & 1);
        const int grid = sms * v.per_sm;
        switch (v.kind) {
            case 0: launch(ld_read<4>, grid, 256, 0, st, reinterpret_cast<const uint4*>(p), sz / 16, o, d); break;
            case 1: launch(ld_read<8>, grid, 256, 0, st, reinterpret_cast<const uint4*>(p), sz / 16, o, d); break;
            case 2: launch(tma_read<4>, grid, 288, size_t{v.slot} * 4, st, p, sz, v.slot, o, d); break;
            case 3: launch(tma_read<8>, grid, 288, size_t{v.slot} * 8, st, p, sz, v.slot, o, d); break;
            case 4: launch(tma_read<6>, grid, 288, size_t{v.slot} * 6, st, p, sz, v.slot, o, d); break;
        }
    };
    std::printf("%-14s", "variant \\ MB");
    for (size_t sz : sizes) std::printf(" %16.1f", sz / MB);
    std::printf("\n");
    for (const V& v : vs) {
        std::printf("%-14s", v.name);
        for (size_t sz : sizes) {
            const int copies = static_cast<int>(std::min<size_t>(pool / sz, 64));
            const int reps = copies * std::max(1, static_cast<int>(100 / copies));
            auto one = [&](int i) { run(v, buf + (i % copies) * sz, sz, i); };
            for (int i = 0; i < 8; ++i) one(i);
            CK(cudaStreamSynchronize(st));
            const double us = time_graph_us(st, [&] { for (int i = 0; i < reps; ++i) one(i); }, reps);
            std::printf(" %7.2fus %4.0f%%", us, 100.0 * sz / (us * 1e3) / 4600.0);
        }
        std::printf("\n");
    }
    // A chain like a 4B layer: q+k+v (16.7 MB), o (11.1), gate/up (52.9), down (26.5), per variant.
    const size_t layer[] = {al(16.7 * MB), al(11.1 * MB), al(52.9 * MB), al(26.5 * MB)};
    double lb = 0;
    for (size_t s : layer) lb += s;
    std::printf("4B-like layer chain (%.1f MB, floor %.2f us at 4.6 TB/s):\n", lb / MB, lb / 4.6e6);
    for (const V& v : vs) {
        const int layers = 8;
        size_t offs[4 * layers];
        size_t o = 0;
        for (int i = 0; i < 4 * layers; ++i) {
            offs[i] = o;
            o += (layer[i % 4] + 255) / 256 * 256;
        }
        auto one = [&](int i) { run(v, buf + offs[i % (4 * layers)], layer[i % 4], i); };
        const int reps = 4 * layers * 4;
        const double us = time_graph_us(st, [&] { for (int i = 0; i < reps; ++i) one(i); }, reps / 4);
        std::printf("  %-14s %7.2f us per layer, %4.0f%% of floor\n", v.name, us, 100.0 * lb / 4.6e6 / us);
    }
    return 0;
}
