// CUDA quantized-weight kernels against the golden dequantization and the CPU backend:
// embed (bit-exact dequantization), matvec (T <= 8), tiled GEMM (T > 8), fused gate/up.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <memory>
#include <utility>

#include "backend/cuda/backend_cuda.h"
#include "quant_test_util.h"

namespace df::test {
namespace {

using quant::Type;

// Relative error per product of the GEMM path: 3 bf16 products keep ~16 bits; one keeps ~8.
float product_error(int T, bool split) { return T <= 8 ? 0.f : (split ? 0x1p-14f : 0x1p-7f); }

float dot_tol(float abs_dot, int cols, int T, bool split) {
    return (4.f * std::sqrt(static_cast<float>(cols)) * kEps + product_error(T, split)) * abs_dot + 1e-30f;
}

// ---- dequantization: embed of the golden rows equals ggml's own dequantization -------------

class CudaDequant : public ::testing::TestWithParam<Type> {};

TEST_P(CudaDequant, EmbedEqualsGgmlBitForBit) {
    DF_REQUIRE_CUDA();
    Backend& gpu = *gpu_backend();
    const Type t = GetParam();
    const GoldenQuant g = load_golden(t);
    const Weight w = gpu.load_weight(t, g.cols, g.rows, g.bin.data(), g.bin.size());
    std::vector<int32_t> ids(g.rows);
    for (int i = 0; i < g.rows; ++i) ids[i] = g.rows - 1 - i;  // reversed: row lookup is by id
    Buf<int32_t> tok(gpu, ids);
    Buf<float> out(gpu, static_cast<size_t>(g.rows) * g.cols);
    out.poison();
    Step s;
    s.T = g.rows;
    s.tokens = tok.p();
    gpu.embed(w, s, out.p());
    const auto got = out.get();
    size_t diff = 0, ulp1 = 0;
    for (int i = 0; i < g.rows; ++i)
        for (int c = 0; c < g.cols; ++c) {
            const float a = got[static_cast<size_t>(i) * g.cols + c];
            const float b = g.f32[static_cast<size_t>(ids[i]) * g.cols + c];
            if (std::memcmp(&a, &b, 4) == 0) continue;
            if (std::fabs(a - b) <= std::fabs(b) * kEps) ++ulp1;  // one rounding of an a*b+c
            else ++diff;
        }
    EXPECT_EQ(diff, 0u) << type_str(t) << ": values that differ from ggml's dequantization";
    EXPECT_LE(ulp1, g.f32.size() / 2) << type_str(t);
    gpu.release(const_cast<void*>(w.data));
}

INSTANTIATE_TEST_SUITE_P(AllTypes, CudaDequant, ::testing::ValuesIn(golden_types()),
                         [](const auto& p) { return type_str(p.param); });

// ---- matmul: matvec (T <= 8) and GEMM (T > 8) against the CPU backend --------------------------

struct MatmulCase {
    Type type;
    int rows, cols;
};

// x_scale[t] multiplies token t's random activations (tokens past its end: 1); edit changes the
// random matrix's bytes first.
void check_matmul(Type t, int rows, int cols, const std::vector<int>& Ts, bool accumulate, bool split = true,
                  bool expect_exact_f16 = false, const std::vector<float>& x_scale = {},
                  const std::function<void(std::vector<uint8_t>&)>& edit = {}) {
    Backend& cpu = *cpu_backend();
    Backend& gpu = *gpu_backend();
    auto g = test_rng();
    auto m = random_matrix(t, rows, cols, g);
    if (edit) edit(m);
    const auto wf = dequant_matrix(t, m, rows, cols);
    const Weight wc = cpu.load_weight(t, cols, rows, m.data(), m.size());
    const Weight wg = gpu.load_weight(t, cols, rows, m.data(), m.size());
    auto* cuda = dynamic_cast<cuda::CudaBackend*>(&gpu);
    ASSERT_NE(cuda, nullptr);
    cuda->set_split_gemm(split);
    for (int T : Ts) {
        SCOPED_TRACE(type_str(t) + " rows " + std::to_string(rows) + " cols " + std::to_string(cols) + " T " +
                     std::to_string(T) + (accumulate ? " accumulate" : "") + (split ? "" : " bf16"));
        auto x = randn(g, static_cast<size_t>(T) * cols);
        for (size_t i = 0; i < x_scale.size() && i < static_cast<size_t>(T); ++i)
            for (int c = 0; c < cols; ++c) x[i * cols + c] *= x_scale[i];
        const auto y0 = randn(g, static_cast<size_t>(T) * rows);
        if (expect_exact_f16) {
            EXPECT_TRUE(cuda->gemm_on_exact_f16(wg, T)) << "not on the exact-f16 GEMM";
        }
        Buf<float> xc(cpu, x), xg(gpu, x), oc(cpu, static_cast<size_t>(T) * rows), og(gpu, static_cast<size_t>(T) * rows);
        if (accumulate) {
            oc.set(y0);
            og.set(y0);
        } else {
            og.poison();
        }
        cpu.matmul(wc, xc.p(), T, oc.p(), accumulate);
        gpu.matmul(wg, xg.p(), T, og.p(), accumulate);
        const auto ref = oc.get(), got = og.get();
        const auto ad = abs_dots(wf, x, rows, cols, T);
        std::vector<float> tol(ad.size());
        for (size_t i = 0; i < ad.size(); ++i)
            tol[i] = dot_tol(ad[i], cols, T, split) + (accumulate ? 2 * kEps * std::fabs(ref[i]) : 0.f);
        EXPECT_TRUE(all_close(got, ref, tol));
    }
    cuda->set_split_gemm(true);
    gpu.release(const_cast<void*>(wg.data));
}

class CudaMatmul : public ::testing::TestWithParam<Type> {};

TEST_P(CudaMatmul, MatchesCpuAcrossTokenCounts) {
    DF_REQUIRE_CUDA();
    check_matmul(GetParam(), 67, 1280, {1, 3, 8, 9, 255, 256, 257}, false);
}

TEST_P(CudaMatmul, AccumulateAddsToOutput) {
    DF_REQUIRE_CUDA();
    check_matmul(GetParam(), 37, 512, {1, 5, 33}, true);
}

std::vector<Type> all_types() {
    std::vector<Type> v;
    for (const auto& t : quant::kTypeTable) v.push_back(t.type);
    return v;
}

INSTANTIATE_TEST_SUITE_P(AllTypes, CudaMatmul, ::testing::ValuesIn(all_types()),
                         [](const auto& p) { return type_str(p.param); });

TEST(CudaMatmulShapes, ShortRowsAndKTails) {
    DF_REQUIRE_CUDA();
    // 96 columns: three 32-blocks, a K step of 64 with a 32-column tail; one row; odd rows.
    for (Type t : {Type::F32, Type::F16, Type::BF16, Type::Q8_0, Type::Q4_0, Type::Q5_1, Type::IQ4_NL})
        check_matmul(t, 5, 96, {1, 2, 7, 9, 70}, false);
    check_matmul(Type::Q8_0, 1, 2560, {1, 4, 17}, false);
    check_matmul(Type::IQ2_XXS, 300, 5120, {1, 8, 64}, false);
    check_matmul(Type::Q4_K, 131, 2560, {1, 3, 200}, true);
}

// Runs f once per form of the exact-f16 GEMM this build and device have: mma.sync (gemm_q.cuh,
// plain order) and, on sm_90a builds and a 9.0 device, wgmma (gemm_wg.cuh, wg_order).
template <class F>
void for_each_qgemm_form(F&& f) {
    auto& cuda = dynamic_cast<cuda::CudaBackend&>(*gpu_backend());
    const bool wg_default = cuda.qgemm_wgmma();
    for (bool wg : {false, true}) {
        cuda.set_qgemm_wgmma(wg);
        if (cuda.qgemm_wgmma() != wg) {
            std::printf("[ note ] exact-f16 GEMM: no wgmma form here (needs an sm_90a build on a 9.0 device)\n");
            continue;
        }
        SCOPED_TRACE(wg ? "wgmma" : "mma.sync");
        f();
    }
    cuda.set_qgemm_wgmma(wg_default);
}

// The exact-f16 GEMM: several row and token blocks, row and token tails, K split into ranges
// (small grids), accumulation.
TEST(CudaMatmulShapes, ExactF16GemmTilesAndSplits) {
    DF_REQUIRE_CUDA();
    for_each_qgemm_form([] {
        for (Type t : {Type::Q8_0, Type::IQ2_XXS, Type::IQ2_XS, Type::IQ2_S, Type::IQ3_XXS, Type::IQ3_S, Type::Q2_K,
                       Type::Q4_K, Type::Q5_K}) {
            check_matmul(t, 300, 2560, {9, 130, 300}, false, true, true);
            check_matmul(t, 131, 1536, {257}, true, true, true);
        }
        check_matmul(Type::Q8_0, 1000, 4096, {512}, true, true, true);
        check_matmul(Type::IQ2_XXS, 77, 4096, {1000}, false, true, true);
    });
}

// Short T on the wgmma GEMM's 16- and 64-token blocks (a DFlash block, a short prompt): both
// narrow tiles, the switch points between them and the wide tiles, token tails, split K and
// accumulation, in both forms (the K-quants and weights with wide block scales fold); the same
// calls on wide blocks (DF_CUDA_QGEMM_NARROW=0) for comparison. Types without the exact-f16
// GEMM run their matvec per 8 tokens up to T = 32.
TEST(CudaMatmulShapes, NarrowTokenTilesMatchCpu) {
    DF_REQUIRE_CUDA();
    auto& cuda = dynamic_cast<cuda::CudaBackend&>(*gpu_backend());
    if (!cuda.qgemm_wgmma()) GTEST_SKIP() << "no wgmma form here (needs an sm_90a build on a 9.0 device)";
    for (bool narrow : {true, false}) {
        SCOPED_TRACE(narrow ? "narrow tiles" : "wide tiles");
        cuda.set_qgemm_narrow(narrow);
        for (bool fold : {false, true}) {
            SCOPED_TRACE(fold ? "folded" : "scales in the weights");
            cuda.set_qgemm_fold(fold);
            for (Type t : {Type::Q8_0, Type::IQ2_XXS, Type::IQ2_XS, Type::IQ2_S, Type::IQ3_XXS, Type::IQ3_S, Type::Q2_K,
                           Type::Q4_K, Type::Q5_K}) {
                if (fold && t != Type::Q8_0 && t != Type::IQ2_XXS) continue;
                check_matmul(t, 300, 2560, {9, 15, 16, 17, 40, 64, 65}, false, true, true);
                check_matmul(t, 131, 1536, {16, 33}, true, true, true);
            }
        }
        cuda.set_qgemm_fold(false);
        check_matmul(Type::Q8_0, 4100, 1024, {16}, false, true, true);  // many row blocks, few splits
    }
    cuda.set_qgemm_narrow(true);
    for (Type t : {Type::Q6_K, Type::IQ4_XS, Type::Q4_0, Type::F16, Type::BF16}) {
        check_matmul(t, 300, 2560, {9, 16, 32, 33}, false);
        check_matmul(t, 131, 1536, {12}, true);
    }
}

// Short GEMMs held back as a group (q, k, v of a short prompt: one launch per side stream) split
// K in their own slices of the scratch: the CPU's results within the bound, and bit for bit what
// each gives alone (the same splits).
TEST(CudaMatmulShapes, GroupedShortGemmsSplitLikeLoneOnes) {
    DF_REQUIRE_CUDA();
    Backend& cpu = *cpu_backend();
    auto& gpu = dynamic_cast<cuda::CudaBackend&>(*gpu_backend());
    auto g = test_rng();
    const int cols = 2560;
    const std::vector<int> rows = {4096, 1024, 1024};
    for (Type t : {Type::Q8_0, Type::IQ2_XXS}) {
        SCOPED_TRACE(type_str(t));
        std::vector<std::vector<uint8_t>> m;
        std::vector<Weight> w, wc;
        for (int r : rows) {
            m.push_back(random_matrix(t, r, cols, g));
            w.push_back(gpu.load_weight(t, cols, r, m.back().data(), m.back().size()));
            wc.push_back(cpu.load_weight(t, cols, r, m.back().data(), m.back().size()));
        }
        for (int T : {16, 40}) {
            SCOPED_TRACE("T " + std::to_string(T));
            const auto xv = randn(g, static_cast<size_t>(T) * cols);
            Buf<float> x(gpu, xv), xc(cpu, xv);
            std::vector<std::unique_ptr<Buf<float>>> o;
            for (int r : rows) o.push_back(std::make_unique<Buf<float>>(gpu, static_cast<size_t>(T) * r));
            for (auto& b : o) b->poison();
            for (size_t i = 0; i < rows.size(); ++i) gpu.matmul(w[i], x.p(), T, o[i]->p(), false);  // held back together
            std::vector<std::vector<float>> grouped;
            for (auto& b : o) grouped.push_back(b->get());
            for (size_t i = 0; i < rows.size(); ++i) {
                Buf<float> oc(cpu, static_cast<size_t>(T) * rows[i]);
                cpu.matmul(wc[i], xc.p(), T, oc.p(), false);
                const auto ad = abs_dots(dequant_matrix(t, m[i], rows[i], cols), xv, rows[i], cols, T);
                std::vector<float> tol(ad.size());
                for (size_t k = 0; k < ad.size(); ++k) tol[k] = dot_tol(ad[k], cols, T, true);
                EXPECT_TRUE(all_close(grouped[i], oc.get(), tol)) << "matrix " << i;
            }
            for (size_t i = 0; i < rows.size(); ++i) {
                o[i]->poison();
                gpu.matmul(w[i], x.p(), T, o[i]->p(), false);
                const auto lone = o[i]->get();  // flushed alone
                EXPECT_EQ(0, std::memcmp(lone.data(), grouped[i].data(), lone.size() * sizeof(float))) << "matrix " << i;
            }
        }
        for (const Weight& x : w) gpu.release(const_cast<void*>(x.data));
    }
}

// Its per-token power-of-two scaling: tokens of zeros, of tiny and of huge activations, next to
// ordinary ones (each token's error is relative to its own magnitude).
TEST(CudaMatmulShapes, ExactF16GemmActivationRanges) {
    DF_REQUIRE_CUDA();
    const std::vector<float> scale = {0.f, 1e-30f, 1e25f, 1.f, 3e-6f, 1e-38f, 65504.f, 1e4f, 0.5f, 1e-20f};
    for_each_qgemm_form([&] {
        for (Type t : {Type::Q8_0, Type::IQ2_XXS, Type::Q4_K}) check_matmul(t, 70, 512, {10, 40}, false, true, true, scale);
    });
}

// The wgmma GEMM's thread block clusters share each activation slab (one TMA copy per block,
// multicast to the cluster): every cluster size gives the same bits, with row tiles that the
// larger sizes do not divide (3 tiles: clusters of 1), token tails and split K. The form with
// the scales in the weights runs alone; the folded form of the same types takes the clusters.
TEST(CudaMatmulShapes, WgmmaClustersGiveTheSameBits) {
    DF_REQUIRE_CUDA();
    auto& cuda = dynamic_cast<cuda::CudaBackend&>(*gpu_backend());
    if (!cuda.qgemm_wgmma()) GTEST_SKIP() << "no wgmma form here (needs an sm_90a build on a 9.0 device)";
    const int cluster_default = cuda::qgemm_cluster();
    auto g = test_rng();
    for (bool fold : {false, true}) {
        cuda.set_qgemm_fold(fold);
        for (Type t : {Type::Q8_0, Type::IQ2_XXS, Type::Q4_K}) {
            for (int rows : {512, 192}) {
                const int cols = 1024;
                const auto m = random_matrix(t, rows, cols, g);
                const Weight w = cuda.load_weight(t, cols, rows, m.data(), m.size());
                for (int T : {130, 300}) {
                    SCOPED_TRACE(type_str(t) + " rows " + std::to_string(rows) + " T " + std::to_string(T) + (fold ? " folded" : ""));
                    EXPECT_TRUE(cuda.gemm_on_exact_f16(w, T)) << "not on the exact-f16 GEMM";
                    const auto x = randn(g, static_cast<size_t>(T) * cols);
                    Buf<float> xg(cuda, x), out(cuda, static_cast<size_t>(T) * rows);
                    std::vector<float> first;
                    for (int c : {1, 2, 4, 8}) {
                        cuda::set_qgemm_cluster(c);
                        out.poison();
                        cuda.matmul(w, xg.p(), T, out.p(), false);
                        const auto got = out.get();
                        if (first.empty())
                            first = got;
                        else
                            EXPECT_EQ(0, std::memcmp(first.data(), got.data(), got.size() * sizeof(float))) << "cluster " << c;
                    }
                }
                cuda.release(const_cast<void*>(w.data));
            }
        }
    }
    cuda.set_qgemm_fold(false);
    cuda::set_qgemm_cluster(cluster_default);
}

// The wgmma GEMM carries Q8_0's and the IQ types' scales in f16 weights d q as hi + lo, which a
// large block scale could overflow (Q8_0 |d| >= 512, IQ |d| >= 32): such a weight folds its
// scales instead. Both forms against the CPU, at the largest scale carried and past it.
TEST(CudaMatmulShapes, WideBlockScalesFold) {
    DF_REQUIRE_CUDA();
    struct Case {
        Type t;
        size_t block_bytes;
        std::vector<uint16_t> d;  // f16 bits
    };
    const Case cases[] = {{Type::Q8_0, 34, {0x5FFFu, 0x6000u, 0xE400u}},     // 511.75, 512, -1024
                          {Type::IQ2_XXS, 66, {0x4FFFu, 0x5000u, 0xD400u}}};  // 31.98, 32, -64
    for_each_qgemm_form([&] {
        for (const Case& c : cases)
            for (const uint16_t d : c.d) {
                SCOPED_TRACE(type_str(c.t) + ": a block scale of f16 bits " + std::to_string(d));
                check_matmul(c.t, 192, 1024, {9, 130}, false, true, true, {}, [&](std::vector<uint8_t>& m) {
                    const size_t row = m.size() / 192;
                    for (size_t r : {size_t{3}, size_t{100}}) std::memcpy(m.data() + r * row + 1 * c.block_bytes, &d, 2);
                });
            }
    });
}

TEST(CudaMatmulShapes, FastBf16GemmBound) {
    DF_REQUIRE_CUDA();
    // One bf16 product per tile: the bound is ~2^-7 of sum |w x|; checked, and the measured
    // spread is what DESIGN.md quotes for the fast prefill path.
    for (Type t : {Type::Q8_0, Type::IQ2_XXS, Type::Q4_K}) check_matmul(t, 129, 1024, {9, 100}, false, false);
}

// ---- fused gate/up ---------------------------------------------------------------------------

void check_gate_up(Type tg, Type tu, int rows, int cols, const std::vector<int>& Ts) {
    Backend& cpu = *cpu_backend();
    Backend& gpu = *gpu_backend();
    auto g = test_rng();
    const auto mg = random_matrix(tg, rows, cols, g), mu = random_matrix(tu, rows, cols, g);
    const auto wgf = dequant_matrix(tg, mg, rows, cols), wuf = dequant_matrix(tu, mu, rows, cols);
    const Weight cg = cpu.load_weight(tg, cols, rows, mg.data(), mg.size());
    const Weight cu = cpu.load_weight(tu, cols, rows, mu.data(), mu.size());
    const Weight gg = gpu.load_weight(tg, cols, rows, mg.data(), mg.size());
    const Weight gu = gpu.load_weight(tu, cols, rows, mu.data(), mu.size());
    for (int T : Ts) {
        SCOPED_TRACE(type_str(tg) + "/" + type_str(tu) + " T " + std::to_string(T));
        const auto x = randn(g, static_cast<size_t>(T) * cols);
        const size_t n = static_cast<size_t>(T) * rows;
        Buf<float> xc(cpu, x), xg(gpu, x), oc(cpu, n), og(gpu, n), sc(cpu, n), sg(gpu, n), gc(cpu, n), uc(cpu, n);
        og.poison();
        cpu.ffn_gate_up(cg, cu, xc.p(), T, oc.p(), sc.p());
        gpu.ffn_gate_up(gg, gu, xg.p(), T, og.p(), sg.p());
        cpu.matmul(cg, xc.p(), T, gc.p(), false);
        cpu.matmul(cu, xc.p(), T, uc.p(), false);
        const auto ref = oc.get(), got = og.get(), gate = gc.get(), up = uc.get();
        const auto adg = abs_dots(wgf, x, rows, cols, T), adu = abs_dots(wuf, x, rows, cols, T);
        std::vector<float> tol(n);
        for (size_t i = 0; i < n; ++i) {
            // d(silu(g) u) = silu'(g) u dg + silu(g) du, |silu'| <= 1.1
            const float s = gate[i] / (1.f + std::exp(-gate[i]));
            tol[i] = 1.1f * std::fabs(up[i]) * dot_tol(adg[i], cols, T, true) + std::fabs(s) * dot_tol(adu[i], cols, T, true) +
                     4 * kEps * std::fabs(ref[i]) + 1e-30f;
        }
        EXPECT_TRUE(all_close(got, ref, tol));
        if (T > 8 && rows % 32 == 0) {
            // A prefill SwiGLU converts its output for the down projection's GEMM, which then skips
            // its own conversion: the same matmul after another op (a fresh conversion) must give
            // the same bits.
            const int out_rows = 48;
            const auto md = random_matrix(Type::Q8_0, out_rows, rows, g);
            const Weight wd = gpu.load_weight(Type::Q8_0, rows, out_rows, md.data(), md.size());
            Buf<float> d1(gpu, static_cast<size_t>(T) * out_rows), d2(gpu, static_cast<size_t>(T) * out_rows);
            gpu.ffn_gate_up(gg, gu, xg.p(), T, og.p(), sg.p());
            gpu.matmul(wd, og.p(), T, d1.p(), false);
            gpu.zero(sg.p(), sizeof(float));  // any other op forgets the conversion
            gpu.matmul(wd, og.p(), T, d2.p(), false);
            const auto a = d1.get(), b = d2.get();
            EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << "down projection after the SwiGLU";
            gpu.release(const_cast<void*>(wd.data));
        }
    }
    for (const Weight* w : {&gg, &gu}) gpu.release(const_cast<void*>(w->data));
}

TEST(CudaFfnGateUp, FusedAndUnfusedMatchCpu) {
    DF_REQUIRE_CUDA();
    check_gate_up(Type::Q8_0, Type::Q8_0, 97, 1024, {1, 3, 8, 9, 257});
    check_gate_up(Type::Q8_0, Type::Q8_0, 96, 512, {9, 130});  // SwiGLU converted for the next GEMM
    check_gate_up(Type::IQ2_XXS, Type::IQ2_XXS, 160, 2048, {1, 2, 8, 33});
    check_gate_up(Type::Q4_K, Type::Q6_K, 64, 512, {1, 5, 20});  // mixed types: not fused
    check_gate_up(Type::TQ1_0, Type::TQ1_0, 40, 512, {1, 4});    // held as F32
}

// ---- embed -----------------------------------------------------------------------------------

TEST(CudaEmbed, MatchesCpuForRandomTokens) {
    DF_REQUIRE_CUDA();
    Backend& cpu = *cpu_backend();
    Backend& gpu = *gpu_backend();
    auto g = test_rng();
    for (Type t : {Type::Q8_0, Type::Q2_K, Type::Q4_K, Type::IQ2_XXS, Type::BF16, Type::F32, Type::MXFP4}) {
        SCOPED_TRACE(type_str(t));
        const int rows = 301, cols = 768;
        const auto m = random_matrix(t, rows, cols, g);
        const Weight wc = cpu.load_weight(t, cols, rows, m.data(), m.size());
        const Weight wg = gpu.load_weight(t, cols, rows, m.data(), m.size());
        for (int T : {1, 3, 257}) {
            std::vector<int32_t> ids(T);
            std::uniform_int_distribution<int> pick(0, rows - 1);
            for (auto& i : ids) i = pick(g);
            ids[0] = rows - 1;
            Buf<int32_t> tc(cpu, ids), tg(gpu, ids);
            Buf<float> oc(cpu, static_cast<size_t>(T) * cols), og(gpu, static_cast<size_t>(T) * cols);
            og.poison();
            Step sc, sg;
            sc.T = sg.T = T;
            sc.tokens = tc.p();
            sg.tokens = tg.p();
            cpu.embed(wc, sc, oc.p());
            gpu.embed(wg, sg, og.p());
            const auto ref = oc.get();
            EXPECT_TRUE(all_close(og.get(), ref, std::vector<float>(ref.size(), 0.f)));
        }
        gpu.release(const_cast<void*>(wg.data));
    }
}

}  // namespace
}  // namespace df::test

namespace df::test {
namespace {

// A token's row of a T <= 8 product is bit-identical to the one-token product (speculative
// verify must reproduce plain decoding exactly).
TEST(CudaBatchInvariance, MatvecAndGateUpRowsEqualOneTokenResults) {
    DF_REQUIRE_CUDA();
    Backend& gpu = *gpu_backend();
    auto g = test_rng();
    for (Type t : {Type::Q8_0, Type::IQ2_XXS, Type::Q4_K, Type::Q6_K, Type::IQ3_S, Type::F32}) {
        SCOPED_TRACE(type_str(t));
        const int rows = 203, cols = 2048;
        const auto m = random_matrix(t, rows, cols, g), m2 = random_matrix(t, rows, cols, g);
        const Weight w = gpu.load_weight(t, cols, rows, m.data(), m.size());
        const Weight w2 = gpu.load_weight(t, cols, rows, m2.data(), m2.size());
        for (int T : {2, 3, 5, 8}) {
            const auto x = randn(g, static_cast<size_t>(T) * cols);
            Buf<float> xb(gpu, x), ob(gpu, static_cast<size_t>(T) * rows), fb(gpu, static_cast<size_t>(T) * rows),
                sb(gpu, static_cast<size_t>(T) * rows);
            gpu.matmul(w, xb.p(), T, ob.p(), false);
            gpu.ffn_gate_up(w, w2, xb.p(), T, fb.p(), sb.p());
            const auto all = ob.get(), all_f = fb.get();
            for (int tt = 0; tt < T; ++tt) {
                Buf<float> x1(gpu, std::vector<float>(x.begin() + static_cast<size_t>(tt) * cols, x.begin() + static_cast<size_t>(tt + 1) * cols));
                Buf<float> o1(gpu, rows), f1(gpu, rows), s1(gpu, rows);
                gpu.matmul(w, x1.p(), 1, o1.p(), false);
                gpu.ffn_gate_up(w, w2, x1.p(), 1, f1.p(), s1.p());
                const auto one = o1.get(), one_f = f1.get();
                EXPECT_EQ(0, std::memcmp(one.data(), all.data() + static_cast<size_t>(tt) * rows, rows * 4)) << "matmul T " << T << " row " << tt;
                EXPECT_EQ(0, std::memcmp(one_f.data(), all_f.data() + static_cast<size_t>(tt) * rows, rows * 4)) << "gate_up T " << T << " row " << tt;
            }
        }
        gpu.release(const_cast<void*>(w.data));
        gpu.release(const_cast<void*>(w2.data));
    }
}

// Matmuls of types[i] (rows[i] x cols) over one input, issued back to back so the CUDA backend
// holds them back and launches them as a group: every output matches the CPU, and a token's row
// of a T-token call equals its one-token result bit for bit (speculative verify must reproduce
// plain decoding). `check` sees the loaded CUDA weights first.
void check_held_back_group(const std::vector<Type>& types, const std::vector<int>& rows, int cols,
                           const std::vector<int>& Ts, std::mt19937_64& g,
                           const std::function<void(const std::vector<Weight>&)>& check = {}) {
    Backend& cpu = *cpu_backend();
    Backend& gpu = *gpu_backend();
    std::vector<std::vector<uint8_t>> m;  // the CPU backend's weights point into these
    std::vector<Weight> wc, wg;
    std::vector<std::vector<float>> wf;
    for (size_t i = 0; i < rows.size(); ++i) {
        m.push_back(random_matrix(types[i], rows[i], cols, g));
        wc.push_back(cpu.load_weight(types[i], cols, rows[i], m.back().data(), m.back().size()));
        wg.push_back(gpu.load_weight(types[i], cols, rows[i], m.back().data(), m.back().size()));
        wf.push_back(dequant_matrix(types[i], m.back(), rows[i], cols));
    }
    if (check) check(wg);
    if (::testing::Test::HasFatalFailure()) {  // the check's ASSERTs end the test
        for (const Weight& w : wg) gpu.release(const_cast<void*>(w.data));
        return;
    }
    auto run = [&](Backend& be, const std::vector<Weight>& w, const std::vector<float>& x, int T) {
        Buf<float> xb(be, x);
        std::vector<std::unique_ptr<Buf<float>>> o;
        for (int r : rows) o.push_back(std::make_unique<Buf<float>>(be, static_cast<size_t>(T) * r));
        for (auto& b : o) b->poison();
        for (size_t i = 0; i < rows.size(); ++i) be.matmul(w[i], xb.p(), T, o[i]->p(), false);
        std::vector<std::vector<float>> out;
        for (auto& b : o) out.push_back(b->get());
        return out;
    };
    for (int T : Ts) {
        SCOPED_TRACE("T " + std::to_string(T));
        const auto x = randn(g, static_cast<size_t>(T) * cols);
        const auto ref = run(cpu, wc, x, T), got = run(gpu, wg, x, T);
        for (size_t i = 0; i < rows.size(); ++i) {
            const auto ad = abs_dots(wf[i], x, rows[i], cols, T);
            std::vector<float> tol(ad.size());
            for (size_t k = 0; k < ad.size(); ++k) tol[k] = dot_tol(ad[k], cols, T, true);
            EXPECT_TRUE(all_close(got[i], ref[i], tol)) << "matrix " << i;
        }
        for (int tt = 0; tt < T && T > 1; ++tt) {
            const std::vector<float> x1(x.begin() + static_cast<size_t>(tt) * cols, x.begin() + static_cast<size_t>(tt + 1) * cols);
            const auto one = run(gpu, wg, x1, 1);
            for (size_t i = 0; i < rows.size(); ++i)
                EXPECT_EQ(0, std::memcmp(one[i].data(), got[i].data() + static_cast<size_t>(tt) * rows[i], rows[i] * 4))
                    << "matrix " << i << " token " << tt;
        }
    }
    for (const Weight& w : wg) gpu.release(const_cast<void*>(w.data));
}

// Matmuls held back together (same activations) whose f32 matvecs share a layout run as one
// launch over their stacked rows (MatvecArgs::segs), and a member of another shape (203 rows: not
// a multiple of 4) in the same group keeps its own launch; check_held_back_group's guarantees.
TEST(CudaMatvecSegments, HeldBackGroupMatchesCpuAndOneTokenResults) {
    DF_REQUIRE_CUDA();
    auto g = test_rng();
    for (Type t : {Type::Q8_0, Type::Q6_K, Type::IQ4_NL, Type::F32}) {
        SCOPED_TRACE(type_str(t));
        check_held_back_group({t, t, t, t}, {256, 64, 68, 203}, 2560, {1, 3, 8}, g);
    }
}

// Two lone imma matmuls of a built type pair held back together run as one two-part launch
// (imma_two.cuh), with check_held_back_group's guarantees with and without it; the group's
// stacked f32 matvecs (then on a side stream, as unit 0 of the group) are unaffected.
class CudaImmaTwo : public ::testing::TestWithParam<std::pair<Type, Type>> {};

TEST_P(CudaImmaTwo, HeldBackPairMatchesCpuAndOneTokenResults) {
    DF_REQUIRE_CUDA();
    const auto [ta, tb] = GetParam();
    ASSERT_NE(cuda::imma_two(tb, ta), nullptr) << "a pair of the 27B preset is built";
    EXPECT_EQ(cuda::imma_two(Type::Q4_K, Type::Q5_K), nullptr);
    auto& cuda = dynamic_cast<cuda::CudaBackend&>(*gpu_backend());
    auto g = test_rng();
    const std::vector<Type> types = {Type::Q8_0, ta, tb, Type::Q8_0};  // the pair as built in reverse order
    auto on_tensor_cores = [&](const std::vector<Weight>& w) {
        ASSERT_TRUE(cuda.matvec_on_tensor_cores(w[1], 1) && cuda.matvec_on_tensor_cores(w[2], 1));
    };
    for (bool two : {true, false}) {
        SCOPED_TRACE(two ? "one launch" : "two launches");
        cuda.set_imma_two(two);
        check_held_back_group(types, {48, 203, 96, 52}, 1280, {1, 3, 8}, g, on_tensor_cores);
        if (::testing::Test::HasFatalFailure()) break;
    }
    cuda.set_imma_two(true);
}

INSTANTIATE_TEST_SUITE_P(BuiltPairs, CudaImmaTwo,
                         ::testing::Values(std::make_pair(Type::IQ2_XXS, Type::IQ2_XS), std::make_pair(Type::Q5_K, Type::IQ3_XXS)),
                         [](const auto& p) { return type_str(p.param.first) + "_" + type_str(p.param.second); });

// The ring types' matvec cases: for Q8_0, Q4_0 and IQ4_NL and each column count, random
// matrices of 203, 4096 and 64 rows (rows not a multiple of 4, units not a multiple of the lanes,
// odd-length head arrays) loaded on the GPU for `body`, released after.
void for_each_ring_case(Backend& gpu, std::mt19937_64& g, std::initializer_list<int> col_counts,
                        const std::function<void(int cols, const std::vector<Weight>& w)>& body) {
    for (Type t : {Type::Q8_0, Type::Q4_0, Type::IQ4_NL}) {
        for (int cols : col_counts) {
            SCOPED_TRACE(type_str(t) + " cols " + std::to_string(cols));
            std::vector<Weight> w;
            for (int r : {203, 4096, 64}) {
                const auto m = random_matrix(t, r, cols, g);
                w.push_back(gpu.load_weight(t, cols, r, m.data(), m.size()));
            }
            body(cols, w);
            for (const Weight& wi : w) gpu.release(const_cast<void*>(wi.data));
        }
    }
}

// The outputs of one T-token call of each kind: w[0] accumulating onto 0.5 + the element's row,
// w[1] and w[2] held back together (one stacked launch), fused gate/up of (w[0], w[0]).
std::vector<std::vector<float>> ring_outputs(Backend& gpu, const std::vector<Weight>& w, const float* x, int T) {
    std::vector<std::unique_ptr<Buf<float>>> o;
    for (const Weight& wi : w) {
        const size_t r = static_cast<size_t>(wi.rows);
        std::vector<float> init(static_cast<size_t>(T) * r);
        for (size_t i = 0; i < init.size(); ++i) init[i] = 0.5f + static_cast<float>(i % r);
        o.push_back(std::make_unique<Buf<float>>(gpu, init));
    }
    const size_t gate_rows = static_cast<size_t>(T) * static_cast<size_t>(w[0].rows);
    Buf<float> fb(gpu, gate_rows), sb(gpu, gate_rows);
    fb.poison();
    gpu.matmul(w[0], x, T, o[0]->p(), true);
    for (size_t i = 1; i < w.size(); ++i) gpu.matmul(w[i], x, T, o[i]->p(), false);
    gpu.ffn_gate_up(w[0], w[0], x, T, fb.p(), sb.p());
    std::vector<std::vector<float>> out;
    for (auto& b : o) out.push_back(b->get());
    out.push_back(fb.get());
    return out;
}

// The one-token Q8_0 / Q4_0 / IQ4_NL matvec through per-warp cp.async rings (DF_CUDA_MATVEC_RING)
// reads the same units in the same order: every depth gives the register kernel's bits, for
// accumulating, held-back (stacked) and fused gate/up products.
TEST(CudaMatvecRing, EveryDepthGivesTheRegisterKernelsBits) {
    DF_REQUIRE_CUDA();
    Backend& gpu = *gpu_backend();
    auto g = test_rng();
    const int ring0 = cuda::matvec_ring();
    for_each_ring_case(gpu, g, {2560, 4096, 9728, 160}, [&](int cols, const std::vector<Weight>& w) {
        const auto x = randn(g, cols);
        Buf<float> xb(gpu, x);
        cuda::set_matvec_ring(0);
        const auto ref = ring_outputs(gpu, w, xb.p(), 1);
        for (int depth : {2, 3, 4}) {
            cuda::set_matvec_ring(depth);
            const auto got = ring_outputs(gpu, w, xb.p(), 1);
            for (size_t i = 0; i < ref.size(); ++i)
                EXPECT_EQ(0, std::memcmp(got[i].data(), ref[i].data(), ref[i].size() * 4)) << "output " << i << " depth " << depth;
        }
    });
    cuda::set_matvec_ring(ring0);
}

// The T = 2..8 matvecs of the ring types, through the rings with activations staged in shared
// memory (from T = 3, where they fit: not 9728 columns at T > 4) or read from global memory, or
// through the staged-activation kernel (DF_CUDA_MATVEC_RING_MULTI 2, 1, 0): every token's outputs
// are its one-token call's bits (speculative verify relies on it), for accumulating, held-back
// (stacked) and fused gate/up products, every warps-per-row count.
TEST(CudaMatvecRing, VerifySizedCallsGiveOneTokenBits) {
    DF_REQUIRE_CUDA();
    Backend& gpu = *gpu_backend();
    auto g = test_rng();
    const int multi0 = cuda::matvec_ring_multi();
    for_each_ring_case(gpu, g, {2560, 9728, 160}, [&](int cols, const std::vector<Weight>& w) {
        for (int T : {2, 3, 5, 8}) {
            const auto x = randn(g, static_cast<size_t>(T) * cols);
            Buf<float> xb(gpu, x);
            for (int multi : {2, 1, 0}) {
                cuda::set_matvec_ring_multi(multi);
                const auto all = ring_outputs(gpu, w, xb.p(), T);
                for (int tt = 0; tt < T; ++tt) {
                    Buf<float> x1(gpu, std::vector<float>(x.begin() + static_cast<size_t>(tt) * cols,
                                                          x.begin() + static_cast<size_t>(tt + 1) * cols));
                    const auto one = ring_outputs(gpu, w, x1.p(), 1);
                    for (size_t i = 0; i < one.size(); ++i) {
                        const size_t n = one[i].size();
                        EXPECT_EQ(0, std::memcmp(one[i].data(), all[i].data() + tt * n, n * 4))
                            << "output " << i << " T " << T << " token " << tt << " mode " << multi;
                    }
                }
            }
        }
    });
    cuda::set_matvec_ring_multi(multi0);
}

// A decode RMSNorm folded into the f32 matvecs that read its output (MatvecArgs::norm_x) gives
// the unfolded results bit for bit: the same products and the same sum of squares
// (norm_sum.cuh); the first of them writes the norm's output too. A T = 3 call (norm not folded)
// gives each row the same bits as the folded one-token call.
TEST(CudaFoldNorm, FoldedMatvecsEqualNormThenMatvecBitForBit) {
    DF_REQUIRE_CUDA();
    Backend& gpu = *gpu_backend();
    auto& cuda = dynamic_cast<cuda::CudaBackend&>(gpu);
    auto g = test_rng();
    for (Type t : {Type::Q8_0, Type::Q6_K, Type::IQ4_NL}) {
        for (int cols : {2560, 8448}) {  // 10 units (a group each), 33 units (two per group)
            SCOPED_TRACE(type_str(t) + " cols " + std::to_string(cols));
            const int rows = 203;
            const auto m1 = random_matrix(t, rows, cols, g), m2 = random_matrix(t, rows, cols, g),
                       m3 = random_matrix(t, rows + 64, cols, g);
            const Weight w1 = gpu.load_weight(t, cols, rows, m1.data(), m1.size());
            const Weight w2 = gpu.load_weight(t, cols, rows, m2.data(), m2.size());
            const Weight w3 = gpu.load_weight(t, cols, rows + 64, m3.data(), m3.size());
            ASSERT_FALSE(cuda.matvec_on_tensor_cores(w1, 1)) << "the fold is for the f32 matvec";
            const int T = 3;
            const auto h = randn(g, static_cast<size_t>(T) * cols, 3.f), nw = randn(g, cols);
            Buf<float> hb(gpu, h), nb(gpu, nw);
            struct Out {
                std::vector<float> x, o1, o2, o3, f;
            };
            const bool was = cuda.fold_norm();
            auto run = [&](bool fold, int tokens) {
                cuda.set_fold_norm(fold);
                Buf<float> xb(gpu, static_cast<size_t>(tokens) * cols), o1(gpu, static_cast<size_t>(tokens) * rows),
                    o2(gpu, static_cast<size_t>(tokens) * rows), o3(gpu, static_cast<size_t>(tokens) * (rows + 64)),
                    fb(gpu, static_cast<size_t>(tokens) * rows), sb(gpu, static_cast<size_t>(tokens) * rows);
                for (auto* b : {&xb, &o1, &o2, &o3, &fb}) b->poison();
                gpu.rmsnorm(hb.p(), cols, nb.p(), tokens, cols, 1e-6f, xb.p(), cols);
                gpu.matmul(w1, xb.p(), tokens, o1.p(), false);  // three that share the input: one group
                gpu.matmul(w2, xb.p(), tokens, o2.p(), false);
                gpu.matmul(w3, xb.p(), tokens, o3.p(), false);
                gpu.rmsnorm(hb.p(), cols, nb.p(), tokens, cols, 1e-6f, xb.p(), cols);
                gpu.ffn_gate_up(w1, w2, xb.p(), tokens, fb.p(), sb.p());
                Out r{xb.get(), o1.get(), o2.get(), o3.get(), fb.get()};
                cuda.set_fold_norm(was);
                return r;
            };
            const Out plain = run(false, 1), folded = run(true, 1), three = run(true, T);
            auto same = [](const std::vector<float>& a, const std::vector<float>& b, size_t n) {
                return std::memcmp(a.data(), b.data(), n * 4) == 0;
            };
            EXPECT_TRUE(same(folded.x, plain.x, cols)) << "the norm's output";
            EXPECT_TRUE(same(folded.o1, plain.o1, rows));
            EXPECT_TRUE(same(folded.o2, plain.o2, rows));
            EXPECT_TRUE(same(folded.o3, plain.o3, rows + 64));
            EXPECT_TRUE(same(folded.f, plain.f, rows)) << "fused gate/up";
            EXPECT_TRUE(same(three.o1, folded.o1, rows)) << "row 0 of a 3-token call";
            EXPECT_TRUE(same(three.o3, folded.o3, rows + 64)) << "row 0 of a 3-token call";
            for (const Weight* w : {&w1, &w2, &w3}) gpu.release(const_cast<void*>(w->data));
        }
    }
}

}  // namespace
}  // namespace df::test
