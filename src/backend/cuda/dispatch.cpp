// Block type -> kernels of its generated translation unit; the launch switch.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/check.h"
#include "backend/cuda/kernels.h"

namespace df::cuda {

namespace {
// Measured against 0 (split + combine), 8 clusters, and 64 keys (contexts of 1,500-2,000 keys then
// took the split kernels, 2-3 % slower): bench/RESULTS.md, session 10.
constexpr int kDefaultCluster = 16, kDefaultClusterKeys = 128;
// The one-token Q8_0 matvec's cp.async ring: 2 and 3 chunks measured equal (4B 466 vs 425-428 tok/s
// without), 4 (two blocks per SM) 410; four blocks per SM at 64 registers lost (423 / 452).
constexpr int kDefaultRing = 2;
// The wgmma GEMM's clusters: 2 against 1 / 4 / 8, 27B prefill at 4096 +2.3 % / +8 % / +20 %
// (bench/RESULTS.md, session 29).
constexpr int kDefaultQGemmCluster = 2;
std::atomic<bool>& pdl_flag() {
    static std::atomic<bool> on{[] {
        const char* e = std::getenv("DF_CUDA_PDL");
        return !(e && std::strcmp(e, "0") == 0);
    }()};
    return on;
}
// An integer setting from the environment (for A/B runs): its value where set and valid, else the default.
int env_int(const char* name, int fallback, bool (*valid)(int)) {
    const char* e = std::getenv(name);
    const int n = e ? std::atoi(e) : fallback;
    return valid(n) ? n : fallback;
}
bool positive(int n) { return n >= 1; }
bool cluster_size_ok(int n) { return n >= 0 && n <= 16 && (n & (n - 1)) == 0; }
std::atomic<int>& split_keys_value() {
    static std::atomic<int> v{env_int("DF_CUDA_ATTN_SPLIT_KEYS", 16, positive)};
    return v;
}
bool heads_ok(int n) { return n >= 1 && n <= 8; }
std::atomic<int>& split_heads_value() {
    static std::atomic<int> v{env_int("DF_CUDA_ATTN_SPLIT_HEADS", 8, heads_ok)};
    return v;
}
std::atomic<int>& cluster_value() {
    static std::atomic<int> v{env_int("DF_CUDA_ATTN_CLUSTER", kDefaultCluster, cluster_size_ok)};
    return v;
}
std::atomic<int>& cluster_keys_value() {
    static std::atomic<int> v{env_int("DF_CUDA_ATTN_CLUSTER_KEYS", kDefaultClusterKeys, positive)};
    return v;
}
bool ring_ok(int n) { return n == 0 || (n >= 2 && n <= 4); }
std::atomic<int>& ring_value() {
    static std::atomic<int> v{env_int("DF_CUDA_MATVEC_RING", kDefaultRing, ring_ok)};
    return v;
}
bool multi_ok(int n) { return n >= 0 && n <= 2; }
std::atomic<int>& ring_multi_value() {
    static std::atomic<int> v{env_int("DF_CUDA_MATVEC_RING_MULTI", 2, multi_ok)};
    return v;
}
bool qgemm_cluster_ok(int n) { return n >= 1 && n <= 8 && (n & (n - 1)) == 0; }
std::atomic<int>& qgemm_cluster_value() {
    static std::atomic<int> v{env_int("DF_CUDA_QGEMM_CLUSTER", kDefaultQGemmCluster, qgemm_cluster_ok)};
    return v;
}
}  // namespace

int qgemm_cluster() { return qgemm_cluster_value().load(std::memory_order_relaxed); }
void set_qgemm_cluster(int blocks) {
    qgemm_cluster_value().store(qgemm_cluster_ok(blocks) ? blocks : kDefaultQGemmCluster, std::memory_order_relaxed);
}

int matvec_ring() { return ring_value().load(std::memory_order_relaxed); }
void set_matvec_ring(int depth) { ring_value().store(ring_ok(depth) ? depth : 0, std::memory_order_relaxed); }
int matvec_ring_multi() { return ring_multi_value().load(std::memory_order_relaxed); }
void set_matvec_ring_multi(int mode) { ring_multi_value().store(multi_ok(mode) ? mode : 2, std::memory_order_relaxed); }

int attn_cluster() { return cluster_value().load(std::memory_order_relaxed); }
void set_attn_cluster(int blocks) { cluster_value().store(cluster_size_ok(blocks) ? blocks : 0, std::memory_order_relaxed); }
int attn_cluster_keys() { return cluster_keys_value().load(std::memory_order_relaxed); }
void set_attn_cluster_keys(int keys) { cluster_keys_value().store(keys >= 1 ? keys : 1, std::memory_order_relaxed); }

int attn_split_keys() { return split_keys_value().load(std::memory_order_relaxed); }
void set_attn_split_keys(int keys) { split_keys_value().store(keys >= 1 ? keys : 1, std::memory_order_relaxed); }
int attn_split_heads() { return split_heads_value().load(std::memory_order_relaxed); }
void set_attn_split_heads(int heads) { split_heads_value().store(heads_ok(heads) ? heads : 8, std::memory_order_relaxed); }

namespace {
std::atomic<bool>& prep_fused_flag() {
    static std::atomic<bool> on{env_int("DF_CUDA_ATTN_PREP_FUSED", 0, [](int n) { return n == 0 || n == 1; }) == 1};
    return on;
}
}  // namespace
bool attn_prep_fused() { return prep_fused_flag().load(std::memory_order_relaxed); }
void set_attn_prep_fused(bool on) { prep_fused_flag().store(on, std::memory_order_relaxed); }

bool pdl_enabled() { return pdl_flag().load(std::memory_order_relaxed); }
void set_pdl_enabled(bool on) { pdl_flag().store(on, std::memory_order_relaxed); }

namespace {
// DF_CUDA_CARVEOUT: unset or "auto", the requests' maximum on decode launches; -1, the driver's
// choice everywhere; P (0..100), P on decode launches. Only decode launches carry it: set per
// function (session 20) it also reached the prefill GEMMs, whose prefill fell from 17.2k to 13.1k
// tok/s (4B) and 3.08k to 2.33k (27B).
bool carveout_ok(int n) { return n >= -1 && n <= 100; }
const char* const kCarveoutEnv = std::getenv("DF_CUDA_CARVEOUT");
const bool kCarveoutAuto = !kCarveoutEnv || std::strcmp(kCarveoutEnv, "auto") == 0;
const int kCarveoutForced = kCarveoutAuto ? -2 : env_int("DF_CUDA_CARVEOUT", -1, carveout_ok);  // -2: auto
std::atomic<int> carveout{kCarveoutForced >= -1 ? kCarveoutForced : -1};
std::atomic<bool> decode_launches{false};
}  // namespace

int request_carveout(int pct) {
    int cur = carveout.load(std::memory_order_relaxed);
    if (kCarveoutForced >= -1) return cur;
    pct = std::min(pct, 100);
    while (pct > cur && !carveout.compare_exchange_weak(cur, pct, std::memory_order_relaxed)) {
    }
    return std::max(cur, pct);
}

void set_decode_launches(bool on) { decode_launches.store(on, std::memory_order_relaxed); }

int launch_carveout() {
    return decode_launches.load(std::memory_order_relaxed) ? carveout.load(std::memory_order_relaxed) : -1;
}

#define DF_X(name) extern const QuantOps kQuantOps_##name;
#include "backend/cuda/quant_types.inc"
#undef DF_X

const QuantOps* quant_ops(quant::Type t) {
    switch (t) {
#define DF_X(name) \
    case quant::Type::name: return &kQuantOps_##name;
#include "backend/cuda/quant_types.inc"
#undef DF_X
        default: return nullptr;
    }
}

#define DF_Y(a, b) extern const ImmaTwoFn kImmaTwo_##a##_##b;
#include "backend/cuda/imma_two_types.inc"
#undef DF_Y

ImmaTwoFn imma_two(quant::Type a, quant::Type b) {
#define DF_Y(x, y) \
    if (a == quant::Type::x && b == quant::Type::y) return kImmaTwo_##x##_##y;
#include "backend/cuda/imma_two_types.inc"
#undef DF_Y
    return nullptr;
}

}  // namespace df::cuda
