// The CPU backend: runs each op directly on host memory with a thread pool.
//
// It is both the engine for machines without a GPU and the reference every CUDA kernel is
// tested against, so every op keeps f32 activations and exactly dequantized weights; only the
// summation order differs from llama.cpp's f32 path.
#pragma once

#include <array>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/thread_pool.h"

namespace df::cpu {

// Batches up to this many tokens use row_dot (bitwise equal to one-token steps); larger ones the
// panel GEMM.
inline constexpr int kRowDotMaxT = 8;

class CpuBackend final : public Backend {
public:
    explicit CpuBackend(int threads);
    ~CpuBackend() override;

    std::string name() const override { return "cpu"; }
    int threads() const { return pool_.size(); }

    void* alloc(size_t bytes, MemKind kind) override;
    void release(void* p) override;
    void upload(void* dst, const void* src, size_t bytes) override;
    void download(void* dst, const void* src, size_t bytes) override;
    void copy(void* dst, const void* src, size_t bytes) override;
    void zero(void* dst, size_t bytes) override;
    Weight load_weight(quant::Type type, int64_t cols, int64_t rows, const void* host,
                       size_t bytes) override;
    size_t bytes_in_use(MemKind kind) const override;
    size_t peak_bytes(MemKind kind) const override;

    void embed(const Weight& w, const Step& s, float* out) override;
    void rmsnorm(const float* x, int64_t x_stride, const float* weight, int n_rows, int n,
                 float eps, float* out, int64_t out_stride) override;
    void matmul(const Weight& w, const float* x, int T, float* out, bool accumulate) override;
    void ffn_gate_up(const Weight& wg, const Weight& wu, const float* x, int T, float* out,
                     float* scratch) override;
    void head_norm_rope(float* x, int heads, int head_dim, int head_stride, int row,
                        const float* norm_w, float eps, const RopeShape& rope,
                        const Step& s) override;
    void kv_store(const float* k, const float* v, void* k_cache, void* v_cache, KvType kt,
                  int kv_dim, const Step& s) override;
    void attention(const float* q, const void* k_cache, const void* v_cache, KvType kt,
                   const AttnShape& a, const Step& s, float* out) override;
    void sigmoid_mul(float* x, int n, const float* gate, int width, int gate_stride,
                     int gate_row, int T) override;
    void gdn_conv(float* x, int T, const GdnShape& g, const float* w, float* conv_state) override;
    void gdn_delta(const float* qkv, const float* alpha, const float* beta, const float* dt_bias,
                   const float* a_neg, int T, const GdnShape& g, float eps, float* state,
                   float* out) override;
    void gated_rmsnorm(const float* x, const float* z, const float* w, int T, int heads, int n,
                       float eps, float* out) override;
    void add(float* y, const float* x, int64_t n) override;
    void argmax(const float* x, int T, int n, int32_t* out, const ArgmaxFeed* feed) override;
    void top_logits(const float* x, int n, int k, const int32_t* extra, int n_extra, int32_t* ids, float* vals) override;
    uint64_t row_mass(const float* x, int n, float lmax) override;

private:
    ThreadPool pool_;
    mutable std::mutex mem_mu_;
    std::unordered_map<void*, std::pair<size_t, MemKind>> allocs_;
    std::array<size_t, static_cast<size_t>(MemKind::count_)> in_use_{}, peak_{};
    std::vector<uint64_t> top_keys_;  // top_logits's working memory (a vocabulary's keys)
    // Working memory kept across calls (fresh vectors of a chunk's size were mapped, faulted in
    // and zeroed in every call: ~4 % of a prefill for gdn_delta's alone): the prefill GEMM's per
    // pool thread (decoded rows, then their panel) and gdn_delta's normalised q and k.
    std::vector<std::vector<float>> gemm_scratch_;
    std::vector<float> gdn_qk_;
};

// Scalar helpers shared by the CPU ops and by tests (ggml's definitions).
float silu(float x);
float sigmoid(float x);
float softplus(float x);

}  // namespace df::cpu
