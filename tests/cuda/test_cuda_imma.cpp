// The integer tensor-core matvec's pieces (imma.cuh): the activation conversion against its
// definition (reconstruction error and limb ranges), its fusion into RMSNorm (bit-identical to
// converting the stored outputs), and which weights take the path. Its products are checked
// against the CPU backend by the matmul tests of test_cuda_quant.cpp.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include <cuda_runtime.h>

#include "backend/cuda/backend_cuda.h"
#include "backend/cuda/kernels.h"
#include "quant_test_util.h"

namespace df::test {
namespace {

constexpr int kUnit = 256;

struct Converted {
    std::vector<int8_t> xq;
    std::vector<float> xe;
};

Converted download_converted(const Buf<uint8_t>& xq, const Buf<float>& xe) {
    Converted c;
    const auto q = xq.get();
    c.xq.assign(q.begin(), q.end());
    c.xe = xe.get();
    return c;
}

// Limb `limb` of element c of token t, as the layout of imma.cuh puts it.
int8_t limb_of(const Converted& c, int cols, int t, int col, int limb) {
    const int slabs = cols / 32, s = col / 32, q = (col % 32) / 8, j = col % 8;
    const size_t lane = static_cast<size_t>(4 * (t & 1) + limb) * 4 + q;
    return c.xq[((static_cast<size_t>(t / 2) * slabs + s) * 32 + lane) * 8 + j];
}

TEST(CudaActQuant, ReconstructsWithinTwoToTheMinus30OfTheUnitMaximum) {
    DF_REQUIRE_CUDA();
    Backend& gpu = *gpu_backend();
    auto g = test_rng();
    const int T = 3, cols = 1280, units = cols / kUnit;
    std::vector<float> x = randn(g, static_cast<size_t>(T) * cols);
    // Units with very different scales, an all-zero unit, a denormal-range unit, a NaN.
    for (int i = 0; i < kUnit; ++i) {
        x[kUnit + i] *= 1e30f;                       // token 0, unit 1: huge
        x[2 * kUnit + i] = 0.f;                      // token 0, unit 2: zeros
        x[cols + 3 * kUnit + i] *= 1e-33f;           // token 1, unit 3: tiny
        x[2 * cols + i] *= (i % 7 == 0) ? 1e6f : 1.f;  // token 2, unit 0: outliers
    }
    x[2 * cols + 4 * kUnit + 17] = std::nanf("");    // token 2, unit 4: poisoned
    Buf<float> xb(gpu, x);
    Buf<uint8_t> xq(gpu, cuda::act_quant_xq_bytes(cols));
    Buf<float> xe(gpu, 8 * static_cast<size_t>(units));
    cuda::launch_act_quant(xb.p(), T, cols, reinterpret_cast<uint2*>(xq.p()), xe.p(), dynamic_cast<cuda::CudaBackend&>(gpu).stream());
    const Converted c = download_converted(xq, xe);
    for (int t = 0; t < T; ++t)
        for (int u = 0; u < units; ++u) {
            const float e = c.xe[static_cast<size_t>(t) * units + u];
            if (t == 2 && u == 4) {
                EXPECT_TRUE(std::isnan(e)) << "a NaN input must poison its unit";
                continue;
            }
            double mx = 0;
            for (int i = 0; i < kUnit; ++i) mx = std::max(mx, std::fabs(static_cast<double>(x[static_cast<size_t>(t) * cols + u * kUnit + i])));
            ASSERT_TRUE(std::isfinite(e));
            int ex = 0;
            EXPECT_EQ(std::frexp(e, &ex), 0.5f) << "the exponent is a power of two";
            for (int i = 0; i < kUnit; ++i) {
                const int col = u * kUnit + i;
                long long v = 0;
                for (int l = 3; l >= 0; --l) {
                    const int d = limb_of(c, cols, t, col, l);
                    if (l == 3) {
                        EXPECT_LE(std::abs(d), 65);
                    }
                    v = v * 256 + d;
                }
                EXPECT_LE(std::llabs(v), 1LL << 30);
                const double xi = x[static_cast<size_t>(t) * cols + col];
                const double err = std::fabs(static_cast<double>(v) * e - xi);
                // Half a step of 2^E, E = exponent(max) - 30: at most 2^-30 of the unit maximum
                // (plus what is lost below the smallest subnormal).
                ASSERT_LE(err, std::ldexp(mx, -30) + 1e-45) << "token " << t << " column " << col;
            }
        }
}

// The activation conversion written by a fused kernel (slot 0) and by launch_act_quant (slot 1),
// zeroed first, and the check that the two agree byte for byte on T tokens.
struct ConversionPair {
    ConversionPair(Backend& gpu, int cols)
        : cols(cols), q0(gpu, cuda::act_quant_xq_bytes(cols)), q1(gpu, cuda::act_quant_xq_bytes(cols)),
          e0(gpu, 8 * static_cast<size_t>(cols / kUnit)), e1(gpu, 8 * static_cast<size_t>(cols / kUnit)) {
        q0.set(std::vector<uint8_t>(q0.size(), 0));
        q1.set(std::vector<uint8_t>(q1.size(), 0));
    }
    uint2* xq(int i) const { return reinterpret_cast<uint2*>((i ? q1 : q0).p()); }
    float* xe(int i) const { return (i ? e1 : e0).p(); }
    void expect_equal(int T) const {
        const auto b0 = q0.get(), b1 = q1.get();
        const auto f0 = e0.get(), f1 = e1.get();
        EXPECT_EQ(0, std::memcmp(b0.data(), b1.data(), b0.size())) << "limbs";
        EXPECT_EQ(0, std::memcmp(f0.data(), f1.data(), static_cast<size_t>(T) * (cols / kUnit) * 4)) << "exponents";
    }
    int cols;
    Buf<uint8_t> q0, q1;
    Buf<float> e0, e1;
};

TEST(CudaActQuant, FusedIntoRmsnormIsBitIdentical) {
    DF_REQUIRE_CUDA();
    Backend& gpu = *gpu_backend();
    auto& cuda = dynamic_cast<cuda::CudaBackend&>(gpu);
    auto g = test_rng();
    for (const int n : {256, 5120, 6144}) {
        for (const int T : {1, 2, 5, 8}) {
            SCOPED_TRACE("n " + std::to_string(n) + " T " + std::to_string(T));
            const auto x = randn(g, static_cast<size_t>(T) * n), w = randn(g, n);
            Buf<float> xb(gpu, x), wb(gpu, w), o1(gpu, static_cast<size_t>(T) * n), o2(gpu, static_cast<size_t>(T) * n);
            const ConversionPair c(gpu, n);
            cuda::launch_rmsnorm_quant(xb.p(), n, wb.p(), T, n, 1e-6f, o1.p(), c.xq(0), c.xe(0), cuda.stream());
            cuda::launch_rmsnorm(xb.p(), n, wb.p(), T, n, 1e-6f, o2.p(), n, cuda.stream());
            cuda::launch_act_quant(o2.p(), T, n, c.xq(1), c.xe(1), cuda.stream());
            const auto a1 = o1.get(), a2 = o2.get();
            EXPECT_EQ(0, std::memcmp(a1.data(), a2.data(), a1.size() * 4));
            c.expect_equal(T);
        }
    }
}

TEST(CudaActQuant, FusedIntoGatedRmsnormConvertsItsOutput) {
    DF_REQUIRE_CUDA();
    Backend& gpu = *gpu_backend();
    auto& cuda = dynamic_cast<cuda::CudaBackend&>(gpu);
    auto g = test_rng();
    for (const auto& [heads, n] : {std::pair{12, 64}, std::pair{48, 128}, std::pair{3, 256}}) {
        for (const int T : {1, 3, 8}) {
            SCOPED_TRACE("heads " + std::to_string(heads) + " n " + std::to_string(n) + " T " + std::to_string(T));
            const int cols = heads * n;
            ASSERT_TRUE(cuda::gated_rmsnorm_quant_fits(nullptr, nullptr, nullptr, T, heads, n));
            const auto x = randn(g, static_cast<size_t>(T) * cols, 2.f), z = randn(g, static_cast<size_t>(T) * cols);
            const auto w = randn(g, n);
            Buf<float> xb(gpu, x), zb(gpu, z), wb(gpu, w), o1(gpu, x.size()), o2(gpu, x.size());
            const ConversionPair c(gpu, cols);
            cuda::launch_gated_rmsnorm_quant(xb.p(), zb.p(), wb.p(), T, heads, n, 1e-6f, o1.p(), c.xq(0), c.xe(0),
                                             cuda.stream());
            cuda::launch_gated_rmsnorm(xb.p(), zb.p(), wb.p(), T, heads, n, 1e-6f, o2.p(), cuda.stream());
            cuda::launch_act_quant(o1.p(), T, cols, c.xq(1), c.xe(1), cuda.stream());
            // The norm equals the plain kernel's up to the order of its sum of squares ...
            const auto ref = o2.get();
            EXPECT_TRUE(all_close(o1.get(), ref, tol_rel(ref, 4 * kEps, 1e-30f)));
            // ... and the conversion is exactly launch_act_quant's of the written output.
            c.expect_equal(T);
        }
    }
}

TEST(CudaImma, TakenByTheIqAndKTypesForUpToEightTokens) {
    DF_REQUIRE_CUDA();
    Backend& gpu = *gpu_backend();
    auto& cuda = dynamic_cast<cuda::CudaBackend&>(gpu);
    auto g = test_rng();
    for (const Type t : {Type::IQ2_XXS, Type::IQ2_XS, Type::IQ2_S, Type::IQ3_XXS, Type::IQ3_S, Type::Q8_0, Type::Q2_K, Type::Q4_K, Type::Q5_K, Type::Q6_K}) {
        const auto m = random_matrix(t, 32, 512, g);
        const Weight w = gpu.load_weight(t, 512, 32, m.data(), m.size());
        // Off by default: Q8_0 and Q6_K (their f32 kernels are faster at T = 1 for now);
        // DF_CUDA_IMMA_SKIP and DF_CUDA_MATVEC=f32 change the set for A/B runs.
        const char* skip_env = std::getenv("DF_CUDA_IMMA_SKIP");
        const std::string skip = skip_env ? skip_env : "Q8_0,Q6_K";
        const bool on = skip.find(type_str(t)) == std::string::npos && !std::getenv("DF_CUDA_MATVEC");
        for (int T : {1, 2, 8}) EXPECT_EQ(cuda.matvec_on_tensor_cores(w, T), on) << type_str(t) << " T " << T;
        EXPECT_FALSE(cuda.matvec_on_tensor_cores(w, 9)) << "T > 8 is the GEMM's";
        gpu.release(const_cast<void*>(w.data));
    }
}

// A deferred imma launch (DF_CUDA_IMMA_DEFER, ImmaArgs::defer) leaves the tiles that several
// warps shared to the next reader: the conversion after the fused gate/up, the RMSNorm after an
// accumulating down projection. Its results equal the fix-up's up to the order in which a
// contributor's limbs are recombined, every row of a T-token call equals the one-token call's
// bits, and a reader that is neither (a download) finds the shared tiles written out.
// n = 2560: the norm's cluster of 10 blocks, 5120: of 16 (the 27B's width), a warp a unit.
void deferred_ffn_case(int n) {
    Backend& gpu = *gpu_backend();
    auto& cuda = dynamic_cast<cuda::CudaBackend&>(gpu);
    auto g = test_rng();
    SCOPED_TRACE("n " + std::to_string(n));
    // Few units for the grid's warps: every tile is shared by several contributors.
    const int ff = 1280;
    const auto mg = random_matrix(Type::IQ2_XXS, ff, n, g), mu = random_matrix(Type::IQ2_XXS, ff, n, g),
               md = random_matrix(Type::Q2_K, n, ff, g), mo = random_matrix(Type::IQ2_XS, 512, n, g);
    const Weight wg = gpu.load_weight(Type::IQ2_XXS, n, ff, mg.data(), mg.size());
    const Weight wu = gpu.load_weight(Type::IQ2_XXS, n, ff, mu.data(), mu.size());
    const Weight wd = gpu.load_weight(Type::Q2_K, ff, n, md.data(), md.size());
    const Weight wo = gpu.load_weight(Type::IQ2_XS, n, 512, mo.data(), mo.size());
    ASSERT_TRUE(cuda.matvec_on_tensor_cores(wg, 1) && cuda.matvec_on_tensor_cores(wd, 1));
    const int T = 5;
    const auto h = randn(g, static_cast<size_t>(T) * n, 2.f), nw = randn(g, n);
    Buf<float> nb(gpu, nw);
    struct Out {
        std::vector<float> f, h, y, o;
    };
    const int was = cuda.imma_defer();  // DF_CUDA_IMMA_DEFER's, for the tests after this one
    // One FFN: norm, gate/up, down added to the residual, the next norm and a matmul reading it.
    auto run = [&](int defer, int tokens, int first) {
        cuda.set_imma_defer(defer);
        Buf<float> hb(gpu, std::vector<float>(h.begin() + static_cast<size_t>(first) * n,
                                              h.begin() + static_cast<size_t>(first + tokens) * n));
        Buf<float> xb(gpu, static_cast<size_t>(tokens) * n), fb(gpu, static_cast<size_t>(tokens) * ff),
            sb(gpu, static_cast<size_t>(tokens) * ff), yb(gpu, static_cast<size_t>(tokens) * n),
            ob(gpu, static_cast<size_t>(tokens) * 512);
        for (auto* b : {&xb, &fb, &yb, &ob}) b->poison();
        gpu.rmsnorm(hb.p(), n, nb.p(), tokens, n, 1e-6f, xb.p(), n);
        gpu.ffn_gate_up(wg, wu, xb.p(), tokens, fb.p(), sb.p());
        gpu.matmul(wd, fb.p(), tokens, hb.p(), true);
        gpu.rmsnorm(hb.p(), n, nb.p(), tokens, n, 1e-6f, yb.p(), n);
        gpu.matmul(wo, yb.p(), tokens, ob.p(), false);
        Out r{fb.get(), hb.get(), yb.get(), ob.get()};
        cuda.set_imma_defer(was);
        return r;
    };
    const Out ref = run(0, T, 0);
    for (const int defer : {1, 2}) {
        SCOPED_TRACE("defer " + std::to_string(defer));
        const Out got = run(defer, T, 0);
        // Partial sums recombined in another order: within a few ulps of the row's largest value.
        auto near = [](const std::vector<float>& a, const std::vector<float>& b, float rel) {
            float top = 0;
            for (float v : b) top = std::max(top, std::fabs(v));
            return all_close(a, b, std::vector<float>(b.size(), rel * top));
        };
        EXPECT_TRUE(near(got.f, ref.f, 1e-5f)) << "silu(gate) * up";
        EXPECT_TRUE(near(got.h, ref.h, 1e-5f)) << "the residual";
        EXPECT_TRUE(near(got.y, ref.y, 1e-5f)) << "the norm's output";
        EXPECT_TRUE(near(got.o, ref.o, 1e-5f)) << "the matmul after the norm";
        for (int t = 0; t < T; t += 2) {  // T-invariance: the split, and so the order, is the shape's
            const Out one = run(defer, 1, t);
            auto row = [&](const std::vector<float>& v, int w) { return std::vector<float>(v.begin() + t * w, v.begin() + (t + 1) * w); };
            EXPECT_EQ(0, std::memcmp(one.f.data(), row(got.f, ff).data(), ff * 4)) << "token " << t;
            EXPECT_EQ(0, std::memcmp(one.h.data(), row(got.h, n).data(), n * 4)) << "token " << t;
            EXPECT_EQ(0, std::memcmp(one.y.data(), row(got.y, n).data(), n * 4)) << "token " << t;
            EXPECT_EQ(0, std::memcmp(one.o.data(), row(got.o, 512).data(), 512 * 4)) << "token " << t;
        }
    }
    for (const Weight* w : {&wg, &wu, &wd, &wo}) gpu.release(const_cast<void*>(w->data));
}

TEST(CudaImma, DeferredSharedTilesAreSummedByTheNextReader) {
    DF_REQUIRE_CUDA();
    for (const int n : {2560, 5120}) deferred_ffn_case(n);
}

// Level 3 (the default): the GDN's q/k/v + z pair, one two-part launch, leaves its shared tiles
// to the fused GDN step, which sums them as it loads its inputs. Against level 2 (the fix-up):
// the mixer's outputs and states within a few ulps, the ssm_out matmul after it too; a token's
// bits those of its one-token call; and the deferral visibly taken (the shared tiles of qkv are
// never written: Backend::gdn_mix leaves qkv and z unspecified). For 4, 2 and 1 step blocks per
// value head (their staging differs).
TEST(CudaImma, DeferredGdnPairIsSummedByTheStep) {
    DF_REQUIRE_CUDA();
    Backend& gpu = *gpu_backend();
    auto& cuda = dynamic_cast<cuda::CudaBackend&>(gpu);
    auto g = test_rng();
    const int n = 2560, Hk = 4, Hv = 8, D = 128, taps = 4, C = (2 * Hk + Hv) * D, inner = Hv * D;
    const auto mq = random_matrix(Type::IQ2_XS, C, n, g), mz = random_matrix(Type::IQ2_XXS, inner, n, g),
               ma = random_matrix(Type::Q8_0, Hv, n, g), mb = random_matrix(Type::Q8_0, Hv, n, g),
               mo = random_matrix(Type::IQ2_S, n, inner, g);
    const Weight wq = gpu.load_weight(Type::IQ2_XS, n, C, mq.data(), mq.size());
    const Weight wz = gpu.load_weight(Type::IQ2_XXS, n, inner, mz.data(), mz.size());
    const Weight wa = gpu.load_weight(Type::Q8_0, n, Hv, ma.data(), ma.size());
    const Weight wb = gpu.load_weight(Type::Q8_0, n, Hv, mb.data(), mb.size());
    const Weight wo = gpu.load_weight(Type::IQ2_S, inner, n, mo.data(), mo.size());
    ASSERT_TRUE(cuda.matvec_on_tensor_cores(wq, 1) && cuda.matvec_on_tensor_cores(wz, 1) &&
                cuda.matvec_on_tensor_cores(wo, 1));
    Buf<float> conv_w(gpu, randn(g, static_cast<size_t>(C) * taps, 0.3f)), dt_bias(gpu, randn(g, Hv)),
        a_neg(gpu, std::vector<float>(Hv, -2.f)), norm_w(gpu, randn(g, D));
    const auto cs0 = randn(g, static_cast<size_t>(taps - 1) * C), ss0 = randn(g, static_cast<size_t>(Hv) * D * D, 0.1f);
    const GdnShape shape{Hk, Hv, D, taps};
    const int T = 5;
    const auto h = randn(g, static_cast<size_t>(T) * n);
    struct Out {
        std::vector<float> y, o, cs, ss, qkv;
    };
    const int was = cuda.imma_defer(), split_was = cuda.gdn_split();
    auto run = [&](int defer, int tokens) {
        cuda.set_imma_defer(defer);
        Buf<float> xb(gpu, std::vector<float>(h.begin(), h.begin() + static_cast<size_t>(tokens) * n));
        Buf<float> qkv(gpu, static_cast<size_t>(tokens) * C), z(gpu, static_cast<size_t>(tokens) * inner),
            al(gpu, static_cast<size_t>(tokens) * Hv), be(gpu, static_cast<size_t>(tokens) * Hv),
            y(gpu, static_cast<size_t>(tokens) * inner), o(gpu, static_cast<size_t>(tokens) * n), cs(gpu, cs0), ss(gpu, ss0);
        for (auto* b : {&qkv, &z, &y, &o}) b->poison();
        const GdnLayer layer{conv_w.p(), dt_bias.p(), a_neg.p(), norm_w.p(), cs.p(), ss.p()};
        gpu.matmul(wq, xb.p(), tokens, qkv.p());
        gpu.matmul(wz, xb.p(), tokens, z.p());
        gpu.matmul(wa, xb.p(), tokens, al.p());
        gpu.matmul(wb, xb.p(), tokens, be.p());
        gpu.gdn_mix(qkv.p(), z.p(), al.p(), be.p(), layer, tokens, shape, 1e-6f, y.p());
        gpu.matmul(wo, y.p(), tokens, o.p());
        Out r{y.get(), o.get(), cs.get(), ss.get(), qkv.get()};
        cuda.set_imma_defer(was);
        return r;
    };
    auto near = [](const std::vector<float>& a, const std::vector<float>& b, float rel) {
        float top = 0;
        for (float v : b) top = std::max(top, std::fabs(v));
        return all_close(a, b, std::vector<float>(b.size(), rel * top));
    };
    auto any_nan = [](const std::vector<float>& v) { return std::any_of(v.begin(), v.end(), [](float x) { return std::isnan(x); }); };
    for (const int split : {4, 2, 1}) {  // the step's blocks per value head (its kernels differ)
        SCOPED_TRACE("blocks per head " + std::to_string(split));
        cuda.set_gdn_split(split);
        const Out ref = run(2, T), got = run(3, T), one = run(3, 1);
        EXPECT_FALSE(any_nan(ref.qkv)) << "level 2 writes every tile of qkv";
        EXPECT_TRUE(any_nan(got.qkv)) << "level 3 leaves qkv's shared tiles to the step";
        EXPECT_TRUE(near(got.y, ref.y, 1e-4f)) << "the mixer's outputs";
        EXPECT_TRUE(near(got.o, ref.o, 1e-4f)) << "ssm_out after it";
        EXPECT_TRUE(near(got.cs, ref.cs, 1e-5f)) << "the conv state";
        EXPECT_TRUE(near(got.ss, ref.ss, 1e-4f)) << "the delta state";
        EXPECT_FALSE(any_nan(got.y) || any_nan(got.o) || any_nan(got.cs) || any_nan(got.ss));
        EXPECT_EQ(0, std::memcmp(one.y.data(), got.y.data(), static_cast<size_t>(inner) * 4)) << "token 0 as its own call";
        EXPECT_EQ(0, std::memcmp(one.o.data(), got.o.data(), static_cast<size_t>(n) * 4)) << "token 0 as its own call";
    }
    cuda.set_gdn_split(split_was);
    for (const Weight* w : {&wq, &wz, &wa, &wb, &wo}) gpu.release(const_cast<void*>(w->data));
}

}  // namespace
}  // namespace df::test
