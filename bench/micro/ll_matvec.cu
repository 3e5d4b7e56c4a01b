// Microbenchmark: the 4B decode's four matvecs per layer (q/k/v 6144 x 2560, o 2560 x 4096,
// gate/up 19456 x 2560, down 2560 x 9728; Q8_0-like int8 weights with an f16 scale per 32), 36
// layers, chained in different ways, to bound what a persistent decode kernel whose stages are
// ordered by tagged values (ll_chain.cu) would save where the stages stream real weights:
//   pdl        a kernel per matvec, griddepcontrol.wait, x read through L1 (the engine's way);
//              3 blocks of 8 warps per SM, or 1 block of 24
//   pdl_smem   the same, x staged in shared memory by each block after the wait
//   ll_mega    one persistent kernel, 1 block of 24 warps per SM: each stage polls x's tagged
//              words into shared memory and writes tagged words; no barrier, fence or counter
//   ll_mega_pf the same, each warp asking L2 for its first rows of the next stage before it
//              polls (the weights' fetch overlaps the edge)
// The matvec body is the same in all (a warp per 2 rows, 16 weights per lane and load, the int8
// to float by byte permutation, each lane's x reads rotated so shared memory has no bank
// conflict), simpler than the engine's rings; the chains' results are compared bit for bit.
//
//   nvcc -O3 -std=c++20 -arch=sm_90 bench/micro/ll_matvec.cu -o ll_matvec && ./ll_matvec [layers]
#include <cstdint>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <vector>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "standalone.cuh"

namespace {

__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

struct Mat {
    const int8_t* q;  // rows x cols
    const __half* d;  // rows x cols / 32
    int rows, cols;
    float scale;      // keeps the chain's values near 1
};

// The four matrices of a layer: which buffer each reads and writes.
__constant__ int kIn[4] = {0, 1, 2, 3};
__constant__ int kOut[4] = {1, 2, 3, 0};

__device__ __forceinline__ int pick(const int4& w, int k) { return k == 0 ? w.x : k == 1 ? w.y : k == 2 ? w.z : w.w; }

// 16 weights (one int4) against x[0..16); the lane reads its four float4 of x rotated by rot so
// that 8 lanes of a shared-memory phase hit distinct banks. q + 128 as the float 2^23 + q + 128
// by one byte permutation, then one subtraction.
template <bool kShared>
__device__ __forceinline__ float dot16(const int4& w, const float* x, int rot) {
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const int kk = (k + rot) & 3;
        const float4 xv = kShared ? *reinterpret_cast<const float4*>(x + 4 * kk) : __ldg(reinterpret_cast<const float4*>(x) + kk);
        const unsigned u = static_cast<unsigned>(pick(w, kk)) ^ 0x80808080u;
#pragma unroll
        for (int b = 0; b < 4; ++b) {
            const float q = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7440 | b)) - 8388736.f;
            s = fmaf(q, (&xv.x)[b], s);
        }
    }
    return s;
}

// Rows in pairs, one pair per warp and round.
template <bool kShared, class Out>
__device__ void matvec_body(const Mat& m, const float* x, int warp, int warps, const Out& out) {
    const int lane = threadIdx.x & 31, rot = (lane >> 1) & 3;
    const int blocks_per_row = m.cols / 32;
    for (int p = warp; p < m.rows / 2; p += warps) {
        const int r = 2 * p;
        const int8_t* qa = m.q + static_cast<size_t>(r) * m.cols;
        const int8_t* qb = qa + m.cols;
        const __half* da = m.d + static_cast<size_t>(r) * blocks_per_row;
        const __half* db = da + blocks_per_row;
        float a = 0.f, b = 0.f;
#pragma unroll 4
        for (int c = 16 * lane; c < m.cols; c += 512) {
            const int4 wa = __ldg(reinterpret_cast<const int4*>(qa + c));
            const int4 wb = __ldg(reinterpret_cast<const int4*>(qb + c));
            const float sa = __half2float(da[c / 32]), sb = __half2float(db[c / 32]);
            a = fmaf(sa, dot16<kShared>(wa, x + c, rot), a);
            b = fmaf(sb, dot16<kShared>(wb, x + c, rot), b);
        }
        for (int o = 16; o > 0; o >>= 1) {
            a += __shfl_xor_sync(0xffffffffu, a, o);
            b += __shfl_xor_sync(0xffffffffu, b, o);
        }
        if (lane == 0) out(r, m.scale * a);
        if (lane == 1) out(r + 1, m.scale * b);
    }
}

__device__ __forceinline__ int warp_id() { return blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5); }
__device__ __forceinline__ int warp_count() { return gridDim.x * (blockDim.x / 32); }

__global__ void mv_pdl(Mat m, const float* x, float* y) {
    trigger();
    dep_wait();
    matvec_body<false>(m, x, warp_id(), warp_count(), [&](int r, float v) { y[r] = v; });
}

__global__ void mv_pdl_smem(Mat m, const float* x, float* y) {
    extern __shared__ float4 xs4[];
    trigger();
    dep_wait();
    for (int i = threadIdx.x; i < m.cols / 4; i += blockDim.x) xs4[i] = reinterpret_cast<const float4*>(x)[i];
    __syncthreads();
    matvec_body<true>(m, reinterpret_cast<const float*>(xs4), warp_id(), warp_count(), [&](int r, float v) { y[r] = v; });
}

// Stage i reads buffer kIn[i % 4] with tag base + i + 1 and writes kOut[i % 4] with base + i + 2.
__global__ void __launch_bounds__(768, 1)
    mega_ll(const Mat* mats, int n, unsigned long long* b0, unsigned long long* b1, unsigned long long* b2,
            unsigned long long* b3, int S, const unsigned* epoch, int prefetch) {
    extern __shared__ float4 xs4[];
    float* xs = reinterpret_cast<float*>(xs4);
    unsigned long long* bufs[4] = {b0, b1, b2, b3};
    const unsigned base = *epoch * S;
    const int warp = warp_id(), warps = warp_count(), lane = threadIdx.x & 31;
    for (int i = 0; i < n; ++i) {
        const Mat m = mats[i];
        const unsigned long long* x = bufs[kIn[i % 4]];
        unsigned long long* y = bufs[kOut[i % 4]];
        const unsigned want = base + i + 1, tag = base + i + 2;
        for (int c = 2 * threadIdx.x; c < m.cols; c += 2 * blockDim.x) {
            unsigned long long a, b;
            do ld_pair2(x + c, a, b);
            while (static_cast<unsigned>(a >> 32) != want || static_cast<unsigned>(b >> 32) != want);
            xs[c] = __uint_as_float(static_cast<unsigned>(a));
            xs[c + 1] = __uint_as_float(static_cast<unsigned>(b));
        }
        __syncthreads();
        matvec_body<true>(m, xs, warp, warps,
                          [&](int r, float v) { st_pair(y + r, pack(v, tag)); });
        if (prefetch && i + 1 < n) {  // this warp's first two rows of the next matrix
            const Mat nm = mats[i + 1];
            if (2 * warp + 1 < nm.rows)
                for (int l = lane; l < 2 * nm.cols / 128; l += 32)
                    prefetch_l2(nm.q + static_cast<size_t>(2 * warp) * nm.cols + 128 * l);
        }
        __syncthreads();  // every warp done with xs before the next stage fills it
    }
}

__global__ void bump(unsigned* epoch) { ++*epoch; }
__global__ void seed_ll(unsigned long long* x, int n, int S, const unsigned* epoch) {
    const unsigned tag = *epoch * S + 1;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        st_pair(x + i, pack(0.5f, tag));
}
__global__ void seed_f(float* x, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) x[i] = 0.5f;
}
__global__ void fill(int8_t* q, __half* d, size_t n, unsigned seed) {
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
        unsigned h = static_cast<unsigned>(i) * 2654435761u ^ seed;
        h ^= h >> 13;
        h *= 0x5bd1e995u;
        q[i] = static_cast<int8_t>(h >> 24);
        if (i % 32 == 0) d[i / 32] = __float2half(0.01f + 1e-4f * static_cast<float>(h & 255));
    }
}

}  // namespace

int main(int argc, char** argv) {
    const int layers = argc > 1 ? std::atoi(argv[1]) : 36;
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    // One layer's four matrices: rows, cols, the input buffer, the output buffer.
    struct Shape {
        int rows, cols, in, out;
    };
    const Shape shapes[4] = {{6144, 2560, 0, 1}, {2560, 4096, 1, 2}, {19456, 2560, 2, 3}, {2560, 9728, 3, 0}};
    const int lens[4] = {2560, 6144, 2560, 19456};
    std::vector<Mat> mats;
    size_t bytes = 0;
    for (int l = 0; l < layers; ++l)
        for (const Shape& s : shapes) {
            int8_t* q;
            __half* d;
            const size_t n = static_cast<size_t>(s.rows) * s.cols;
            CK(cudaMalloc(&q, n));
            CK(cudaMalloc(&d, n / 32 * sizeof(__half)));
            fill<<<1024, 256, 0, st>>>(q, d, n, static_cast<unsigned>(mats.size()));
            mats.push_back({q, d, s.rows, s.cols, 1.f / (1.7f * std::sqrt(static_cast<float>(s.cols)))});
            bytes += n + n / 16;
        }
    CK(cudaStreamSynchronize(st));
    float* fb[4];
    unsigned long long* lb[4];
    for (int i = 0; i < 4; ++i) {
        CK(cudaMalloc(&fb[i], lens[i] * sizeof(float)));
        CK(cudaMemset(fb[i], 0, lens[i] * sizeof(float)));
        CK(cudaMalloc(&lb[i], lens[i] * sizeof(unsigned long long)));
        CK(cudaMemset(lb[i], 0, lens[i] * sizeof(unsigned long long)));
    }
    unsigned* epoch;
    CK(cudaMalloc(&epoch, sizeof(unsigned)));
    CK(cudaMemset(epoch, 0, sizeof(unsigned)));
    Mat* dmats;
    CK(cudaMalloc(&dmats, mats.size() * sizeof(Mat)));
    CK(cudaMemcpy(dmats, mats.data(), mats.size() * sizeof(Mat), cudaMemcpyHostToDevice));
    const int n = static_cast<int>(mats.size()), S = n + 2;
    const size_t smem_max = 9728 * sizeof(float);
    CK(cudaFuncSetAttribute(mv_pdl_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_max)));
    CK(cudaFuncSetAttribute(mega_ll, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_max)));
    std::printf("%d layers x 4 matvecs, %.2f GB of weights (floor at 4.6 TB/s: %.1f us), %d SMs\n", layers, bytes / 1e9,
                bytes / 4.6e6, sms);
    auto pdl = [&](auto kernel, int grid, int block, bool smem) {
        return time_graph_us(st, [&] {
            seed_f<<<sms, 256, 0, st>>>(fb[0], lens[0]);
            for (int i = 0; i < n; ++i) {
                const Shape& s = shapes[i % 4];
                launch_pdl(kernel, grid, block, smem ? s.cols * sizeof(float) : 0, st, mats[i], static_cast<const float*>(fb[s.in]),
                       fb[s.out]);
            }
        }, 1, 7);
    };
    auto mega = [&](int prefetch) {
        return time_graph_us(st, [&] {
            bump<<<1, 1, 0, st>>>(epoch);
            seed_ll<<<sms, 256, 0, st>>>(lb[0], lens[0], S, epoch);
            launch_pdl(mega_ll, sms, 768, smem_max, st, static_cast<const Mat*>(dmats), n, lb[0], lb[1], lb[2], lb[3], S,
                   static_cast<const unsigned*>(epoch), prefetch);
        }, 1, 7);
    };
    for (int round = 0; round < 2; ++round) {
        const double p3 = pdl(mv_pdl, 3 * sms, 256, false);
        const double p1 = pdl(mv_pdl, sms, 768, false);
        const double ps = pdl(mv_pdl_smem, 3 * sms, 256, true);
        const double m0 = mega(0);
        const double m1 = mega(1);
        std::printf("us per layer: pdl 3x8 warps %.2f  pdl 1x24 %.2f  pdl_smem 3x8 %.2f  ll_mega %.2f  ll_mega_pf %.2f  (floor %.2f)\n",
                    p3 / layers, p1 / layers, ps / layers, m0 / layers, m1 / layers, bytes / 4.6e6 / layers);
    }
    // The chains compute the same values (tags aside): compare the last vectors.
    std::vector<float> a(2560);
    std::vector<unsigned long long> b(2560);
    CK(cudaMemcpy(a.data(), fb[0], 2560 * sizeof(float), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(b.data(), lb[0], 2560 * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    int differ = 0;
    for (int i = 0; i < 2560; ++i) differ += a[i] != __builtin_bit_cast(float, static_cast<unsigned>(b[i]));
    std::printf("check: %d of 2560 final values differ between pdl and ll_mega (want 0), a[0] = %g, a[1] = %g\n", differ,
                a[0], a[1]);
    CK(cudaGetLastError());
    return 0;
}
