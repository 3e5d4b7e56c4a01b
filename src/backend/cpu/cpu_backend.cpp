#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cpu/dot.h"
#include "backend/cpu/gemm.h"
#include "backend/row_mass.h"
#include "backend/top_key.h"
#include "quant/dequant.h"

namespace df::cpu {

float silu(float x) { return x / (1.0f + std::exp(-x)); }
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float softplus(float x) { return x > 20.0f ? x : std::log(1.0f + std::exp(x)); }

CpuBackend::CpuBackend(int threads) : pool_(threads), gemm_scratch_(static_cast<size_t>(pool_.size())) {}

CpuBackend::~CpuBackend() {
    for (auto& [p, info] : allocs_) std::free(p);
}

// ---- memory ------------------------------------------------------------------------------

void* CpuBackend::alloc(size_t bytes, MemKind kind) {
    const size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, rounded);
    std::lock_guard lock(mem_mu_);
    allocs_[p] = {bytes, kind};
    auto k = static_cast<size_t>(kind);
    in_use_[k] += bytes;
    peak_[k] = std::max(peak_[k], in_use_[k]);
    return p;
}

void CpuBackend::release(void* p) {
    if (!p) return;
    std::lock_guard lock(mem_mu_);
    auto it = allocs_.find(p);
    if (it == allocs_.end()) throw std::logic_error("cpu backend: release of unknown pointer");
    in_use_[static_cast<size_t>(it->second.second)] -= it->second.first;
    allocs_.erase(it);
    std::free(p);
}

void CpuBackend::upload(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void CpuBackend::download(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void CpuBackend::copy(void* dst, const void* src, size_t bytes) { std::memmove(dst, src, bytes); }
void CpuBackend::zero(void* dst, size_t bytes) { std::memset(dst, 0, bytes); }

Weight CpuBackend::load_weight(quant::Type type, int64_t cols, int64_t rows, const void* host,
                               size_t bytes) {
    // Used in place from the mapping: no copy, the page cache holds it.
    Weight w;
    w.type = type;
    w.cols = cols;
    w.rows = rows;
    w.data = host;
    w.bytes = bytes;
    w.row_stride = quant::row_bytes(type, cols);
    std::lock_guard lock(mem_mu_);
    auto k = static_cast<size_t>(MemKind::weights);
    in_use_[k] += bytes;
    peak_[k] = std::max(peak_[k], in_use_[k]);
    return w;
}

size_t CpuBackend::bytes_in_use(MemKind kind) const {
    std::lock_guard lock(mem_mu_);
    return in_use_[static_cast<size_t>(kind)];
}

size_t CpuBackend::peak_bytes(MemKind kind) const {
    std::lock_guard lock(mem_mu_);
    return peak_[static_cast<size_t>(kind)];
}

// ---- dense ops -----------------------------------------------------------------------------

void CpuBackend::embed(const Weight& w, const Step& s, float* out) {
    const auto deq = quant::dequant_fn(w.type);
    for (int t = 0; t < s.T; ++t) {
        const int32_t id = s.tokens[t];
        if (id < 0 || id >= w.rows) throw std::out_of_range("embed: token id " + std::to_string(id) + " outside the vocabulary of " + std::to_string(w.rows));
        deq(static_cast<const uint8_t*>(w.data) + static_cast<size_t>(id) * w.row_stride,
            out + static_cast<size_t>(t) * w.cols, w.cols);
    }
}

namespace {
// ggml's rms_norm: sum of squares in double, scale in float, then the weight as a separate mul.
void rmsnorm_row(const float* x, const float* w, int n, float eps, float* y) {
    double sum = 0;
    for (int i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
    const float mean = static_cast<float>(sum / n);
    const float scale = 1.0f / std::sqrt(mean + eps);
    if (w) {
        for (int i = 0; i < n; ++i) y[i] = (x[i] * scale) * w[i];
    } else {
        for (int i = 0; i < n; ++i) y[i] = x[i] * scale;
    }
}
}  // namespace

void CpuBackend::rmsnorm(const float* x, int64_t x_stride, const float* weight, int n_rows, int n,
                         float eps, float* out, int64_t out_stride) {
    for (int r = 0; r < n_rows; ++r) rmsnorm_row(x + r * x_stride, weight, n, eps, out + r * out_stride);
}

void CpuBackend::matmul(const Weight& w, const float* x, int T, float* out, bool accumulate) {
    const int64_t rows = w.rows, cols = w.cols;
    const auto* base = static_cast<const uint8_t*>(w.data);
    if (T > kRowDotMaxT) {
        // Prompt chunks: each thread decodes a panel of 16 rows once (gemm.h: column-interleaved,
        // it stays in L2) and sweeps it over all T tokens. Every weight row is read and decoded
        // once per chunk.
        const size_t block = static_cast<size_t>(kPanelRows * cols);
        pool_.parallel_for((rows + kPanelRows - 1) / kPanelRows, 1, [&](int64_t p0, int64_t p1, int thread) {
            std::vector<float>& buf = gemm_scratch_[static_cast<size_t>(thread)];
            if (buf.size() < 2 * block + 16) buf.resize(2 * block + 16);
            float* const decoded = buf.data();
            float* const panel = align_panel(decoded + block);
            for (int64_t p = p0; p < p1; ++p) {
                const int64_t r0 = p * kPanelRows;
                const int nr = static_cast<int>(std::min<int64_t>(kPanelRows, rows - r0));
                for (int r = 0; r < nr; ++r) decode_row(w.type, base + (r0 + r) * w.row_stride, cols, decoded + r * cols);
                pack_panel(decoded, nr, cols, panel);
                gemm_panel(panel, nr, cols, x, cols, T, out + r0, rows, accumulate);  // AVX-512 where the CPU has it
            }
        });
        return;
    }
    // Decode and small batches (speculative verify): row_dot's order does not depend on T, so
    // these logits are bitwise those of one-token steps.
    pool_.parallel_for(rows, 64, [&](int64_t r0, int64_t r1, int) {
        float tmp[kRowDotMaxT];
        for (int64_t r = r0; r < r1; ++r) {
            row_dot(w.type, base + r * w.row_stride, cols, x, cols, T, tmp, 1);
            for (int t = 0; t < T; ++t) {
                float& o = out[static_cast<int64_t>(t) * rows + r];
                o = accumulate ? o + tmp[t] : tmp[t];
            }
        }
    });
}

void CpuBackend::ffn_gate_up(const Weight& wg, const Weight& wu, const float* x, int T, float* out,
                             float* scratch) {
    matmul(wg, x, T, out, false);
    matmul(wu, x, T, scratch, false);
    // Over the pool: a prompt chunk's expf calls were ~5 % of its prefill on one thread.
    pool_.parallel_for(static_cast<int64_t>(T) * wg.rows, 4096, [&](int64_t i0, int64_t i1, int) {
        for (int64_t i = i0; i < i1; ++i) out[i] = silu(out[i]) * scratch[i];
    });
}

void CpuBackend::head_norm_rope(float* x, int heads, int head_dim, int head_stride, int row,
                                const float* norm_w, float eps, const RopeShape& rope,
                                const Step& s) {
    const int half = rope.n_rot / 2;
    // ggml's rope cache: theta built by repeated multiplication in f32.
    const float theta_scale = rope.theta_scale();
    std::vector<float> cs(static_cast<size_t>(half) * 2);
    for (int t = 0; t < s.T; ++t) {
        float theta = static_cast<float>(s.pos[t]);
        for (int i = 0; i < half; ++i) {
            cs[2 * i] = std::cos(theta);
            cs[2 * i + 1] = std::sin(theta);
            theta *= theta_scale;
        }
        for (int h = 0; h < heads; ++h) {
            float* v = x + static_cast<int64_t>(t) * row + static_cast<int64_t>(h) * head_stride;
            if (norm_w) rmsnorm_row(v, norm_w, head_dim, eps, v);
            for (int i = 0; i < half; ++i) {
                const float x0 = v[i], x1 = v[i + half];
                v[i] = x0 * cs[2 * i] - x1 * cs[2 * i + 1];
                v[i + half] = x0 * cs[2 * i + 1] + x1 * cs[2 * i];
            }
        }
    }
}

void CpuBackend::sigmoid_mul(float* x, int n, const float* gate, int width, int gate_stride,
                             int gate_row, int T) {
    for (int t = 0; t < T; ++t) {
        float* xr = x + static_cast<int64_t>(t) * n;
        const float* g = gate + static_cast<int64_t>(t) * gate_row;
        for (int i = 0; i < n; ++i) xr[i] *= sigmoid(g[(i / width) * gate_stride + i % width]);
    }
}

void CpuBackend::add(float* y, const float* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void CpuBackend::argmax(const float* x, int T, int n, int32_t* out, const ArgmaxFeed* feed) {
    for (int t = 0; t < T; ++t) {
        const float* r = x + static_cast<int64_t>(t) * n;
        int best = 0;
        for (int i = 1; i < n; ++i)
            if (r[i] > r[best]) best = i;
        out[t] = best;
    }
    if (feed && T > 0) {
        feed->pos[0] = feed->pos[feed->T - 1] + 1;
        feed->tokens[0] = out[T - 1];
    }
}

void CpuBackend::top_logits(const float* x, int n, int k, const int32_t* extra, int n_extra, int32_t* ids, float* vals) {
    check_top_logits(n, k, extra, n_extra, kTopLogitsMax);
    std::vector<uint64_t>& keys = top_keys_;
    keys.resize(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) keys[i] = top_key(x[i], i);
    std::partial_sort(keys.begin(), keys.begin() + k, keys.end(), std::greater<>());
    for (int j = 0; j < k; ++j) {
        ids[j] = top_key_index(keys[j]);
        vals[j] = x[ids[j]];
    }
    for (int i = 0; i < n_extra; ++i) {
        ids[k + i] = extra[i];
        vals[k + i] = x[extra[i]];
    }
}

uint64_t CpuBackend::row_mass(const float* x, int n, float lmax) {
    check_row_mass(n);
    uint64_t sum = 0;
    for (int i = 0; i < n; ++i) sum += mass_term(x[i], lmax);
    return sum;
}

}  // namespace df::cpu

namespace df {
std::unique_ptr<Backend> make_cpu_backend(int threads) {
    return std::make_unique<cpu::CpuBackend>(threads);
}
}  // namespace df
