// Small memory-bound ops: KV store, sigmoid gate, add, SwiGLU, GDN causal conv, argmax.
#include <cuda_fp16.h>

#include <algorithm>

#include "backend/cuda/check.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"

namespace df::cuda {
namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t n) { return static_cast<int>((n + kThreads - 1) / kThreads); }

__global__ void kv_store_kernel(const float* k, const float* v, void* kc, void* vc, bool half_cache, int kv_dim,
                                const int32_t* pos) {
    pdl_begin();
    const int t = blockIdx.y;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= kv_dim) return;
    const int64_t src = static_cast<int64_t>(t) * kv_dim + i;
    const int64_t dst = static_cast<int64_t>(pos[t]) * kv_dim + i;
    if (half_cache) {
        static_cast<__half*>(kc)[dst] = __float2half_rn(k[src]);
        static_cast<__half*>(vc)[dst] = __float2half_rn(v[src]);
    } else {
        static_cast<float*>(kc)[dst] = k[src];
        static_cast<float*>(vc)[dst] = v[src];
    }
}

__global__ void sigmoid_mul_kernel(float* x, int n, const float* gate, int width, int gate_stride, int gate_row) {
    pdl_begin();
    const int t = blockIdx.y;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float g = gate[static_cast<int64_t>(t) * gate_row + static_cast<int64_t>(i / width) * gate_stride + i % width];
    x[static_cast<int64_t>(t) * n + i] *= sigmoid_f(g);
}

__global__ void add_kernel(float* y, const float* x, int64_t n) {
    pdl_begin();
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) y[i] += x[i];
}

__global__ void swiglu_kernel(float* g, const float* u, int64_t n) {
    pdl_begin();
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) g[i] = silu_f(g[i]) * u[i];
}

// Block = 32 channels x kConvSegs token segments: a thread walks its segment with a sliding window
// of the last taps-1 inputs (ggml sums the taps in order, in float, each product rounded). The
// kTaps - 1 inputs before a segment (another thread's, or the state) are read before a barrier,
// since x is overwritten in place.
constexpr int kConvChans = 32, kConvSegs = kThreads / kConvChans;
template <int kTaps>
__global__ void __launch_bounds__(kThreads) gdn_conv_kernel(float* x, int T, int C, const float* w, float* state) {
    pdl_begin();
    const int c = blockIdx.x * kConvChans + (threadIdx.x % kConvChans), seg = threadIdx.x / kConvChans;
    const int len = (T + kConvSegs - 1) / kConvSegs, t0 = seg * len, t1 = min(T, t0 + len);
    const bool live = c < C;
    // A segment past T (T < kConvSegs, or rounding) is empty and reads nothing: its window would
    // lie past the last row of x.
    const bool busy = live && t0 < t1;
    float win[kTaps], wc[kTaps];
#pragma unroll
    for (int i = 0; i < kTaps; ++i) wc[i] = live ? w[static_cast<int64_t>(c) * kTaps + i] : 0.f;
#pragma unroll
    for (int i = 0; i < kTaps - 1; ++i) {  // input t0 - (kTaps - 1) + i
        const int t = t0 - (kTaps - 1) + i;
        win[i] = !busy ? 0.f : t >= 0 ? x[static_cast<int64_t>(t) * C + c] : state[static_cast<int64_t>(t + kTaps - 1) * C + c];
    }
    __syncthreads();  // every segment's preceding inputs are read before any output is written
    if (!live) return;
    float next = t0 < t1 ? x[static_cast<int64_t>(t0) * C + c] : 0.f;
    for (int t = t0; t < t1; ++t) {
        float* xp = x + static_cast<int64_t>(t) * C + c;
        win[kTaps - 1] = next;
        if (t + 1 < t1) next = xp[C];  // issued before this token's store
        float sum = 0.f;
#pragma unroll
        for (int i = 0; i < kTaps; ++i) sum = __fadd_rn(sum, __fmul_rn(win[i], wc[i]));
        *xp = silu_f(sum);
#pragma unroll
        for (int i = 0; i < kTaps - 1; ++i) win[i] = win[i + 1];
    }
    // The last kTaps - 1 inputs become the state: the last segment holds them (T >= kTaps - 1),
    // else the window of whichever segment ended at T does.
    if (t1 == T && t0 < t1) {
#pragma unroll
        for (int i = 0; i < kTaps - 1; ++i) state[static_cast<int64_t>(i) * C + c] = win[i];
    }
}

// argmax in one pass over the whole GPU: each block reduces a slice of a row and folds its
// (value, index) into the row's 64-bit key with atomicMax. The key orders by value first (float
// bits mapped to an unsigned order), then by the lowest index (stored as ~index).
DF_DEV unsigned long long argmax_key(float v, int i) {
    const uint32_t b = __float_as_uint(v);
    const uint32_t ord = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
    return (static_cast<unsigned long long>(ord) << 32) | static_cast<uint32_t>(~static_cast<uint32_t>(i));
}

constexpr int kArgmaxPerThread = 16;

__global__ void __launch_bounds__(kThreads) argmax_partial_kernel(const float* x, int n, unsigned long long* keys) {
    pdl_begin();
    const float* r = x + static_cast<int64_t>(blockIdx.y) * n;
    const int begin = blockIdx.x * kThreads * kArgmaxPerThread;
    unsigned long long best = 0;
#pragma unroll
    for (int k = 0; k < kArgmaxPerThread; ++k) {
        const int i = begin + k * kThreads + threadIdx.x;
        if (i < n) best = max(best, argmax_key(r[i], i));
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) best = max(best, __shfl_xor_sync(0xffffffffu, best, o));
    __shared__ unsigned long long part[kThreads / 32];
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = best;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < kThreads / 32; ++w) best = max(best, part[w]);
        atomicMax(keys + blockIdx.y, best);
    }
}

// With feed_tokens, the thread of row T - 1 also writes the next step's token and position.
// Each key is reset to 0 once read: the next call starts from zeros without a memset (in a graph
// a memset node between the LM head and the argmax would stand in the way of the PDL edge).
__global__ void argmax_finish_kernel(unsigned long long* keys, int T, int32_t* out, int32_t* feed_tokens,
                                     int32_t* feed_pos, int feed_T) {
    pdl_begin();
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    const int32_t id = static_cast<int32_t>(~static_cast<uint32_t>(keys[t] & 0xFFFFFFFFu));
    keys[t] = 0;
    out[t] = id;
    if (feed_tokens && t == T - 1) {
        feed_pos[0] = feed_pos[feed_T - 1] + 1;
        feed_tokens[0] = id;
    }
}

}  // namespace

void launch_kv_store(const float* k, const float* v, void* k_cache, void* v_cache, bool half_cache, int kv_dim,
                     int T, const int32_t* pos, cudaStream_t s) {
    if (T <= 0) return;
    launch(kv_store_kernel, dim3(blocks_for(kv_dim), T), kThreads, 0, s, k, v, k_cache, v_cache, half_cache, kv_dim, pos);
}

void launch_sigmoid_mul(float* x, int n, const float* gate, int width, int gate_stride, int gate_row, int T,
                        cudaStream_t s) {
    if (T <= 0) return;
    launch(sigmoid_mul_kernel, dim3(blocks_for(n), T), kThreads, 0, s, x, n, gate, width, gate_stride, gate_row);
}

void launch_add(float* y, const float* x, int64_t n, cudaStream_t s) {
    if (n <= 0) return;
    launch(add_kernel, blocks_for(n), kThreads, 0, s, y, x, n);
}

void launch_swiglu(float* gate, const float* up, int64_t n, cudaStream_t s) {
    if (n <= 0) return;
    launch(swiglu_kernel, blocks_for(n), kThreads, 0, s, gate, up, n);
}

void launch_gdn_conv(float* x, int T, int channels, int taps, const float* w, float* conv_state, cudaStream_t s) {
    if (T <= 0) return;
    const int blocks = (channels + kConvChans - 1) / kConvChans;
    switch (taps) {
        case 2: launch(gdn_conv_kernel<2>, blocks, kThreads, 0, s, x, T, channels, w, conv_state); break;
        case 3: launch(gdn_conv_kernel<3>, blocks, kThreads, 0, s, x, T, channels, w, conv_state); break;
        case 4: launch(gdn_conv_kernel<4>, blocks, kThreads, 0, s, x, T, channels, w, conv_state); break;
        case 5: launch(gdn_conv_kernel<5>, blocks, kThreads, 0, s, x, T, channels, w, conv_state); break;
        default: DF_CUDA_REQUIRE(false, "gdn_conv: conv kernel must have 2..5 taps");
    }
}

// keys must be zero before the first call (the backend allocates them zero-filled); every call
// leaves them so (argmax_finish_kernel).
void launch_argmax(const float* x, int T, int n, int32_t* out, unsigned long long* keys, int keys_cap,
                   cudaStream_t s, int32_t* feed_tokens, int32_t* feed_pos, int feed_T) {
    for (int t0 = 0; t0 < T; t0 += keys_cap) {
        const int nt = std::min(keys_cap, T - t0);
        const bool last = t0 + nt == T;
        const int per_block = kThreads * kArgmaxPerThread;
        launch(argmax_partial_kernel, dim3((n + per_block - 1) / per_block, nt), kThreads, 0, s,
            x + static_cast<int64_t>(t0) * n, n, keys);
        launch(argmax_finish_kernel, (nt + 127) / 128, 128, 0, s, keys, nt, out + t0, last ? feed_tokens : nullptr,
               last ? feed_pos : nullptr, feed_T);
    }
}

}  // namespace df::cuda
