// CUDA dense ops against the CPU backend on random inputs of awkward sizes.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>

#include <cuda.h>
#include <cuda_runtime.h>

#include "backend/cuda/attention_prefill.h"
#include "backend/cuda/kernels.h"
#include "cuda_test_util.h"
#include "quant/dequant.h"

namespace df::test {
namespace {

// The backend asks CUDA to load every kernel with its module (backend_cuda.cpp), so no kernel
// loads inside a decode step or a prompt: the driver's own mode says whether that took effect
// (it is fixed when CUDA starts: before the backend's first call, or this process's first).
TEST(CudaBackend, KernelsLoadWithTheirModules) {
    DF_REQUIRE_CUDA();
    gpu_backend();
    const char* e = std::getenv("CUDA_MODULE_LOADING");
    ASSERT_NE(e, nullptr) << "the backend did not ask for eager loading";
    if (std::strcmp(e, "EAGER") != 0) GTEST_SKIP() << "CUDA_MODULE_LOADING=" << e << " set by the environment";
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuModuleGetLoadingMode", &fn, 12000, cudaEnableDefault, &found), cudaSuccess);
    ASSERT_TRUE(found == cudaDriverEntryPointSuccess && fn);
    CUmoduleLoadingMode mode{};
    ASSERT_EQ(reinterpret_cast<CUresult (*)(CUmoduleLoadingMode*)>(fn)(&mode), CUDA_SUCCESS);
    EXPECT_EQ(mode, CU_MODULE_EAGER_LOADING);
}

// The process-wide decode carveout (kernels.h): a request never lowers it, a higher one raises
// it, it stays a percentage, and launches carry it only while decode launches are on.
TEST(CudaOps, CarveoutRequestsOnlyRaiseIt) {
    const char* e = std::getenv("DF_CUDA_CARVEOUT");
    if (e && std::strcmp(e, "auto") != 0) GTEST_SKIP() << "DF_CUDA_CARVEOUT=" << e << " fixes the carveout";
    const int now = cuda::request_carveout(-1);
    ASSERT_GE(now, -1);
    ASSERT_LE(now, 100);
    EXPECT_EQ(cuda::request_carveout(now - 1), now);
    if (now < 100) {
        EXPECT_EQ(cuda::request_carveout(now + 1), now + 1);  // +1 %: harmless to the tests after it
    }
    const int raised = cuda::request_carveout(-1);
    EXPECT_EQ(raised, std::min(now + 1, 100));
    EXPECT_EQ(cuda::request_carveout(raised), raised);
    cuda::set_decode_launches(true);
    EXPECT_EQ(cuda::launch_carveout(), raised);
    cuda::set_decode_launches(false);
    EXPECT_EQ(cuda::launch_carveout(), -1);
}

TEST(CudaOps, RmsNormStridedAliasedAndUnweighted) {
    DF_REQUIRE_CUDA();
    Backend& cpu = *cpu_backend();
    Backend& gpu = *gpu_backend();
    auto g = test_rng();
    // 256-multiples up to 16384 take the register kernel (16-byte aligned rows when pad is 4, and
    // two units per warp above 8192), the others the general one.
    const std::pair<int, int> cases[] = {{1, 3}, {37, 3}, {256, 3}, {5120, 3}, {2560, 4}, {16384, 4}, {16640, 4}};
    for (const auto& [n, pad] : cases) {
        SCOPED_TRACE(n);
        const int rows = 5, xs = n + pad, os = n + pad + 4;
        const auto x = randn(g, static_cast<size_t>(rows) * xs, 3.f);
        const auto w = randn(g, n);
        Buf<float> xc(cpu, x), xg(gpu, x), wc(cpu, w), wg(gpu, w);
        Buf<float> oc(cpu, static_cast<size_t>(rows) * os), og(gpu, static_cast<size_t>(rows) * os);
        for (bool weighted : {true, false}) {
            og.poison();
            oc.poison();
            cpu.rmsnorm(xc.p(), xs, weighted ? wc.p() : nullptr, rows, n, 1e-6f, oc.p(), os);
            gpu.rmsnorm(xg.p(), xs, weighted ? wg.p() : nullptr, rows, n, 1e-6f, og.p(), os);
            auto ref = oc.get(), got = og.get();
            // Compare only the rows' n values (the padding stays NaN on both).
            std::vector<float> r2, g2;
            for (int r = 0; r < rows; ++r)
                for (int i = 0; i < n; ++i) {
                    r2.push_back(ref[static_cast<size_t>(r) * os + i]);
                    g2.push_back(got[static_cast<size_t>(r) * os + i]);
                }
            EXPECT_TRUE(all_close(g2, r2, tol_rel(r2, 4 * kEps, 1e-30f))) << "n " << n;
        }
        // In place.
        cpu.rmsnorm(xc.p(), xs, wc.p(), rows, n, 1e-6f, xc.p(), xs);
        gpu.rmsnorm(xg.p(), xs, wg.p(), rows, n, 1e-6f, xg.p(), xs);
        const auto ref = xc.get();
        EXPECT_TRUE(all_close(xg.get(), ref, tol_rel(ref, 4 * kEps, 1e-30f))) << "in place, n " << n;
    }
}

TEST(CudaOps, HeadNormRopeGatedLayoutLargePositions) {
    DF_REQUIRE_CUDA();
    Backend& cpu = *cpu_backend();
    Backend& gpu = *gpu_backend();
    auto g = test_rng();
    struct Case { int heads, head_dim, n_rot, stride_mul, T; float base; bool norm; int pos0; };
    for (const Case c : {Case{4, 256, 64, 2, 3, 1e7f, true, 0}, Case{32, 128, 128, 1, 9, 1e6f, true, 40000},
                         Case{6, 256, 64, 2, 257, 1e7f, true, 100}, Case{8, 128, 128, 1, 1, 1e4f, false, 7}}) {
        SCOPED_TRACE("heads " + std::to_string(c.heads) + " dim " + std::to_string(c.head_dim) + " T " + std::to_string(c.T));
        const int head_stride = c.head_dim * c.stride_mul, row = c.heads * head_stride + 5;
        const auto x = randn(g, static_cast<size_t>(c.T) * row, 2.f);
        const auto w = randn(g, c.head_dim);
        std::vector<int32_t> pos(c.T);
        for (int t = 0; t < c.T; ++t) pos[t] = c.pos0 + t;
        Buf<float> xc(cpu, x), xg(gpu, x), wc(cpu, w), wg(gpu, w);
        Buf<int32_t> pc(cpu, pos), pg(gpu, pos);
        Step sc, sg;
        sc.T = sg.T = c.T;
        sc.pos = pc.p();
        sg.pos = pg.p();
        const RopeShape rope{c.n_rot, c.base};
        cpu.head_norm_rope(xc.p(), c.heads, c.head_dim, head_stride, row, c.norm ? wc.p() : nullptr, 1e-6f, rope, sc);
        gpu.head_norm_rope(xg.p(), c.heads, c.head_dim, head_stride, row, c.norm ? wg.p() : nullptr, 1e-6f, rope, sg);
        const auto ref = xc.get();
        // cos/sin of the same f32 angle may differ by an ulp or two between libm and CUDA.
        float maxabs = 0;
        for (float v : ref) maxabs = std::max(maxabs, std::fabs(v));
        EXPECT_TRUE(all_close(xg.get(), ref, tol_rel(ref, 8 * kEps, 8 * kEps * maxabs)));
    }
}

// Prefill's prep kernel (a warp per head, T > 8) and decode's (a block per head) sum a head's
// squares in one order: a prefill's rows equal one-token calls at the same positions bit for bit.
TEST(CudaOps, HeadNormRopePrefillRowsEqualOneTokenCalls) {
    DF_REQUIRE_CUDA();
    Backend& gpu = *gpu_backend();
    auto g = test_rng();
    struct Case { int heads, head_dim, n_rot, T; };
    for (const Case c : {Case{40, 128, 128, 9}, Case{6, 256, 64, 300}, Case{5, 64, 32, 17}}) {
        SCOPED_TRACE("heads " + std::to_string(c.heads) + " dim " + std::to_string(c.head_dim) + " T " + std::to_string(c.T));
        const int row = c.heads * c.head_dim, pos0 = 1000;
        const auto x = randn(g, static_cast<size_t>(c.T) * row, 2.f);
        const auto w = randn(g, c.head_dim);
        std::vector<int32_t> pos(c.T);
        for (int t = 0; t < c.T; ++t) pos[t] = pos0 + t;
        Buf<float> xa(gpu, x), wg(gpu, w);
        Buf<int32_t> pg(gpu, pos);
        const RopeShape rope{c.n_rot, 1e6f};
        Step s;
        s.T = c.T;
        s.pos = pg.p();
        gpu.head_norm_rope(xa.p(), c.heads, c.head_dim, c.head_dim, row, wg.p(), 1e-6f, rope, s);
        const auto all = xa.get();
        for (int t = 0; t < c.T; t += std::max(1, c.T / 7)) {
            Buf<float> xt(gpu, std::vector<float>(x.begin() + static_cast<size_t>(t) * row, x.begin() + static_cast<size_t>(t + 1) * row));
            Step st;
            st.T = 1;
            st.pos = pg.p() + t;
            gpu.head_norm_rope(xt.p(), c.heads, c.head_dim, c.head_dim, row, wg.p(), 1e-6f, rope, st);
            EXPECT_EQ(0, std::memcmp(xt.get().data(), all.data() + static_cast<size_t>(t) * row, sizeof(float) * row)) << "token " << t;
        }
    }
}

// An attention layer's q and k head_norm_rope calls and its kv_store, which the CUDA backend
// launches as one kernel, against the CPU backend's three ops.
TEST(CudaOps, HeadNormRopeOfQAndKWithKvStoreFused) {
    DF_REQUIRE_CUDA();
    Backend& cpu = *cpu_backend();
    Backend& gpu = *gpu_backend();
    auto g = test_rng();
    struct Case { int heads, kv_heads, head_dim, n_rot, T, pos0; KvType kt; bool gated; };
    for (const Case c : {Case{8, 2, 128, 64, 3, 0, KvType::f16, true}, Case{6, 6, 256, 256, 1, 5000, KvType::f32, false},
                         Case{5, 1, 64, 32, 9, 17, KvType::f16, false}}) {
        SCOPED_TRACE("heads " + std::to_string(c.heads) + "/" + std::to_string(c.kv_heads) + " T " + std::to_string(c.T));
        const int D = c.head_dim, kv_dim = c.kv_heads * D, ctx = c.pos0 + c.T;
        const int q_stride = c.gated ? 2 * D : D, q_row = c.heads * q_stride;
        const size_t elem = c.kt == KvType::f16 ? 2 : 4;
        const auto q = randn(g, static_cast<size_t>(c.T) * q_row, 2.f), k = randn(g, static_cast<size_t>(c.T) * kv_dim, 2.f);
        const auto v = randn(g, static_cast<size_t>(c.T) * kv_dim), qw = randn(g, D), kw = randn(g, D);
        std::vector<int32_t> pos(c.T);
        for (int t = 0; t < c.T; ++t) pos[t] = c.pos0 + t;
        Buf<float> qc(cpu, q), qg(gpu, q), kc(cpu, k), kg(gpu, k), vc(cpu, v), vg(gpu, v);
        Buf<float> qwc(cpu, qw), qwg(gpu, qw), kwc(cpu, kw), kwg(gpu, kw);
        Buf<int32_t> pc(cpu, pos), pg(gpu, pos);
        Buf<uint8_t> kcc(cpu, elem * ctx * kv_dim, MemKind::kv), vcc(cpu, elem * ctx * kv_dim, MemKind::kv);
        Buf<uint8_t> kcg(gpu, elem * ctx * kv_dim, MemKind::kv), vcg(gpu, elem * ctx * kv_dim, MemKind::kv);
        Step sc, sg;
        sc.T = sg.T = c.T;
        sc.pos = pc.p();
        sg.pos = pg.p();
        const RopeShape rope{c.n_rot, 1e6f};
        for (Backend* be : {&cpu, &gpu}) {
            const bool on_gpu = be == &gpu;
            const Step& s = on_gpu ? sg : sc;
            be->head_norm_rope(on_gpu ? qg.p() : qc.p(), c.heads, D, q_stride, q_row, on_gpu ? qwg.p() : qwc.p(), 1e-6f, rope, s);
            be->head_norm_rope(on_gpu ? kg.p() : kc.p(), c.kv_heads, D, D, kv_dim, on_gpu ? kwg.p() : kwc.p(), 1e-6f, rope, s);
            be->kv_store(on_gpu ? kg.p() : kc.p(), on_gpu ? vg.p() : vc.p(), on_gpu ? kcg.p() : kcc.p(),
                         on_gpu ? vcg.p() : vcc.p(), c.kt, kv_dim, s);
        }
        // cos/sin of the same f32 angle may differ by an ulp or two between libm and CUDA.
        auto close = [](const std::vector<float>& got, const std::vector<float>& ref) {
            float maxabs = 0;
            for (float x : ref) maxabs = std::max(maxabs, std::fabs(x));
            return all_close(got, ref, tol_rel(ref, 8 * kEps, 8 * kEps * maxabs));
        };
        EXPECT_TRUE(close(qg.get(), qc.get())) << "q";
        EXPECT_TRUE(close(kg.get(), kc.get())) << "k";
        // The caches hold the rotated k (an f16 rounding may flip with an ulp of k) and v as stored.
        auto as_f32 = [&](const std::vector<uint8_t>& b) {
            std::vector<float> f(b.size() / elem);
            for (size_t i = 0; i < f.size(); ++i) {
                if (c.kt == KvType::f16) {
                    uint16_t h;
                    std::memcpy(&h, b.data() + 2 * i, 2);
                    f[i] = quant::f16_to_f32(h);
                } else {
                    std::memcpy(&f[i], b.data() + 4 * i, 4);
                }
            }
            return f;
        };
        const auto kref = as_f32(kcc.get()), kgot = as_f32(kcg.get());
        float maxabs = 0;
        for (float x : kref) maxabs = std::max(maxabs, std::fabs(x));
        EXPECT_TRUE(all_close(kgot, kref, tol_rel(kref, 2e-3f, 8 * kEps * maxabs))) << "k cache";
        EXPECT_TRUE(vcc.get() == vcg.get()) << "v cache";
    }
}

struct AttnCase {
    int heads, kv_heads, head_dim, T, pos0;
    KvType kt;
    bool gated;
};

// Stores pos0 earlier rows and then T rows on both backends (the caches must agree byte for
// byte), runs attention for the T tokens at pos0.. on both and compares. hint: the GPU step carries
// pos0 in Step::pos0_hint (else 0, as a stale hint would).
void check_kv_store_and_attention(const AttnCase& c, std::mt19937_64& g, bool hint = false) {
    Backend& cpu = *cpu_backend();
    Backend& gpu = *gpu_backend();
    {
        SCOPED_TRACE("heads " + std::to_string(c.heads) + "/" + std::to_string(c.kv_heads) + " dim " +
                     std::to_string(c.head_dim) + " T " + std::to_string(c.T) + " pos0 " + std::to_string(c.pos0) +
                     (c.kt == KvType::f16 ? " f16" : " f32"));
        const int D = c.head_dim, kv_dim = c.kv_heads * D, ctx = c.pos0 + c.T + 3;
        const int q_stride = c.gated ? 2 * D : D, q_row = c.heads * q_stride;
        const size_t elem = c.kt == KvType::f16 ? 2 : 4;
        // The cache rows before pos0 come from an earlier store of random rows.
        Buf<uint8_t> kcc(cpu, elem * ctx * kv_dim, MemKind::kv), vcc(cpu, elem * ctx * kv_dim, MemKind::kv);
        Buf<uint8_t> kcg(gpu, elem * ctx * kv_dim, MemKind::kv), vcg(gpu, elem * ctx * kv_dim, MemKind::kv);
        auto store = [&](int p0, int n) {
            const auto k = randn(g, static_cast<size_t>(n) * kv_dim), v = randn(g, static_cast<size_t>(n) * kv_dim);
            std::vector<int32_t> pos(n);
            for (int t = 0; t < n; ++t) pos[t] = p0 + t;
            Buf<float> kc(cpu, k), vc(cpu, v), kg(gpu, k), vg(gpu, v);
            Buf<int32_t> pc(cpu, pos), pg(gpu, pos);
            Step sc, sg;
            sc.T = sg.T = n;
            sc.pos = pc.p();
            sg.pos = pg.p();
            cpu.kv_store(kc.p(), vc.p(), kcc.p(), vcc.p(), c.kt, kv_dim, sc);
            gpu.kv_store(kg.p(), vg.p(), kcg.p(), vcg.p(), c.kt, kv_dim, sg);
        };
        if (c.pos0) store(0, c.pos0);
        store(c.pos0, c.T);
        // kv_store itself: the caches are equal byte for byte.
        ASSERT_TRUE(kcc.get() == kcg.get() && vcc.get() == vcg.get()) << "kv_store differs";

        const auto q = randn(g, static_cast<size_t>(c.T) * q_row);
        std::vector<int32_t> pos(c.T);
        for (int t = 0; t < c.T; ++t) pos[t] = c.pos0 + t;
        Buf<float> qc(cpu, q), qg(gpu, q), oc(cpu, static_cast<size_t>(c.T) * c.heads * D), og(gpu, static_cast<size_t>(c.T) * c.heads * D);
        Buf<int32_t> pc(cpu, pos), pg(gpu, pos);
        og.poison();
        Step sc, sg;
        sc.T = sg.T = c.T;
        sc.pos = pc.p();
        sg.pos = pg.p();
        sg.pos0_hint = hint ? c.pos0 : 0;
        sc.max_ctx = sg.max_ctx = ctx;
        const AttnShape a{c.heads, c.kv_heads, D, q_stride, q_row, 1.0f / std::sqrt(static_cast<float>(D))};
        cpu.attention(qc.p(), kcc.p(), vcc.p(), c.kt, a, sc, oc.p());
        gpu.attention(qg.p(), kcg.p(), vcg.p(), c.kt, a, sg, og.p());
        // Outputs are convex combinations of V rows (|v| ~ 4 at most); softmax weights carry the
        // f32 rounding of scores of size ~|q||k| ~ D.
        const auto ref = oc.get();
        EXPECT_TRUE(all_close(og.get(), ref, tol_rel(ref, 0.f, 2e-5f * std::sqrt(static_cast<float>(D)))));
    }
}

// Decode attention's two forms (kernels.h): split + combine kernels (cluster 0), or for contexts
// of up to cluster x keys keys clusters of `cluster` blocks merging through distributed shared
// memory (longer ones: the split kernels, or several clusters when the hint says short).
struct AttnMode {
    int cluster, keys;
};
class ScopedAttnMode {
public:
    explicit ScopedAttnMode(AttnMode m) : cluster_(cuda::attn_cluster()), keys_(cuda::attn_cluster_keys()) {
        cuda::set_attn_cluster(m.cluster);
        cuda::set_attn_cluster_keys(m.keys);
    }
    ~ScopedAttnMode() {
        cuda::set_attn_cluster(cluster_);
        cuda::set_attn_cluster_keys(keys_);
    }

private:
    int cluster_, keys_;
};
// The split kernel's query heads per block (kernels.h: attn_split_heads).
class ScopedSplitHeads {
public:
    explicit ScopedSplitHeads(int heads) : saved_(cuda::attn_split_heads()) { cuda::set_attn_split_heads(heads); }
    ~ScopedSplitHeads() { cuda::set_attn_split_heads(saved_); }

private:
    int saved_;
};
// The one-token attention with its prep folded in (kernels.h: attn_prep_fused).
class ScopedPrepFused {
public:
    explicit ScopedPrepFused(bool on) : saved_(cuda::attn_prep_fused()) { cuda::set_attn_prep_fused(on); }
    ~ScopedPrepFused() { cuda::set_attn_prep_fused(saved_); }

private:
    bool saved_;
};
std::string mode_name(AttnMode m) {
    return m.cluster ? "cluster " + std::to_string(m.cluster) + " keys " + std::to_string(m.keys) : "split + combine";
}

TEST(CudaOps, KvStoreAndAttention) {
    DF_REQUIRE_CUDA();
    auto g = test_rng();
    using C = AttnCase;
    // Split kernels with up to 8 query heads per block, and with up to 3 (groups of 3 and 2).
    for (const auto& [mode, split_heads] : {std::pair{AttnMode{0, 64}, 8}, std::pair{AttnMode{0, 64}, 3},
                                           std::pair{AttnMode{8, 64}, 8}, std::pair{AttnMode{16, 16}, 8}})
    for (const C c : {C{4, 1, 256, 1, 0, KvType::f32, true}, C{32, 8, 128, 1, 4000, KvType::f16, false},
                      C{24, 4, 256, 3, 999, KvType::f32, true}, C{32, 8, 128, 8, 37, KvType::f32, false},
                      C{6, 6, 128, 9, 0, KvType::f16, false}, C{24, 4, 256, 257, 0, KvType::f32, true},
                      C{16, 2, 64, 255, 300, KvType::f16, false}, C{24, 4, 256, 1, 8191, KvType::f16, true},
                      C{12, 4, 96, 20, 70, KvType::f16, false}, C{4, 2, 160, 13, 0, KvType::f32, true},
                      // prefill over several key tiles of an f16 cache (its tiles are double-buffered)
                      C{32, 8, 128, 100, 200, KvType::f16, false}, C{24, 4, 256, 70, 100, KvType::f16, true}}) {
        SCOPED_TRACE(mode_name(mode) + " split heads " + std::to_string(split_heads));
        ScopedAttnMode scoped(mode);
        ScopedSplitHeads scoped_heads(split_heads);
        check_kv_store_and_attention(c, g);
    }
}

// Prefill attention of 128-wide heads over an f16 cache in both forms, each against the CPU: the
// wgmma kernel (sm_90a builds on compute capability 9.0) and the mma.sync one. GQA ratios 1, 2,
// 4 and 5 (12 tokens x 5 heads per block, 4 idle rows), one key tile and several, a context
// before the chunk, tiles with and without the causal diagonal.
TEST(CudaOps, PrefillAttentionWgmmaAndMmaSync) {
    DF_REQUIRE_CUDA();
    auto g = test_rng();
    cuda::AttnArgs probe;
    probe.head_dim = 128;
    probe.half_cache = true;
    const int saved = cuda::attn_prefill_wg();
    cuda::set_attn_prefill_wg(1);
    const bool able = cuda::attention_prefill_wg_able(probe);
    std::printf("[ note ] wgmma prefill attention %s\n", able ? "runs here" : "is not built or not for this device: both passes use mma.sync");
    using C = AttnCase;
    for (int wg : {1, 0}) {
        cuda::set_attn_prefill_wg(wg);
        SCOPED_TRACE(wg && able ? "wgmma" : "mma.sync");
        for (const C c : {C{32, 8, 128, 9, 0, KvType::f16, false}, C{16, 8, 128, 77, 5, KvType::f16, true},
                          C{40, 8, 128, 129, 64, KvType::f16, false}, C{8, 8, 128, 300, 1000, KvType::f16, false},
                          C{32, 8, 128, 513, 0, KvType::f16, true}})
            check_kv_store_and_attention(c, g);
    }
    cuda::set_attn_prefill_wg(saved);
}

// Decode contexts cut into splits of at least 1..64 keys: short and odd lengths around the split
// boundaries, where a split formula could leave a split empty or a key uncovered.
TEST(CudaOps, DecodeAttentionSplits) {
    DF_REQUIRE_CUDA();
    auto g = test_rng();
    const int saved = cuda::attn_split_keys();
    for (int keys : {1, 3, 16, 64}) {
        cuda::set_attn_split_keys(keys);
        SCOPED_TRACE("split_keys " + std::to_string(keys));
        for (int pos0 : {0, 1, 14, 15, 16, 17, 47, 63, 65, 129, 1000, 2049}) {
            check_kv_store_and_attention({32, 8, 128, 1, pos0, KvType::f16, false}, g);
            check_kv_store_and_attention({4, 1, 256, 3, pos0, KvType::f32, true}, g);
        }
    }
    cuda::set_attn_split_keys(saved);
}

// The cluster form over the same lengths: contexts within a cluster's reach, longer ones in one
// cluster too (when no hint sends them to the split kernels), empty blocks inside a cluster,
// clusters of 1..16 blocks; with the hint, 3-token calls that straddle a cluster's reach (254
// with 16 x 16, 511 with 8 x 64) run both kernels.
TEST(CudaOps, DecodeAttentionClusters) {
    DF_REQUIRE_CUDA();
    auto g = test_rng();
    for (const AttnMode mode : {AttnMode{1, 16}, AttnMode{2, 1}, AttnMode{4, 3}, AttnMode{8, 64}, AttnMode{16, 16}})
    for (const bool hint : {false, true}) {
        SCOPED_TRACE(mode_name(mode) + (hint ? " with hint" : ""));
        ScopedAttnMode scoped(mode);
        for (int pos0 : {0, 1, 14, 15, 16, 17, 47, 63, 65, 129, 254, 511, 512, 1000, 2049}) {
            check_kv_store_and_attention({32, 8, 128, 1, pos0, KvType::f16, false}, g, hint);
            check_kv_store_and_attention({4, 1, 256, 3, pos0, KvType::f32, true}, g, hint);
        }
    }
}

// Verify passes (T <= 8) give every token exactly its one-token attention result.
TEST(CudaBatchInvariance, AttentionRowsEqualOneTokenResults) {
    DF_REQUIRE_CUDA();
    Backend& gpu = *gpu_backend();
    auto g = test_rng();
    // pos0 1020 with clusters of 16 x 64 keys: the first four tokens' contexts fit one cluster,
    // the others go to the split kernels (both launched, as the hint says), each token as alone.
    for (const AttnMode mode : {AttnMode{0, 64}, AttnMode{8, 64}, AttnMode{4, 16}, AttnMode{16, 64}})
    for (const int split_heads : {8, 3})
    for (const int pos0 : {3000, 1020})
    for (KvType kt : {KvType::f16, KvType::f32}) {
        SCOPED_TRACE(mode_name(mode) + " split heads " + std::to_string(split_heads) + " pos0 " + std::to_string(pos0));
        ScopedAttnMode scoped(mode);
        ScopedSplitHeads scoped_heads(split_heads);
        const int heads = 24, kv_heads = 4, D = 256, T = 8, ctx = pos0 + T;
        const int kv_dim = kv_heads * D;
        const size_t elem = kt == KvType::f16 ? 2 : 4;
        Buf<uint8_t> kc(gpu, elem * ctx * kv_dim, MemKind::kv), vc(gpu, elem * ctx * kv_dim, MemKind::kv);
        {
            const auto k = randn(g, static_cast<size_t>(ctx) * kv_dim), v = randn(g, static_cast<size_t>(ctx) * kv_dim);
            std::vector<int32_t> pos(ctx);
            for (int i = 0; i < ctx; ++i) pos[i] = i;
            Buf<float> kb(gpu, k), vb(gpu, v);
            Buf<int32_t> pb(gpu, pos);
            Step s;
            s.T = ctx;
            s.pos = pb.p();
            gpu.kv_store(kb.p(), vb.p(), kc.p(), vc.p(), kt, kv_dim, s);
        }
        const auto q = randn(g, static_cast<size_t>(T) * heads * D);
        std::vector<int32_t> pos(T);
        for (int t = 0; t < T; ++t) pos[t] = pos0 + t;
        Buf<float> qb(gpu, q), ob(gpu, static_cast<size_t>(T) * heads * D);
        Buf<int32_t> pb(gpu, pos);
        const AttnShape a{heads, kv_heads, D, D, heads * D, 0.0625f};
        Step s;
        s.T = T;
        s.pos = pb.p();
        s.pos0_hint = pos0;
        s.max_ctx = ctx;
        gpu.attention(qb.p(), kc.p(), vc.p(), kt, a, s, ob.p());
        const auto all = ob.get();
        for (int t = 0; t < T; ++t) {
            Buf<float> q1(gpu, std::vector<float>(q.begin() + static_cast<size_t>(t) * heads * D, q.begin() + static_cast<size_t>(t + 1) * heads * D));
            Buf<float> o1(gpu, static_cast<size_t>(heads) * D);
            Buf<int32_t> p1(gpu, std::vector<int32_t>{pos[t]});
            Step s1;
            s1.T = 1;
            s1.pos = p1.p();
            s1.pos0_hint = pos[t];
            s1.max_ctx = ctx;
            gpu.attention(q1.p(), kc.p(), vc.p(), kt, a, s1, o1.p());
            const auto one = o1.get();
            EXPECT_EQ(0, std::memcmp(one.data(), all.data() + static_cast<size_t>(t) * heads * D, one.size() * 4)) << "token " << t;
        }
    }
}

// A batched pass's attention block (Backend::attention_lanes: one prep and one attention launch
// per band over rows of several sequences, each row with its own caches) against each lane's
// lone calls (head_norm_rope of q and k, kv_store, attention): rows, caches and outputs bit for
// bit, with lanes in both bands (the cluster kernel's and the split kernels') and a lane of 2 rows.
TEST(CudaBatchInvariance, AttentionLanesEqualLoneCalls) {
    DF_REQUIRE_CUDA();
    Backend& gpu = *gpu_backend();
    auto g = test_rng();
    for (const AttnMode mode : {AttnMode{16, 64}, AttnMode{0, 64}})
    for (KvType kt : {KvType::f16, KvType::f32}) {
        SCOPED_TRACE(mode_name(mode) + (kt == KvType::f16 ? " f16" : " f32"));
        ScopedAttnMode scoped(mode);
        const int heads = 8, kv_heads = 2, D = 128, n_rot = 64, q_stride = 2 * D, q_row = heads * q_stride;
        const int kv_dim = kv_heads * D;
        const size_t elem = kt == KvType::f16 ? 2 : 4;
        const std::vector<int> pos0 = {7, 1500, 0, 2100, 40};  // lane 3 takes two rows
        const std::vector<int> rows_of = {1, 1, 1, 2, 1};
        const int n = static_cast<int>(pos0.size()), rows = 6;
        const auto q = randn(g, static_cast<size_t>(rows) * q_row, 2.f), k = randn(g, static_cast<size_t>(rows) * kv_dim, 2.f);
        const auto v = randn(g, static_cast<size_t>(rows) * kv_dim), qw = randn(g, D), kw = randn(g, D);
        Buf<float> qa(gpu, q), ka(gpu, k), va(gpu, v), qwb(gpu, qw), kwb(gpu, kw), oa(gpu, static_cast<size_t>(rows) * heads * D);
        oa.poison();
        std::vector<int32_t> pos;
        for (int i = 0; i < n; ++i)
            for (int t = 0; t < rows_of[i]; ++t) pos.push_back(pos0[i] + t);
        Buf<int32_t> pa(gpu, pos);
        const RopeShape rope{n_rot, 1e6f};
        const AttnShape a{heads, kv_heads, D, q_stride, q_row, 0.088f};
        std::vector<std::unique_ptr<Buf<uint8_t>>> caches;  // per lane: k, v for the lanes; k, v alone
        std::vector<AttnLane> lanes;
        int row0 = 0;
        for (int i = 0; i < n; ++i) {
            const int ctx = pos0[i] + rows_of[i];
            for (int c = 0; c < 4; ++c) caches.push_back(std::make_unique<Buf<uint8_t>>(gpu, elem * ctx * kv_dim, MemKind::kv));
            if (pos0[i] > 0) {  // earlier rows, the same in both copies
                const auto ek = randn(g, static_cast<size_t>(pos0[i]) * kv_dim), ev = randn(g, static_cast<size_t>(pos0[i]) * kv_dim);
                std::vector<int32_t> ep(pos0[i]);
                for (int r = 0; r < pos0[i]; ++r) ep[r] = r;
                Buf<float> kb(gpu, ek), vb(gpu, ev);
                Buf<int32_t> pb(gpu, ep);
                Step s;
                s.T = pos0[i];
                s.pos = pb.p();
                for (int c = 0; c < 4; c += 2) gpu.kv_store(kb.p(), vb.p(), caches[4 * i + c]->p(), caches[4 * i + c + 1]->p(), kt, kv_dim, s);
            }
            AttnLane ln;
            ln.k_cache = caches[4 * i]->p();
            ln.v_cache = caches[4 * i + 1]->p();
            ln.s.T = rows_of[i];
            ln.s.pos = pa.p() + row0;
            ln.s.pos0_hint = pos0[i];
            ln.s.max_ctx = ctx;
            ln.row0 = row0;
            lanes.push_back(ln);
            row0 += rows_of[i];
        }
        gpu.attention_lanes(lanes, qa.p(), ka.p(), va.p(), qwb.p(), kwb.p(), 1e-6f, rope, kt, a, oa.p());
        const auto qall = qa.get(), kall = ka.get(), oall = oa.get();
        for (int i = 0; i < n; ++i) {
            SCOPED_TRACE("lane " + std::to_string(i));
            const AttnLane& ln = lanes[i];
            const int T = ln.s.T;
            auto part = [&](const std::vector<float>& x, int width) {
                return std::vector<float>(x.begin() + static_cast<size_t>(ln.row0) * width, x.begin() + static_cast<size_t>(ln.row0 + T) * width);
            };
            Buf<float> q1(gpu, part(q, q_row)), k1(gpu, part(k, kv_dim)), v1(gpu, part(v, kv_dim));
            Buf<float> o1(gpu, static_cast<size_t>(T) * heads * D);
            o1.poison();
            Buf<int32_t> p1(gpu, std::vector<int32_t>(pos.begin() + ln.row0, pos.begin() + ln.row0 + T));
            Step s = ln.s;
            s.pos = p1.p();
            void* kc = caches[4 * i + 2]->p();
            void* vc = caches[4 * i + 3]->p();
            gpu.head_norm_rope(q1.p(), heads, D, q_stride, q_row, qwb.p(), 1e-6f, rope, s);
            gpu.head_norm_rope(k1.p(), kv_heads, D, D, kv_dim, kwb.p(), 1e-6f, rope, s);
            gpu.kv_store(k1.p(), v1.p(), kc, vc, kt, kv_dim, s);
            gpu.attention(q1.p(), kc, vc, kt, a, s, o1.p());
            EXPECT_TRUE(q1.get() == part(qall, q_row)) << "q rows";
            EXPECT_TRUE(k1.get() == part(kall, kv_dim)) << "k rows";
            EXPECT_TRUE(caches[4 * i]->get() == caches[4 * i + 2]->get()) << "k cache";
            EXPECT_TRUE(caches[4 * i + 1]->get() == caches[4 * i + 3]->get()) << "v cache";
            const auto one = o1.get(), all = part(oall, heads * D);
            EXPECT_EQ(0, std::memcmp(one.data(), all.data(), one.size() * 4)) << "outputs";
        }
    }
}

// A one-token step's attention_lanes, with the q/k norm, RoPE and KV store folded into the
// attention launch (kernels.h: launch_attention_prepped, turned on here), against the separate ops: the same
// output and cache bits. The folded form leaves q and k as they were: that says it ran.
TEST(CudaBatchInvariance, AttentionWithItsPrepFoldedEqualsTheSeparateOps) {
    DF_REQUIRE_CUDA();
    Backend& gpu = *gpu_backend();
    auto g = test_rng();
    struct Case { int heads, kv_heads, head_dim, n_rot, pos; KvType kt; bool gated; AttnMode mode; };
    const AttnMode def{16, 128};
    for (const Case c : {Case{32, 8, 128, 128, 511, KvType::f16, false, def},  // the 4B's shape
                         Case{24, 4, 256, 64, 300, KvType::f16, true, def},    // the 27B's: groups of 6
                         Case{8, 2, 128, 64, 0, KvType::f32, true, def},       // the first token
                         Case{4, 1, 256, 64, 1999, KvType::f32, true, def},
                         Case{2, 2, 128, 128, 2047, KvType::f16, false, def},  // a cluster's reach; groups of 1
                         Case{16, 2, 128, 96, 40, KvType::f16, false, AttnMode{4, 16}},  // 9 heads' prep, 8 warps
                         Case{8, 4, 256, 256, 77, KvType::f32, false, AttnMode{2, 64}},
                         Case{32, 8, 128, 128, 2048, KvType::f16, false, def},  // beyond it: the separate ops
                         Case{12, 4, 96, 96, 10, KvType::f16, false, def}}) {   // head dim 96: the separate ops
        const int D = c.head_dim, kv_dim = c.kv_heads * D, ctx = c.pos + 1;
        SCOPED_TRACE("heads " + std::to_string(c.heads) + "/" + std::to_string(c.kv_heads) + " dim " + std::to_string(D) +
                     " pos " + std::to_string(c.pos) + " " + mode_name(c.mode) + (c.kt == KvType::f16 ? " f16" : " f32"));
        ScopedAttnMode scoped(c.mode);
        ScopedPrepFused fused(true);
        const bool folds = c.pos + 1 <= c.mode.cluster * c.mode.keys && (D == 128 || D == 256);
        const int q_stride = c.gated ? 2 * D : D, q_row = c.heads * q_stride;
        const size_t elem = c.kt == KvType::f16 ? 2 : 4;
        const auto q = randn(g, q_row, 2.f), k = randn(g, kv_dim, 2.f), v = randn(g, kv_dim), qw = randn(g, D), kw = randn(g, D);
        Buf<float> qa(gpu, q), ka(gpu, k), va(gpu, v), q1(gpu, q), k1(gpu, k), v1(gpu, v), qwb(gpu, qw), kwb(gpu, kw);
        Buf<float> oa(gpu, static_cast<size_t>(c.heads) * D), o1(gpu, static_cast<size_t>(c.heads) * D);
        oa.poison();
        o1.poison();
        Buf<int32_t> pa(gpu, std::vector<int32_t>{c.pos});
        std::vector<std::unique_ptr<Buf<uint8_t>>> caches;  // k, v folded; k, v separate
        for (int i = 0; i < 4; ++i) caches.push_back(std::make_unique<Buf<uint8_t>>(gpu, elem * ctx * kv_dim, MemKind::kv));
        Step s;
        s.T = 1;
        s.pos = pa.p();
        s.pos0_hint = c.pos;
        s.max_ctx = ctx;
        if (c.pos > 0) {  // earlier rows, the same in both copies
            const auto ek = randn(g, static_cast<size_t>(c.pos) * kv_dim), ev = randn(g, static_cast<size_t>(c.pos) * kv_dim);
            std::vector<int32_t> ep(c.pos);
            for (int r = 0; r < c.pos; ++r) ep[r] = r;
            Buf<float> kb(gpu, ek), vb(gpu, ev);
            Buf<int32_t> pb(gpu, ep);
            Step e;
            e.T = c.pos;
            e.pos = pb.p();
            for (int i = 0; i < 4; i += 2) gpu.kv_store(kb.p(), vb.p(), caches[i]->p(), caches[i + 1]->p(), c.kt, kv_dim, e);
        }
        const RopeShape rope{c.n_rot, 1e6f};
        const AttnShape a{c.heads, c.kv_heads, D, q_stride, q_row, 1.0f / std::sqrt(static_cast<float>(D))};
        const AttnLane ln{caches[0]->p(), caches[1]->p(), s, 0};
        gpu.attention_lanes({&ln, 1}, qa.p(), ka.p(), va.p(), qwb.p(), kwb.p(), 1e-6f, rope, c.kt, a, oa.p());
        gpu.head_norm_rope(q1.p(), c.heads, D, q_stride, q_row, qwb.p(), 1e-6f, rope, s);
        gpu.head_norm_rope(k1.p(), c.kv_heads, D, D, kv_dim, kwb.p(), 1e-6f, rope, s);
        gpu.kv_store(k1.p(), v1.p(), caches[2]->p(), caches[3]->p(), c.kt, kv_dim, s);
        gpu.attention(q1.p(), caches[2]->p(), caches[3]->p(), c.kt, a, s, o1.p());
        EXPECT_TRUE(caches[0]->get() == caches[2]->get()) << "k cache";
        EXPECT_TRUE(caches[1]->get() == caches[3]->get()) << "v cache";
        const auto one = o1.get(), folded = oa.get();
        EXPECT_EQ(0, std::memcmp(one.data(), folded.data(), one.size() * 4)) << "outputs";
        EXPECT_EQ(folds, qa.get() == q) << "q left as it was (the folded form ran)";
        EXPECT_EQ(folds, ka.get() == k) << "k left as it was";
    }
}

TEST(CudaOps, SigmoidMulAddArgmax) {
    DF_REQUIRE_CUDA();
    Backend& cpu = *cpu_backend();
    Backend& gpu = *gpu_backend();
    auto g = test_rng();
    {  // sigmoid gate in the gated attention layout
        const int T = 3, heads = 5, D = 64, n = heads * D, gstride = 2 * D, grow = heads * gstride + 1;
        const auto x = randn(g, static_cast<size_t>(T) * n), gate = randn(g, static_cast<size_t>(T) * grow, 3.f);
        Buf<float> xc(cpu, x), xg(gpu, x), gc(cpu, gate), gg(gpu, gate);
        cpu.sigmoid_mul(xc.p(), n, gc.p() + D, D, gstride, grow, T);
        gpu.sigmoid_mul(xg.p(), n, gg.p() + D, D, gstride, grow, T);
        const auto ref = xc.get();
        EXPECT_TRUE(all_close(xg.get(), ref, tol_rel(ref, 4 * kEps)));
    }
    {
        const int64_t n = 100003;
        const auto y = randn(g, n), x = randn(g, n);
        Buf<float> yc(cpu, y), yg(gpu, y), xc(cpu, x), xg(gpu, x);
        cpu.add(yc.p(), xc.p(), n);
        gpu.add(yg.p(), xg.p(), n);
        const auto ref = yc.get();
        EXPECT_TRUE(all_close(yg.get(), ref, std::vector<float>(n, 0.f)));
    }
    {  // ties go to the lowest index; all-equal and negative rows too
        const int T = 4, n = 248320;
        auto x = randn(g, static_cast<size_t>(T) * n);
        x[5000] = x[100000] = x[200000] = 50.f;
        for (int i = 0; i < n; ++i) x[n + i] = -1.f;
        x[2 * n + n - 1] = 9.f;
        x[3 * n + 17] = x[3 * n + 16] = 7.f;
        Buf<float> xc(cpu, x), xg(gpu, x);
        Buf<int32_t> oc(cpu, T), og(gpu, T);
        og.poison();
        cpu.argmax(xc.p(), T, n, oc.p());
        gpu.argmax(xg.p(), T, n, og.p());
        EXPECT_EQ(og.get(), oc.get());
        EXPECT_EQ(og.get(), (std::vector<int32_t>{5000, 0, n - 1, 16}));
    }
    {  // the feed (the last row's id and next position into a step's buffers); out host-visible
        const int T = 3, n = 70001;
        const auto x = randn(g, static_cast<size_t>(T) * n);
        const int want = static_cast<int>(std::max_element(x.begin() + 2 * n, x.end()) - (x.begin() + 2 * n));
        for (Backend* be : {&cpu, &gpu}) {
            SCOPED_TRACE(be->name());
            Buf<float> xb(*be, x);
            Buf<int32_t> tok(*be, std::vector<int32_t>{7, 8, 9}), pos(*be, std::vector<int32_t>{40, 41, 42});
            auto* out = static_cast<int32_t*>(be->alloc_host_visible(sizeof(int32_t) * T, MemKind::scratch));
            out[0] = -1;
            const ArgmaxFeed feed{tok.p(), pos.p(), T};
            be->argmax(xb.p() + 2 * n, 1, n, out, &feed);  // the last row only, as a decode step's logits
            be->synchronize();
            EXPECT_EQ(out[0], want);
            EXPECT_EQ(tok.get(), (std::vector<int32_t>{want, 8, 9}));
            EXPECT_EQ(pos.get(), (std::vector<int32_t>{43, 41, 42}));
            be->argmax(xb.p(), T, n, out, &feed);  // every row: the feed still takes the last
            be->synchronize();
            EXPECT_EQ(out[2], want);
            EXPECT_EQ(tok.get(), (std::vector<int32_t>{want, 8, 9}));
            EXPECT_EQ(pos.get(), (std::vector<int32_t>{43, 41, 42}));
            be->release(out);
        }
    }
}

TEST(CudaOps, RowMassEqualsTheCpuBackends) {
    // The row's mass in fixed point (row_mass.h) must be the CPU backend's integer exactly: the
    // same IEEE operations per term, integer sums in any order. Awkward sizes and offsets, +-inf,
    // NaN, -0, a max not in the row, values above it (clamped).
    DF_REQUIRE_CUDA();
    Backend& cpu = *cpu_backend();
    Backend& gpu = *gpu_backend();
    auto g = test_rng();
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    for (int n : {1, 31, 4097, 151936, 248317}) {
        std::vector<float> x(static_cast<size_t>(n) + 2);
        std::normal_distribution<float> nd(0.f, 6.f);
        for (auto& v : x) v = nd(g);
        for (int i = 0; i < n / 50; ++i) {
            const size_t at = static_cast<size_t>(g()) % x.size();
            x[at] = i % 4 == 0 ? -0.0f : i % 4 == 1 ? -inf : i % 4 == 2 ? nan : 1e30f;
        }
        Buf<float> xc(cpu, x), xg(gpu, x);
        for (float lmax : {0.f, 12.5f, 40.f}) {
            const int off = n % 3;
            SCOPED_TRACE("n " + std::to_string(n) + " lmax " + std::to_string(lmax));
            EXPECT_EQ(gpu.row_mass(xg.p() + off, n, lmax), cpu.row_mass(xc.p() + off, n, lmax));
        }
    }
}

TEST(CudaOps, TopLogitsEqualTheCpuBackends) {
    // Rows of awkward sizes and offsets: many ties, -0 beside +0, +-inf, NaN, all equal, all
    // -inf, a top of thousands of equal values; k from 1 to 1024 and up to n; extra entries.
    // ids and values must equal the CPU backend's bit for bit.
    DF_REQUIRE_CUDA();
    Backend& cpu = *cpu_backend();
    Backend& gpu = *gpu_backend();
    auto g = test_rng();
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    constexpr int kMax = Backend::kTopLogitsMax;
    auto* ids = static_cast<int32_t*>(gpu.alloc_host_visible(sizeof(int32_t) * 2 * kMax, MemKind::scratch));
    auto* vals = static_cast<float*>(gpu.alloc_host_visible(sizeof(float) * 2 * kMax, MemKind::scratch));
    auto* extra = static_cast<int32_t*>(gpu.alloc_host_visible(sizeof(int32_t) * kMax, MemKind::scratch));
    std::vector<int32_t> want_ids(2 * kMax);
    std::vector<float> want_vals(2 * kMax);
    for (int shape = 0; shape < 7; ++shape) {
        const int n = shape == 0 ? 1 : shape == 1 ? 1000 : shape == 2 ? 1025 : shape == 3 ? 151936 : 248320 - shape;
        std::vector<float> x(static_cast<size_t>(n) + 3);
        std::uniform_int_distribution<int> level(-2000, 2000);
        for (auto& v : x) v = static_cast<float>(level(g)) / 64.0f;
        if (shape == 4) std::fill(x.begin(), x.end(), 0.25f);
        if (shape == 5) std::fill(x.begin(), x.end(), -inf);
        if (shape == 6)  // thousands tied at the top
            for (size_t i = 0; i < x.size(); i += 37) x[i] = 100.0f;
        for (int i = 0; shape < 4 && i < n / 40; ++i) {
            const size_t at = static_cast<size_t>(g()) % x.size();
            x[at] = i % 5 == 0 ? -0.0f : i % 5 == 1 ? 0.0f : i % 5 == 2 ? -inf : i % 5 == 3 ? nan : inf;
        }
        const int off = shape % 3;  // rows need not be aligned
        Buf<float> xc(cpu, x), xg(gpu, x);
        for (int k : {1, 7, 40, 513, 1000, 1024, n}) {
            if (k > n || k > kMax) continue;
            SCOPED_TRACE("shape " + std::to_string(shape) + " n " + std::to_string(n) + " k " + std::to_string(k));
            const int n_extra = k % 3 == 0 ? 0 : 17;
            for (int i = 0; i < n_extra; ++i) extra[i] = static_cast<int32_t>(g() % static_cast<unsigned>(n));
            std::fill(ids, ids + k + n_extra, -7);
            cpu.top_logits(xc.p() + off, n, k, extra, n_extra, want_ids.data(), want_vals.data());
            gpu.top_logits(xg.p() + off, n, k, extra, n_extra, ids, vals);
            gpu.synchronize();
            ASSERT_EQ(std::vector<int32_t>(ids, ids + k + n_extra), std::vector<int32_t>(want_ids.begin(), want_ids.begin() + k + n_extra));
            ASSERT_EQ(0, std::memcmp(vals, want_vals.data(), sizeof(float) * static_cast<size_t>(k + n_extra)));
        }
    }
    const int32_t bad = 5000;
    extra[0] = bad;
    Buf<float> small(gpu, std::vector<float>(100, 1.0f));
    EXPECT_THROW(gpu.top_logits(small.p(), 100, 1, extra, 1, ids, vals), std::invalid_argument);
    EXPECT_THROW(gpu.top_logits(small.p(), 100, 101, extra, 0, ids, vals), std::invalid_argument);
    gpu.release(ids);
    gpu.release(vals);
    gpu.release(extra);
}

TEST(CudaOps, GatedRmsNormInPlace) {
    DF_REQUIRE_CUDA();
    Backend& cpu = *cpu_backend();
    Backend& gpu = *gpu_backend();
    auto g = test_rng();
    const int T = 3, heads = 6, n = 128;
    const auto x = randn(g, static_cast<size_t>(T) * heads * n, 2.f), z = randn(g, x.size(), 2.f), w = randn(g, n);
    Buf<float> xc(cpu, x), xg(gpu, x), zc(cpu, z), zg(gpu, z), wc(cpu, w), wg(gpu, w);
    cpu.gated_rmsnorm(xc.p(), zc.p(), wc.p(), T, heads, n, 1e-6f, xc.p());
    gpu.gated_rmsnorm(xg.p(), zg.p(), wg.p(), T, heads, n, 1e-6f, xg.p());
    const auto ref = xc.get();
    EXPECT_TRUE(all_close(xg.get(), ref, tol_rel(ref, 8 * kEps, 1e-30f)));
}

// conv + delta rule over consecutive calls (the carried state matters), Hv != Hk. T > 8 takes
// the prepared-input kernels: lanes per value column by head dim (64, 128, 256), a warp per
// column otherwise (96).
void check_gdn_calls(const GdnShape& gs, std::initializer_list<int> Ts, float dt_lo = -7.f, float dt_hi = -2.f) {
    Backend& cpu = *cpu_backend();
    Backend& gpu = *gpu_backend();
    auto g = test_rng();
    const int C = gs.channels(), Hv = gs.v_heads, D = gs.head_dim;
    std::uniform_real_distribution<float> u(-0.5f, 0.5f), a_dist(1.f, 16.f), dt(dt_lo, dt_hi);
    std::vector<float> convw(static_cast<size_t>(C) * gs.conv_kernel), dt_bias(Hv), a_neg(Hv);
    for (auto& v : convw) v = u(g);
    for (auto& v : a_neg) v = -a_dist(g);
    for (auto& v : dt_bias) v = dt(g);
    Buf<float> cwc(cpu, convw), cwg(gpu, convw), dbc(cpu, dt_bias), dbg(gpu, dt_bias), anc(cpu, a_neg), ang(gpu, a_neg);
    Buf<float> csc(cpu, static_cast<size_t>(gs.conv_kernel - 1) * C, MemKind::state), csg(gpu, static_cast<size_t>(gs.conv_kernel - 1) * C, MemKind::state);
    Buf<float> ssc(cpu, static_cast<size_t>(Hv) * D * D, MemKind::state), ssg(gpu, static_cast<size_t>(Hv) * D * D, MemKind::state);
    for (int T : Ts) {
        SCOPED_TRACE("head dim " + std::to_string(D) + ", T " + std::to_string(T));
        const auto qkv = randn(g, static_cast<size_t>(T) * C), alpha = randn(g, static_cast<size_t>(T) * Hv),
                   beta = randn(g, static_cast<size_t>(T) * Hv);
        Buf<float> xc(cpu, qkv), xg(gpu, qkv), alc(cpu, alpha), alg(gpu, alpha), bec(cpu, beta), beg(gpu, beta);
        cpu.gdn_conv(xc.p(), T, gs, cwc.p(), csc.p());
        gpu.gdn_conv(xg.p(), T, gs, cwg.p(), csg.p());
        const auto conv_ref = xc.get();
        // Products rounded one by one in tap order on both sides; silu's expf may differ by an ulp.
        EXPECT_TRUE(all_close(xg.get(), conv_ref, tol_rel(conv_ref, 4 * kEps, 1e-30f))) << "conv";
        const auto st_ref = csc.get();
        EXPECT_TRUE(all_close(csg.get(), st_ref, std::vector<float>(st_ref.size(), 0.f))) << "conv state";
        xg.set(conv_ref);  // the delta rule gets identical inputs

        Buf<float> oc(cpu, static_cast<size_t>(T) * Hv * D), og(gpu, static_cast<size_t>(T) * Hv * D);
        og.poison();
        cpu.gdn_delta(xc.p(), alc.p(), bec.p(), dbc.p(), anc.p(), T, gs, 1e-6f, ssc.p(), oc.p());
        gpu.gdn_delta(xg.p(), alg.p(), beg.p(), dbg.p(), ang.p(), T, gs, 1e-6f, ssg.p(), og.p());
        // |S| stays O(1) (normalised keys, decay <= 1); each output is a 128-term dot with |q| = 1.
        const auto out_ref = oc.get();
        EXPECT_TRUE(all_close(og.get(), out_ref, tol_rel(out_ref, 0.f, 2e-5f))) << "delta out";
        const auto s_ref = ssc.get();
        EXPECT_TRUE(all_close(ssg.get(), s_ref, tol_rel(s_ref, 0.f, 2e-5f))) << "delta state";
        ssg.set(s_ref);
    }
}

TEST(CudaOps, GdnConvAndDeltaRuleCarryState) {
    DF_REQUIRE_CUDA();
    check_gdn_calls(GdnShape{2, 6, 128, 4}, {3, 1, 64, 9, 2, 300, 7});  // shorter than the conv, segment tails
    check_gdn_calls(GdnShape{3, 3, 64, 4}, {9, 1, 130});
    check_gdn_calls(GdnShape{1, 3, 256, 4}, {33, 2, 17});
    check_gdn_calls(GdnShape{2, 4, 96, 4}, {40, 1, 11});
    // Decays down to e^-80 per token (products underflow); T = 1 and 33 leave conv segments empty
    // (compute-sanitizer once caught their windows read past x: scripts/device.sh run sanitize).
    check_gdn_calls(GdnShape{1, 4, 128, 4}, {100, 1, 33}, 2.f, 5.f);
}

}  // namespace
}  // namespace df::test
