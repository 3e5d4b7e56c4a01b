// The one-kernel GDN mixer (gdn_step.cu) against the three kernels it replaces (conv, delta rule,
// gated RMSNorm with the imma conversion): outputs, both states and the converted activations
// equal bit for bit over consecutive calls, for Hv / Hk = 1..4, odd Hk and 1, 2 or 4 blocks per head.
// The three kernels are checked against the CPU backend in test_cuda_ops.cpp and test_cuda_imma.cpp.
#include <cstring>
#include <random>
#include <string>

#include "backend/cuda/backend_cuda.h"
#include "backend/cuda/gdn_step.h"
#include "backend/cuda/kernels.h"
#include "cuda_test_util.h"

namespace df::test {
namespace {

constexpr int kD = 128, kTaps = 4;

template <class T>
void expect_bits(const Buf<T>& a, const Buf<T>& b, size_t n, const char* what) {
    const auto va = a.get(), vb = b.get();
    ASSERT_LE(n, va.size());
    EXPECT_EQ(0, std::memcmp(va.data(), vb.data(), n * sizeof(T))) << what;
}

// Two copies of a layer's state, the fused kernel driving one and the three kernels the other.
void check_shape_split(int Hk, int Hv, bool convert, std::initializer_list<int> Ts, int split, bool late) {
    Backend& gpu = *gpu_backend();
    auto& cuda = dynamic_cast<cuda::CudaBackend&>(gpu);
    const cudaStream_t st = cuda.stream();
    auto g = test_rng();
    const int C = (2 * Hk + Hv) * kD, cols = Hv * kD, units = cols / 256;
    std::uniform_real_distribution<float> u(-0.5f, 0.5f), a_dist(1.f, 16.f), dt(-7.f, -2.f);
    std::vector<float> convw(static_cast<size_t>(C) * kTaps), dt_bias(Hv), a_neg(Hv);
    for (auto& v : convw) v = u(g);
    for (auto& v : a_neg) v = -a_dist(g);
    for (auto& v : dt_bias) v = dt(g);
    const auto norm_w = randn(g, kD);
    Buf<float> cw(gpu, convw), db(gpu, dt_bias), an(gpu, a_neg), nw(gpu, norm_w);
    // Non-zero starting states (as after a prompt).
    const auto cs0 = randn(g, static_cast<size_t>(kTaps - 1) * C), ss0 = randn(g, static_cast<size_t>(Hv) * kD * kD, 0.1f);
    Buf<float> cs1(gpu, cs0), cs2(gpu, cs0), ss1(gpu, ss0), ss2(gpu, ss0);
    Buf<uint8_t> q1(gpu, cuda::act_quant_xq_bytes(cols)), q2(gpu, cuda::act_quant_xq_bytes(cols));
    Buf<float> e1(gpu, 8 * static_cast<size_t>(units)), e2(gpu, 8 * static_cast<size_t>(units));
    q1.set(std::vector<uint8_t>(q1.size(), 0));
    q2.set(std::vector<uint8_t>(q2.size(), 0));
    Buf<uint32_t> counters(gpu, std::vector<uint32_t>(Hk + 1, 0u));
    for (const int T : Ts) {
        SCOPED_TRACE("Hk " + std::to_string(Hk) + " Hv " + std::to_string(Hv) + " T " + std::to_string(T) +
                     (convert ? " converted" : ""));
        const auto qkv = randn(g, static_cast<size_t>(T) * C), z = randn(g, static_cast<size_t>(T) * cols, 2.f);
        const auto alpha = randn(g, static_cast<size_t>(T) * Hv), beta = randn(g, static_cast<size_t>(T) * Hv);
        Buf<float> x1(gpu, qkv), x2(gpu, qkv), zb(gpu, z), al(gpu, alpha), be(gpu, beta);
        Buf<float> o1(gpu, static_cast<size_t>(T) * cols), o2(gpu, static_cast<size_t>(T) * cols);
        o1.poison();
        o2.poison();

        cuda::GdnStepArgs a;
        a.qkv = x1.p();
        a.z = zb.p();
        a.alpha = al.p();
        a.beta = be.p();
        a.conv_w = cw.p();
        a.dt_bias = db.p();
        a.a_neg = an.p();
        a.norm_w = nw.p();
        a.T = T;
        a.k_heads = Hk;
        a.v_heads = Hv;
        a.head_dim = kD;
        a.taps = kTaps;
        a.eps = 1e-6f;
        a.blocks_per_head = split;
        a.counters = counters.p();
        a.counter_count = Hk;
        a.late_trigger = late;
        a.conv_state = cs1.p();
        a.state = ss1.p();
        a.out = o1.p();
        if (convert) {
            a.xq = reinterpret_cast<uint2*>(q1.p());
            a.xe = e1.p();
        }
        ASSERT_TRUE(cuda::gdn_step_fits(a));
        cuda::launch_gdn_step(a, st);

        cuda::launch_gdn_conv(x2.p(), T, C, kTaps, cw.p(), cs2.p(), st);
        cuda::GdnArgs d;
        d.qkv = x2.p();
        d.alpha = al.p();
        d.beta = be.p();
        d.dt_bias = db.p();
        d.a_neg = an.p();
        d.T = T;
        d.k_heads = Hk;
        d.v_heads = Hv;
        d.head_dim = kD;
        d.eps = 1e-6f;
        d.state = ss2.p();
        d.out = o2.p();
        cuda::launch_gdn_delta(d, st);
        cuda::launch_gated_rmsnorm_quant(o2.p(), zb.p(), nw.p(), T, Hv, kD, 1e-6f, o2.p(), reinterpret_cast<uint2*>(q2.p()),
                                         e2.p(), st);

        expect_bits(o1, o2, o1.size(), "outputs");
        expect_bits(cs1, cs2, cs1.size(), "conv state");
        expect_bits(ss1, ss2, ss1.size(), "delta state");
        if (convert) {
            expect_bits(q1, q2, q1.size(), "converted limbs");
            expect_bits(e1, e2, static_cast<size_t>(T) * units, "converted exponents");
        }
        const auto x = x1.get();
        EXPECT_EQ(0, std::memcmp(x.data(), qkv.data(), x.size() * 4)) << "qkv is only read";
        EXPECT_EQ(counters.get(), std::vector<uint32_t>(Hk + 1, 0u)) << "counters left zero, none past Hk";
    }
}

// Every split of a head's value columns over blocks, the PDL trigger early and late.
void check_shape(int Hk, int Hv, bool convert, std::initializer_list<int> Ts) {
    for (const int split : {1, 2, 4}) {
        SCOPED_TRACE("blocks per head " + std::to_string(split));
        check_shape_split(Hk, Hv, convert, Ts, split, split == 4);
    }
}

TEST(CudaGdnStep, EqualsConvDeltaRuleAndGatedNormBitForBit) {
    DF_REQUIRE_CUDA();
    // Hv / Hk = 1 .. 4, odd Hk (a unit's two heads then read different key heads); the 27B's
    // 16 / 48 heads; T = 1 .. 8 over carried state.
    check_shape(2, 2, true, {1, 3, 1});
    check_shape(2, 4, true, {1, 8, 2, 1});
    check_shape(2, 6, false, {3, 1, 1});
    check_shape(3, 6, true, {1, 2, 1});
    check_shape(1, 4, true, {2, 1});
    check_shape(4, 16, true, {1, 5, 1});
    check_shape(16, 48, true, {1, 1, 8, 3, 1});
    check_shape(16, 48, false, {2, 1});
}

TEST(CudaGdnStep, FitsOnlyTheShapesItTakes) {  // host code only: runs without a GPU too
    cuda::GdnStepArgs a;
    alignas(16) static float buf[8];
    static unsigned counters[16];
    a.z = buf;
    a.out = buf;
    a.counters = counters;
    a.counter_count = 16;
    a.T = 1;
    a.k_heads = 16;
    a.v_heads = 48;
    a.head_dim = 128;
    a.taps = 4;
    EXPECT_TRUE(cuda::gdn_step_fits(a));
    auto with = [&](auto edit) {
        cuda::GdnStepArgs b = a;
        edit(b);
        return cuda::gdn_step_fits(b);
    };
    EXPECT_TRUE(with([](auto& b) { b.T = 8; }));
    EXPECT_FALSE(with([](auto& b) { b.T = 9; }));
    EXPECT_FALSE(with([](auto& b) { b.head_dim = 64; }));
    EXPECT_FALSE(with([](auto& b) { b.taps = 3; }));
    EXPECT_TRUE(with([](auto& b) { b.k_heads = 3; b.v_heads = 6; }));
    EXPECT_FALSE(with([](auto& b) { b.k_heads = 3; b.v_heads = 9; }));   // odd value heads: no unit pairs
    EXPECT_FALSE(with([](auto& b) { b.v_heads = 40; }));                 // not a multiple of Hk
    EXPECT_FALSE(with([](auto& b) { b.k_heads = 32; b.v_heads = 64; })); // more key heads than counters
    EXPECT_FALSE(with([](auto& b) { b.counters = nullptr; }));
    EXPECT_FALSE(with([&](auto& b) { b.out = buf + 1; }));               // misaligned
}

}  // namespace
}  // namespace df::test
