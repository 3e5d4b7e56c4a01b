// Microbenchmark: a dependency between two decode stages with the data as its own flag.
//
// pdl_chain.cu measured ~3 us per dependent stage with PDL, and no better with counters (a
// release add per block, an acquire poll). Here each value travels with a tag in one 8-byte word
// (value bits low, the stage's tag high; NCCL's "LL" protocol): a consumer polls the words
// themselves until every tag is the one it waits for, so no fence, counter or grid completion
// stands between a producer's store and a consumer's use. Same chain as pdl_chain.cu: each
// stage's every block reads the whole n-value vector, sums it, writes its slice of the next one.
//   pdl       one kernel per stage, griddepcontrol.wait, plain floats (the engine's way)
//   ll_kern   one kernel per stage, launched with PDL but never waiting: the tags order them
//   ll_loop   one persistent kernel, stages ordered only by the tags
// Tags are epoch * S + stage + 1, the epoch bumped once per replay, so a replay never accepts
// the previous replay's words. Two buffers suffice: a block writes stage k + 1's slice only
// after it saw all of stage k's, i.e. after every block finished reading the buffer it reuses.
//
//   nvcc -O3 -std=c++20 -arch=sm_90 bench/micro/ll_chain.cu -o ll_chain  (or the CMake target)
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

#include "standalone.cuh"

namespace {

__device__ float block_sum(float s) {
    __shared__ float part[32];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = s;
    __syncthreads();
    float t = 0.f;
    for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) t += part[w];
    __syncthreads();  // part is reused by the next stage
    return t;
}

__device__ void stage_plain(const float* in, float* out, int n) {
    float s = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += in[i];
    s = block_sum(s);
    const int per = (n + gridDim.x - 1) / gridDim.x;
    for (int i = blockIdx.x * per + threadIdx.x; i < min(n, (blockIdx.x + 1) * per); i += blockDim.x)
        out[i] = 1e-6f * s + 1.f;
}

// n even; thread t polls pairs 2t, 2t+1 (16-byte loads), then 2(t + blockDim), ...
__device__ void stage_ll(const unsigned long long* in, unsigned long long* out, int n, unsigned want, unsigned tag) {
    float s = 0.f;
    for (int i = 2 * threadIdx.x; i < n; i += 2 * blockDim.x) {
        unsigned long long a, b;
        do ld_pair2(in + i, a, b);
        while (static_cast<unsigned>(a >> 32) != want || static_cast<unsigned>(b >> 32) != want);
        s += __uint_as_float(static_cast<unsigned>(a)) + __uint_as_float(static_cast<unsigned>(b));
    }
    s = block_sum(s);
    const int per = (n + gridDim.x - 1) / gridDim.x;
    for (int i = blockIdx.x * per + threadIdx.x; i < min(n, (blockIdx.x + 1) * per); i += blockDim.x)
        st_pair(out + i, pack(1e-6f * s + 1.f, tag));
}

__global__ void bump(unsigned* epoch) { ++*epoch; }

// The first stage of a replay: plain input, tagged output.
__global__ void seed_ll(unsigned long long* out, int n, int S, const unsigned* epoch) {
    const unsigned tag = *epoch * S + 1;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) st_pair(out + i, pack(1.f, tag));
}

__global__ void stage_pdl(const float* in, float* out, int n) {
    trigger();
    dep_wait();
    stage_plain(in, out, n);
}

__global__ void stage_ll_kern(const unsigned long long* in, unsigned long long* out, int n, int S, int k,
                              const unsigned* epoch) {
    trigger();
    const unsigned base = *epoch * S;  // bump completed before the chain started
    stage_ll(in, out, n, base + k, base + k + 1);
}

__global__ void stages_ll_loop(unsigned long long* bufs, int n, int S, const unsigned* epoch) {
    const unsigned base = *epoch * S;
    for (int k = 1; k < S; ++k)
        stage_ll(bufs + static_cast<size_t>(k % 2) * n, bufs + static_cast<size_t>((k + 1) % 2) * n, n, base + k,
                 base + k + 1);
}

}  // namespace

int main() {
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    constexpr int S = 256;
    constexpr int kMaxN = 16384;
    float* bufs;
    unsigned long long* ll;
    unsigned* epoch;
    CK(cudaMalloc(&bufs, 2 * kMaxN * sizeof(float)));
    CK(cudaMemset(bufs, 0, 2 * kMaxN * sizeof(float)));
    CK(cudaMalloc(&ll, 2 * kMaxN * sizeof(unsigned long long)));
    CK(cudaMemset(ll, 0, 2 * kMaxN * sizeof(unsigned long long)));
    CK(cudaMalloc(&epoch, sizeof(unsigned)));
    CK(cudaMemset(epoch, 0, sizeof(unsigned)));
    std::printf("stages of a replayed graph, us per stage (%d SMs, %d stages)\n", sms, S);
    for (int n : {2560, 9728}) {
        for (int per_sm : {1, 3}) {
            const int grid = per_sm * sms;
            auto buf = [&](int k) { return bufs + static_cast<size_t>(k % 2) * n; };
            auto lbuf = [&](int k) { return ll + static_cast<size_t>(k % 2) * n; };
            const double pdl = time_graph_us(st, [&] {
                for (int k = 0; k < S; ++k) launch_pdl(stage_pdl, grid, 256, 0, st, buf(k), buf(k + 1), n);
            }, S, 5);
            const double kern = time_graph_us(st, [&] {
                bump<<<1, 1, 0, st>>>(epoch);
                seed_ll<<<sms, 256, 0, st>>>(lbuf(1), n, S, epoch);
                for (int k = 1; k < S; ++k) launch_pdl(stage_ll_kern, grid, 256, 0, st, lbuf(k), lbuf(k + 1), n, S, k, epoch);
            }, S - 1, 5);
            const double loop = time_graph_us(st, [&] {
                bump<<<1, 1, 0, st>>>(epoch);
                seed_ll<<<sms, 256, 0, st>>>(lbuf(1), n, S, epoch);
                launch_pdl(stages_ll_loop, grid, 256, 0, st, ll, n, S, epoch);
            }, S - 1, 5);
            std::printf("n %5d, %d block(s) of 256 per SM: pdl %.2f  ll_kern %.2f  ll_loop %.2f\n", n, per_sm, pdl, kern,
                        loop);
        }
    }
    // The last replay's final vector: every value 1e-6 * n + 1 (a wrong tag order would hang, a torn
    // word would show here).
    float last = 0.f;
    unsigned long long w = 0;
    CK(cudaMemcpy(&w, ll + (S % 2) * 9728, sizeof w, cudaMemcpyDeviceToHost));
    last = __builtin_bit_cast(float, static_cast<unsigned>(w));
    std::printf("check: last value %.6f (about %.4f)\n", last, 1e-6f * 9728 * 1.0097f + 1.f);
    CK(cudaGetLastError());
    return 0;
}
