// Microbenchmark: what a dependency between two decode kernels costs, by itself.
//
// A chain of S stages; each stage's every block reads the whole n-float vector the previous
// stage wrote (as a matvec reads its activations), sums it, and writes its slice of the next
// vector (as a matvec writes its rows). Ways to order the stages:
//   pdl   one kernel per stage, programmatic dependent launch, griddepcontrol.wait (the engine's)
//   flag  one kernel per stage, launched the same way but without griddepcontrol.wait: each
//         block waits for the previous stage's blocks to count themselves done (release add /
//         acquire load on a counter in global memory)
//   loop  one persistent kernel, the stages separated by the same counters (a grid barrier)
// Time per stage of a replayed graph, in microseconds.
//
//   cmake --build build-cuda --target pdl_chain && build-cuda/bench/pdl_chain
#include <cstdint>
#include <cstdio>

#include <cuda_runtime.h>

#include "micro_util.cuh"

namespace {


__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void red_release(unsigned* p, unsigned v) {
    asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// The stage's work: every block reads all of in, block b writes its slice of out.
__device__ void stage_work(const float* in, float* out, int n) {
    __shared__ float part[32];
    float s = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += in[i];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x < 32) {
        float t = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0.f;
        for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
        s = t;
    }
    const int per = (n + gridDim.x - 1) / gridDim.x;
    for (int i = blockIdx.x * per + threadIdx.x; i < min(n, (blockIdx.x + 1) * per); i += blockDim.x)
        out[i] = 1e-6f * s + 1.f;  // stays finite however long the chain
}

__device__ void wait_count(const unsigned* c, unsigned target) {
    if (threadIdx.x == 0)
        while (ld_acquire(c) < target) __nanosleep(32);
    __syncthreads();
}
__device__ void count_done(unsigned* c) {
    __syncthreads();  // every thread's writes before the release
    if (threadIdx.x == 0) red_release(c, 1u);
}

__global__ void bump(unsigned* epoch) { ++*epoch; }

__global__ void stage_pdl(const float* in, float* out, int n) {
    trigger();
    dep_wait();
    stage_work(in, out, n);
}

// counters[k] counts the blocks of stage k done; replay e waits for e * grid.
__global__ void stage_flag(const float* in, float* out, int n, unsigned* counters, int k, const unsigned* epoch) {
    trigger();
    const unsigned target = *epoch * gridDim.x;  // bump completed before the chain started
    if (k > 0) wait_count(counters + k - 1, target);
    stage_work(in, out, n);
    count_done(counters + k);
}

__global__ void stages_loop(float* bufs, int n, int S, unsigned* counters, const unsigned* epoch) {
    const unsigned target = *epoch * gridDim.x;
    for (int k = 0; k < S; ++k) {
        if (k > 0) wait_count(counters + k - 1, target);
        stage_work(bufs + static_cast<size_t>(k % 2) * n, bufs + static_cast<size_t>((k + 1) % 2) * n, n);
        count_done(counters + k);
    }
}

}  // namespace

int main() {
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    constexpr int S = 256;
    float* bufs;
    unsigned *counters, *epoch;
    CK(cudaMalloc(&bufs, 2 * 16384 * sizeof(float)));
    CK(cudaMemset(bufs, 0, 2 * 16384 * sizeof(float)));
    CK(cudaMalloc(&counters, S * sizeof(unsigned)));
    CK(cudaMalloc(&epoch, sizeof(unsigned)));
    std::printf("stages of a replayed graph, us per stage (%d SMs, %d stages)\n", sms, S);
    for (int n : {2560, 9728}) {
        for (int per_sm : {1, 3}) {
            const int grid = per_sm * sms;
            auto buf = [&](int k) { return bufs + static_cast<size_t>(k % 2) * n; };
            CK(cudaMemset(counters, 0, S * sizeof(unsigned)));
            CK(cudaMemset(epoch, 0, sizeof(unsigned)));
            const double pdl = time_graph_us(st, [&] {
                for (int k = 0; k < S; ++k) launch(stage_pdl, grid, 256, 0, st, buf(k), buf(k + 1), n);
            }, S);
            const double flag = time_graph_us(st, [&] {
                bump<<<1, 1, 0, st>>>(epoch);
                for (int k = 0; k < S; ++k) launch(stage_flag, grid, 256, 0, st, buf(k), buf(k + 1), n, counters, k, epoch);
            }, S);
            CK(cudaMemset(counters, 0, S * sizeof(unsigned)));
            CK(cudaMemset(epoch, 0, sizeof(unsigned)));
            const double loop = time_graph_us(st, [&] {
                bump<<<1, 1, 0, st>>>(epoch);
                launch(stages_loop, grid, 256, 0, st, bufs, n, S, counters, epoch);
            }, S);
            std::printf("n %5d, %d block(s) of 256 per SM: pdl %.2f  flag %.2f  loop %.2f\n", n, per_sm, pdl, flag, loop);
        }
    }
    CK(cudaGetLastError());
    return 0;
}
