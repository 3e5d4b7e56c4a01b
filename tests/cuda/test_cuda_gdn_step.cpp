// The one-kernel GDN mixer (gdn_step.cu) against the three kernels it replaces (conv, delta rule,
// gated RMSNorm with the imma conversion): outputs, both states and the converted activations
// equal bit for bit over consecutive calls, for Hv / Hk = 1..4, odd Hk and 1, 2 or 4 blocks per head.
// The three kernels are checked against the CPU backend in test_cuda_ops.cpp and test_cuda_imma.cpp.
#include <cstring>
#include <memory>
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

std::vector<float> uniform(std::mt19937_64& g, size_t n, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = d(g);
    return v;
}

// A GDN layer's random weights on the GPU (built in place: Buf does not move) and the step
// arguments they and the shape fill in.
struct GdnLayer {
    int Hk, Hv, C;
    Buf<float> conv_w, dt_bias, a_neg, norm_w;
    GdnLayer(Backend& gpu, std::mt19937_64& g, int hk, int hv)
        : Hk(hk), Hv(hv), C((2 * hk + hv) * kD), conv_w(gpu, uniform(g, static_cast<size_t>(C) * kTaps, -0.5f, 0.5f)),
          dt_bias(gpu, uniform(g, hv, -7.f, -2.f)), a_neg(gpu, uniform(g, hv, -16.f, -1.f)), norm_w(gpu, randn(g, kD)) {}
    cuda::GdnStepArgs args() const {
        cuda::GdnStepArgs a;
        a.conv_w = conv_w.p();
        a.dt_bias = dt_bias.p();
        a.a_neg = a_neg.p();
        a.norm_w = norm_w.p();
        a.k_heads = Hk;
        a.v_heads = Hv;
        a.head_dim = kD;
        a.taps = kTaps;
        a.eps = 1e-6f;
        return a;
    }
};

// Two copies of a layer's state, the fused kernel driving one and the three kernels the other.
void check_shape_split(int Hk, int Hv, bool convert, std::initializer_list<int> Ts, int split, bool late) {
    Backend& gpu = *gpu_backend();
    auto& cuda = dynamic_cast<cuda::CudaBackend&>(gpu);
    const cudaStream_t st = cuda.stream();
    auto g = test_rng();
    const GdnLayer w(gpu, g, Hk, Hv);
    const int C = w.C, cols = Hv * kD, units = cols / 256;
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

        cuda::GdnStepArgs a = w.args();
        a.qkv = x1.p();
        a.z = zb.p();
        a.alpha = al.p();
        a.beta = be.p();
        a.T = T;
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

        cuda::launch_gdn_conv(x2.p(), T, C, kTaps, w.conv_w.p(), cs2.p(), st);
        cuda::GdnArgs d;
        d.qkv = x2.p();
        d.alpha = al.p();
        d.beta = be.p();
        d.dt_bias = w.dt_bias.p();
        d.a_neg = w.a_neg.p();
        d.T = T;
        d.k_heads = Hk;
        d.v_heads = Hv;
        d.head_dim = kD;
        d.eps = 1e-6f;
        d.state = ss2.p();
        d.out = o2.p();
        cuda::launch_gdn_delta(d, st);
        cuda::launch_gated_rmsnorm_quant(o2.p(), zb.p(), w.norm_w.p(), T, Hv, kD, 1e-6f, o2.p(), reinterpret_cast<uint2*>(q2.p()),
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

// A batched pass's lanes (GdnStepArgs::lanes) in one launch against one launch per lane: each
// lane's outputs and states bit for bit, lanes of 1..3 tokens, 2..8 lanes.
void check_lanes(int Hk, int Hv, std::initializer_list<int> Ts) {
    Backend& gpu = *gpu_backend();
    auto& cuda = dynamic_cast<cuda::CudaBackend&>(gpu);
    const cudaStream_t st = cuda.stream();
    auto g = test_rng();
    const int n = static_cast<int>(Ts.size()), cols = Hv * kD;
    SCOPED_TRACE("Hk " + std::to_string(Hk) + " Hv " + std::to_string(Hv) + " lanes " + std::to_string(n));
    const GdnLayer w(gpu, g, Hk, Hv);
    const int C = w.C;
    Buf<uint32_t> counters(gpu, std::vector<uint32_t>(static_cast<size_t>(Hk) * n + 1, 0u));
    struct Lane {
        std::unique_ptr<Buf<float>> x, z, al, be, cs[2], ss[2], o[2];
        int T;
    };
    std::vector<Lane> lanes;
    for (const int T : Ts) {
        Lane l;
        l.T = T;
        l.x = std::make_unique<Buf<float>>(gpu, randn(g, static_cast<size_t>(T) * C));
        l.z = std::make_unique<Buf<float>>(gpu, randn(g, static_cast<size_t>(T) * cols, 2.f));
        l.al = std::make_unique<Buf<float>>(gpu, randn(g, static_cast<size_t>(T) * Hv));
        l.be = std::make_unique<Buf<float>>(gpu, randn(g, static_cast<size_t>(T) * Hv));
        const auto cs0 = randn(g, static_cast<size_t>(kTaps - 1) * C), ss0 = randn(g, static_cast<size_t>(Hv) * kD * kD, 0.1f);
        for (int k = 0; k < 2; ++k) {
            l.cs[k] = std::make_unique<Buf<float>>(gpu, cs0);
            l.ss[k] = std::make_unique<Buf<float>>(gpu, ss0);
            l.o[k] = std::make_unique<Buf<float>>(gpu, static_cast<size_t>(T) * cols);
            l.o[k]->poison();
        }
        lanes.push_back(std::move(l));
    }
    cuda::GdnStepArgs a = w.args();
    a.counters = counters.p();
    a.counter_count = Hk * n;
    for (int round = 0; round < 2; ++round) {  // twice: the second over the states the first left
        cuda::GdnStepArgs all = a;
        all.lanes = n;
        for (int i = 0; i < n; ++i) {
            Lane& l = lanes[i];
            all.lane[i] = {l.x->p(), l.z->p(), l.al->p(), l.be->p(), l.cs[0]->p(), l.ss[0]->p(), l.o[0]->p(), l.T};
            cuda::GdnStepArgs one = a;
            one.qkv = l.x->p();
            one.z = l.z->p();
            one.alpha = l.al->p();
            one.beta = l.be->p();
            one.conv_state = l.cs[1]->p();
            one.state = l.ss[1]->p();
            one.out = l.o[1]->p();
            one.T = l.T;
            ASSERT_TRUE(cuda::gdn_step_fits(one));
            cuda::launch_gdn_step(one, st);
        }
        ASSERT_TRUE(cuda::gdn_step_fits(all));
        cuda::launch_gdn_step(all, st);
        for (int i = 0; i < n; ++i) {
            SCOPED_TRACE("lane " + std::to_string(i) + " round " + std::to_string(round));
            const Lane& l = lanes[i];
            expect_bits(*l.o[0], *l.o[1], l.o[0]->size(), "outputs");
            expect_bits(*l.cs[0], *l.cs[1], l.cs[0]->size(), "conv state");
            expect_bits(*l.ss[0], *l.ss[1], l.ss[0]->size(), "delta state");
        }
        EXPECT_EQ(counters.get(), std::vector<uint32_t>(static_cast<size_t>(Hk) * n + 1, 0u)) << "counters left zero";
    }
}

TEST(CudaGdnStep, LanesInOneLaunchEqualOneLaunchPerLane) {
    DF_REQUIRE_CUDA();
    check_lanes(16, 48, {1, 1});
    check_lanes(16, 48, {1, 1, 1, 1, 1, 1, 1, 1});
    check_lanes(2, 4, {2, 1, 3});
    check_lanes(3, 6, {1, 1, 1, 1, 1});
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
    // Lanes: each its own T and alignment, Hk counters each, no conversion.
    cuda::GdnStepArgs l = a;
    l.lanes = 2;
    l.lane[0] = {buf, buf, buf, buf, buf, buf, buf, 1};
    l.lane[1] = {buf, buf, buf, buf, buf, buf, buf, 3};
    EXPECT_FALSE(cuda::gdn_step_fits(l));  // 2 x 16 counters of 16
    l.k_heads = 8;
    l.v_heads = 16;
    EXPECT_TRUE(cuda::gdn_step_fits(l));
    auto lanes_with = [&](auto edit) {
        cuda::GdnStepArgs b = l;
        edit(b);
        return cuda::gdn_step_fits(b);
    };
    EXPECT_FALSE(lanes_with([](auto& b) { b.lane[1].T = 9; }));
    EXPECT_FALSE(lanes_with([](auto& b) { b.lane[1].T = 0; }));
    EXPECT_FALSE(lanes_with([&](auto& b) { b.lane[1].z = buf + 1; }));
    EXPECT_FALSE(lanes_with([](auto& b) { b.lanes = cuda::kGdnStepMaxLanes + 1; }));
    EXPECT_FALSE(lanes_with([&](auto& b) { b.xq = reinterpret_cast<uint2*>(buf); }));
}

}  // namespace
}  // namespace df::test
