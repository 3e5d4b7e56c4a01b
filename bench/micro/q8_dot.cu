// Microbenchmark: does the Q8_0 one-token matvec's per-weight work set its speed? The same kernel
// shape (persistent warps, 4 rows per warp group of the engine's warps per row, a 16-weight unit
// per lane, the next unit's loads in flight, 3 or 4 blocks of 256 threads per SM) with two inner
// products:
//   f32:  activations f32, weights byte -> float (PRMT + FADD), FMA (the engine's f32 matvec)
//   dp4a: activations as 4 int8 limbs (the imma format's idea), 4 dp4a per 4 weights and limb,
//         limbs combined once per 32-weight block
// over the 4B's decode matrices (q, k, v, o, gate, up, down per layer; 8 layers of weights, so
// every layer streams from HBM), as a graph of back-to-back PDL launches. Only the speed is
// measured: the dp4a sums are not the engine's numerics contract.
//
//   cmake --build build-cuda --target q8_dot && build-cuda/bench/q8_dot
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "micro_util.cuh"


namespace {

__device__ __forceinline__ uint4 ld_stream(const void* p) {
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}
__device__ __forceinline__ float sbyte(uint32_t w, int k) {  // signed byte k as an exact float
    return __int_as_float(__byte_perm(w ^ 0x80808080u, 0x4B000000u, 0x7650u | k)) - 8388736.f;
}

struct Mat {
    const uint8_t* data;
    int rows, cols;
    size_t stride, head_off;
    int wpr;
};

// Row layout as the engine's: [32-byte bodies | f16 heads], rows padded to 16 bytes.
// wpr warps share a row group (the engine's warps_per_row for the shape); their sums meet by
// atomicAdd here (order free: only the speed is measured).
template <bool kDp4a, int kBlocksPerSm>
__global__ void __launch_bounds__(256, kBlocksPerSm) q8_matvec(Mat m, const float* x, const uint4* xl, float* out, int wpr) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    const int lane = threadIdx.x & 31;
    const int gwarp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, part = gwarp % wpr;
    const int warp = gwarp / wpr, warps = ((gridDim.x * blockDim.x) >> 5) / wpr;
    const int units = m.cols / 16, groups = (m.rows + 3) / 4;
    asm volatile("griddepcontrol.wait;" ::: "memory");
    for (int rg = warp; rg < groups; rg += warps) {
        const uint8_t* base[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) base[r] = m.data + static_cast<size_t>(min(rg * 4 + r, m.rows - 1)) * m.stride;
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
        uint4 w[4], wn[4];
        int u = part * 32 + lane;
        const int step = 32 * wpr;
        if (u < units)
#pragma unroll
            for (int r = 0; r < 4; ++r) w[r] = ld_stream(base[r] + 16 * u);
        for (; u < units; u += step) {
            const int un = u + step;
            if (un < units)
#pragma unroll
                for (int r = 0; r < 4; ++r) wn[r] = ld_stream(base[r] + 16 * un);
            float d[4];
#pragma unroll
            for (int r = 0; r < 4; ++r)
                d[r] = __half2float(__ushort_as_half(__ldg(reinterpret_cast<const unsigned short*>(base[r] + m.head_off) + (u >> 1))));
            if constexpr (!kDp4a) {
                const float4* xp = reinterpret_cast<const float4*>(x + 16 * u);
                float xv[16];
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const float4 v = __ldg(xp + i);
                    xv[4 * i] = v.x; xv[4 * i + 1] = v.y; xv[4 * i + 2] = v.z; xv[4 * i + 3] = v.w;
                }
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    const uint32_t q[4] = {w[r].x, w[r].y, w[r].z, w[r].w};
#pragma unroll
                    for (int g = 0; g < 2; ++g) {
                        float s = sbyte(q[2 * g], 0) * xv[8 * g];
#pragma unroll
                        for (int j = 1; j < 8; ++j) s = fmaf(sbyte(q[2 * g + j / 4], j % 4), xv[8 * g + j], s);
                        acc[r] = fmaf(d[r], s, acc[r]);
                    }
                }
            } else {
                uint4 lv[4];  // limb k of the unit's 16 activations
#pragma unroll
                for (int k = 0; k < 4; ++k) lv[k] = __ldg(xl + static_cast<size_t>(k) * units + u);
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    int s[4];
#pragma unroll
                    for (int k = 0; k < 4; ++k) {
                        s[k] = __dp4a(static_cast<int>(w[r].x), static_cast<int>(lv[k].x), 0);
                        s[k] = __dp4a(static_cast<int>(w[r].y), static_cast<int>(lv[k].y), s[k]);
                        s[k] = __dp4a(static_cast<int>(w[r].z), static_cast<int>(lv[k].z), s[k]);
                        s[k] = __dp4a(static_cast<int>(w[r].w), static_cast<int>(lv[k].w), s[k]);
                    }
                    const float v = fmaf(static_cast<float>(s[3]), 16777216.f,
                                         fmaf(static_cast<float>(s[2]), 65536.f, fmaf(static_cast<float>(s[1]), 256.f, static_cast<float>(s[0]))));
                    acc[r] = fmaf(d[r], v, acc[r]);
                }
            }
#pragma unroll
            for (int r = 0; r < 4; ++r) w[r] = wn[r];
        }
#pragma unroll
        for (int r = 0; r < 4; ++r) {
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
            if (lane == r && rg * 4 + r < m.rows) atomicAdd(out + rg * 4 + r, acc[r]);
        }
    }
}

}  // namespace

int main() {
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    struct Shape {
        const char* name;
        int rows, cols, wpr;  // wpr: the engine's warps per row for the shape
    };
    const Shape layer[] = {{"q", 4096, 2560, 2}, {"k", 1024, 2560, 8}, {"v", 1024, 2560, 8}, {"o", 2560, 4096, 8},
                           {"gate", 9728, 2560, 1}, {"up", 9728, 2560, 1}, {"down", 2560, 9728, 8}};
    constexpr int kLayers = 8;
    std::vector<Mat> mats;
    double layer_bytes = 0;
    for (int l = 0; l < kLayers; ++l)
        for (const Shape& s : layer) {
            const size_t body = static_cast<size_t>(s.cols), heads = s.cols / 32 * 2;
            const size_t head_off = (body + 15) / 16 * 16, stride = (head_off + heads + 15) / 16 * 16;
            std::vector<uint8_t> h(stride * s.rows);
            for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
            for (int r = 0; r < s.rows; ++r)  // scales: small f16 values
                for (size_t b = 0; b < heads / 2; ++b) {
                    const uint16_t f = 0x2000 + static_cast<uint16_t>((r + b) & 0x3FF);
                    std::memcpy(&h[r * stride + head_off + 2 * b], &f, 2);
                }
            uint8_t* d;
            CK(cudaMalloc(&d, h.size()));
            CK(cudaMemcpy(d, h.data(), h.size(), cudaMemcpyHostToDevice));
            mats.push_back({d, s.rows, s.cols, stride, head_off, s.wpr});
            if (l == 0) layer_bytes += static_cast<double>(h.size());
        }
    float *x, *out;
    uint4* xl;
    CK(cudaMalloc(&x, 4 * 9728));
    CK(cudaMalloc(&xl, 4 * 9728));
    CK(cudaMalloc(&out, 4 * 9728));
    std::vector<float> xh(9728);
    for (int i = 0; i < 9728; ++i) xh[i] = 0.01f * static_cast<float>((i * 37) % 200 - 100);
    CK(cudaMemcpy(x, xh.data(), 4 * 9728, cudaMemcpyHostToDevice));
    CK(cudaMemset(xl, 0x11, 4 * 9728));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    std::printf("4B layer matrices (%.1f MB, floor %.2f us at 4.6 TB/s), blocks of 256 threads\n", layer_bytes / 1048576.0,
                layer_bytes / 4.6e6);
    for (int mode = 0; mode < 4; ++mode) {  // f32, dp4a with 3 blocks per SM; then with 4
        auto one = [&](const Mat& m) {
            const float* xf = x;
            const uint4* xq = xl;
            switch (mode) {
                case 0: launch(q8_matvec<false, 3>, 3 * sms, 256, 0, st, m, xf, xq, out, m.wpr); break;
                case 1: launch(q8_matvec<true, 3>, 3 * sms, 256, 0, st, m, xf, xq, out, m.wpr); break;
                case 2: launch(q8_matvec<false, 4>, 4 * sms, 256, 0, st, m, xf, xq, out, m.wpr); break;
                default: launch(q8_matvec<true, 4>, 4 * sms, 256, 0, st, m, xf, xq, out, m.wpr); break;
            }
        };
        const double us = time_graph_us(st, [&] { for (int rep = 0; rep < 4; ++rep) for (const Mat& m : mats) one(m); }, 4 * kLayers);
        std::printf("%-5s x%d/SM layer chain %7.2f us (%3.0f %% of floor); per kernel, alone:", mode % 2 ? "dp4a" : "f32", 3 + mode / 2, us,
                    100.0 * layer_bytes / 4.6e6 / us);
        for (size_t i = 0; i < 7; ++i) {
            const double k = time_graph_us(st, [&] { for (int l = 0; l < 4 * kLayers; ++l) one(mats[7 * (l % kLayers) + i]); }, 4 * kLayers);
            std::printf(" %s %.1f", layer[i].name, k);
        }
        std::printf("\n");
    }
    return 0;
}
