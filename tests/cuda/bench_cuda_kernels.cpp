// Kernel benchmarks on the production launchers (disabled by default; run with
//   test_cuda --gtest_also_run_disabled_tests --gtest_filter='CudaBench.*').
// Each case prints time per call, the bytes it must move and the implied GB/s against the
// measured device copy bandwidth; weights rotate over copies larger than L2 so every call
// streams from HBM.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/backend_cuda.h"
#include "backend/cuda/check.h"
#include "quant_test_util.h"

namespace df::test {
namespace {

cuda::CudaBackend& cuda_be() { return dynamic_cast<cuda::CudaBackend&>(*gpu_backend()); }

// Median-free but robust enough: one event pair around `reps` calls after a warm-up.
template <class F>
double time_us(F&& f, int reps) {
    cudaStream_t s = cuda_be().stream();
    for (int i = 0; i < 3; ++i) f(i);
    cuda_be().flush();
    cudaEvent_t a, b;
    DF_CUDA_CHECK(cudaEventCreate(&a));
    DF_CUDA_CHECK(cudaEventCreate(&b));
    DF_CUDA_CHECK(cudaEventRecord(a, s));
    for (int i = 0; i < reps; ++i) f(i);
    cuda_be().flush();
    DF_CUDA_CHECK(cudaEventRecord(b, s));
    DF_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    DF_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return 1e3 * ms / reps;
}

double copy_gbs() {
    static double gbs = [] {
        Backend& gpu = *gpu_backend();
        const size_t n = size_t{2} << 30;
        void* a = gpu.alloc(n, MemKind::scratch);
        void* b = gpu.alloc(n, MemKind::scratch);
        const double us = time_us([&](int) { gpu.copy(b, a, n); }, 10);
        gpu.release(a);
        gpu.release(b);
        return 2.0 * n / (us * 1e3);
    }();
    return gbs;
}

struct Shape {
    Type type;
    int cols, rows;
    const char* what;
};

TEST(CudaBench, DISABLED_MatvecBandwidth) {
    DF_REQUIRE_CUDA();
    Backend& gpu = *gpu_backend();
    auto g = test_rng();
    const double peak = copy_gbs();
    std::printf("device copy bandwidth (read + write): %.0f GB/s\n", peak);
    std::printf("%-8s %6s x %-6s %2s %-26s %9s %9s %6s\n", "type", "cols", "rows", "T", "tensor", "us", "GB/s", "%copy");
    const Shape shapes[] = {
        {Type::IQ2_XXS, 5120, 17408, "27B ffn_gate/up"}, {Type::IQ2_XXS, 17408, 5120, "27B ffn_down"},
        {Type::Q2_K, 17408, 5120, "27B ffn_down (first 8)"}, {Type::IQ2_XS, 5120, 10240, "27B attn_qkv"},
        {Type::IQ2_XXS, 5120, 6144, "27B attn_gate"}, {Type::IQ2_S, 6144, 5120, "27B ssm_out"},
        {Type::IQ3_XXS, 5120, 12288, "27B attn_q"}, {Type::IQ4_XS, 5120, 1024, "27B attn_k"},
        {Type::Q5_K, 5120, 1024, "27B attn_v"}, {Type::IQ3_S, 6144, 5120, "27B attn_output"},
        {Type::Q8_0, 5120, 48, "27B ssm_alpha"}, {Type::Q4_K, 5120, 248320, "27B output"},
        {Type::Q8_0, 2560, 9728, "4B ffn_gate/up"}, {Type::Q8_0, 9728, 2560, "4B ffn_down"},
        {Type::Q8_0, 2560, 4096, "4B attn_q"}, {Type::Q8_0, 2560, 1024, "4B attn_k"},
        {Type::Q8_0, 4096, 2560, "4B attn_output"}, {Type::Q8_0, 2560, 151936, "4B output (tied)"},
        {Type::Q6_K, 5120, 4096, "Q6_K"}, {Type::Q3_K, 5120, 4096, "Q3_K"}, {Type::Q4_0, 5120, 4096, "Q4_0"},
    };
    const char* only = std::getenv("DF_BENCH_ONLY");  // substring of the tensor label
    for (const Shape& s : shapes) {
        if (only && !std::strstr(s.what, only)) continue;
        const auto m = random_matrix(s.type, s.rows, s.cols, g);
        const Weight w0 = gpu.load_weight(s.type, s.cols, s.rows, m.data(), m.size());
        const int copies = static_cast<int>(std::clamp<size_t>((size_t{400} << 20) / w0.bytes + 1, 1, 16));
        std::vector<Weight> ws{w0};
        for (int i = 1; i < copies; ++i) ws.push_back(gpu.load_weight(s.type, s.cols, s.rows, m.data(), m.size()));
        for (int T : {1, 8}) {
            if (T == 8 && s.rows < 4096) continue;
            Buf<float> x(gpu, randn(g, static_cast<size_t>(T) * s.cols)), out(gpu, static_cast<size_t>(T) * s.rows);
            const double us = time_us([&](int i) { gpu.matmul(ws[i % copies], x.p(), T, out.p(), false); }, 40);
            const double bytes = w0.bytes + 4.0 * T * (s.cols + s.rows);
            std::printf("%-8s %6d x %-6d %2d %-26s %9.1f %9.0f %5.0f%%\n", type_str(s.type).c_str(), s.cols, s.rows, T, s.what,
                        us, bytes / (us * 1e3), 100 * bytes / (us * 1e3) / peak);
        }
        for (const Weight& w : ws) gpu.release(const_cast<void*>(w.data));
    }
    // The fused gate/up of the two presets.
    for (const Shape& s : {Shape{Type::IQ2_XXS, 5120, 17408, "27B gate+up fused"}, Shape{Type::Q8_0, 2560, 9728, "4B gate+up fused"}}) {
        const auto m = random_matrix(s.type, s.rows, s.cols, g);
        std::vector<Weight> ws;
        for (int i = 0; i < 8; ++i) ws.push_back(gpu.load_weight(s.type, s.cols, s.rows, m.data(), m.size()));
        Buf<float> x(gpu, randn(g, s.cols)), out(gpu, s.rows), scratch(gpu, s.rows);
        const double us = time_us([&](int i) { gpu.ffn_gate_up(ws[(2 * i) % 8], ws[(2 * i + 1) % 8], x.p(), 1, out.p(), scratch.p()); }, 40);
        const double bytes = 2.0 * ws[0].bytes;
        std::printf("%-8s %6d x %-6d %2d %-26s %9.1f %9.0f %5.0f%%\n", type_str(s.type).c_str(), s.cols, s.rows, 1, s.what, us,
                    bytes / (us * 1e3), 100 * bytes / (us * 1e3) / peak);
        for (const Weight& w : ws) gpu.release(const_cast<void*>(w.data));
    }
}

// Time of one T = 1 call against the number of rows (fixed columns): a straight line through
// the origin means bytes bound; steps at multiples of the resident warp groups mean rounds of
// row groups whose last one runs part-empty; the intercept is the launch's fixed cost.
TEST(CudaBench, DISABLED_MatvecRowsSweep) {
    DF_REQUIRE_CUDA();
    Backend& gpu = *gpu_backend();
    auto g = test_rng();
    std::printf("%-8s %6s x %-6s %-8s %9s %9s\n", "type", "cols", "rows", "mode", "us", "GB/s");
    struct Case {
        Type type;
        int cols;
        bool pair;
    };
    for (const Case c : {Case{Type::Q8_0, 2560, true}, Case{Type::Q8_0, 9728, false}, Case{Type::Q8_0, 2560, false},
                         Case{Type::IQ2_XXS, 5120, true}, Case{Type::IQ2_XXS, 5120, false}}) {
        for (int rows = 512; rows <= 20480; rows += rows < 4096 ? 512 : 1024) {
            const auto m = random_matrix(c.type, rows, c.cols, g);
            const Weight w0 = gpu.load_weight(c.type, c.cols, rows, m.data(), m.size());
            const int copies = static_cast<int>(std::clamp<size_t>((size_t{400} << 20) / w0.bytes + 1, 2, 32)) & ~1;
            std::vector<Weight> ws{w0};
            for (int i = 1; i < copies; ++i) ws.push_back(gpu.load_weight(c.type, c.cols, rows, m.data(), m.size()));
            Buf<float> x(gpu, randn(g, c.cols)), out(gpu, rows), scratch(gpu, rows);
            const double us = c.pair ? time_us([&](int i) { gpu.ffn_gate_up(ws[(2 * i) % copies], ws[(2 * i + 1) % copies], x.p(), 1, out.p(), scratch.p()); }, 40)
                                     : time_us([&](int i) { gpu.matmul(ws[i % copies], x.p(), 1, out.p(), false); }, 40);
            const double bytes = (c.pair ? 2.0 : 1.0) * w0.bytes;
            std::printf("%-8s %6d x %-6d %-8s %9.2f %9.0f\n", type_str(c.type).c_str(), c.cols, rows, c.pair ? "gate+up" : "single", us,
                        bytes / (us * 1e3));
            for (const Weight& w : ws) gpu.release(const_cast<void*>(w.data));
        }
    }
}

TEST(CudaBench, DISABLED_GemmThroughput) {
    DF_REQUIRE_CUDA();
    Backend& gpu = *gpu_backend();
    auto& cuda = cuda_be();
    auto g = test_rng();
    std::printf("%-8s %6s x %-6s %5s %-6s %9s %8s\n", "type", "cols", "rows", "T", "mode", "us", "TFLOP/s");
    for (const Shape& s : {Shape{Type::Q8_0, 2560, 9728, ""}, Shape{Type::Q8_0, 9728, 2560, ""}, Shape{Type::Q8_0, 2560, 4096, ""},
                           Shape{Type::IQ2_XXS, 5120, 17408, ""}, Shape{Type::IQ2_XXS, 17408, 5120, ""}, Shape{Type::IQ2_XS, 5120, 10240, ""},
                           Shape{Type::IQ3_XXS, 5120, 12288, ""}, Shape{Type::Q4_K, 5120, 8192, ""}, Shape{Type::Q2_K, 17408, 5120, ""}}) {
        const char* only = std::getenv("DF_BENCH_ONLY");  // "TYPE COLS ROWS", e.g. for ncu
        if (only && type_str(s.type) + " " + std::to_string(s.cols) + " " + std::to_string(s.rows) != only) continue;
        const auto m = random_matrix(s.type, s.rows, s.cols, g);
        const Weight w = gpu.load_weight(s.type, s.cols, s.rows, m.data(), m.size());
        for (int T : {512, 2048}) {
            Buf<float> x(gpu, randn(g, static_cast<size_t>(T) * s.cols)), out(gpu, static_cast<size_t>(T) * s.rows);
            // exact f16 (where the type has it), then the dequantizing GEMM with 3 and 1 bf16 products
            for (const char* mode : {"wgmma", "f16x2", "3xbf16", "bf16"}) {
                const bool q = mode[0] == 'f' || mode[0] == 'w';
                cuda.set_qgemm(q);
                cuda.set_qgemm_wgmma(mode[0] == 'w');
                if (mode[0] == 'w' && !cuda.qgemm_wgmma()) continue;
                cuda.set_split_gemm(mode[0] == '3');
                if (q && !cuda.gemm_on_exact_f16(w, T)) continue;
                const double us = time_us([&](int) { gpu.matmul(w, x.p(), T, out.p(), false); }, 10);
                std::printf("%-8s %6d x %-6d %5d %-6s %9.1f %8.1f\n", type_str(s.type).c_str(), s.cols, s.rows, T, mode, us,
                            2.0 * s.cols * s.rows * T / (us * 1e6));
            }
        }
        cuda.set_qgemm(true);
        cuda.set_qgemm_wgmma(true);
        cuda.set_split_gemm(true);
        gpu.release(const_cast<void*>(w.data));
    }
}

TEST(CudaBench, DISABLED_OtherOps) {
    DF_REQUIRE_CUDA();
    Backend& gpu = *gpu_backend();
    auto g = test_rng();
    const double peak = copy_gbs();
    struct A { int heads, kv_heads, D, depth; KvType kt; const char* what; };
    for (const A a : {A{24, 4, 256, 8192, KvType::f16, "27B attn depth 8192 f16"}, A{24, 4, 256, 8192, KvType::f32, "27B attn depth 8192 f32"},
                      A{32, 8, 128, 8192, KvType::f16, "4B attn depth 8192 f16"}, A{32, 8, 128, 2040, KvType::f16, "4B attn depth 2040 f16"},
                      A{32, 8, 128, 4096, KvType::f16, "4B attn depth 4096 f16"}, A{32, 8, 128, 600, KvType::f16, "4B attn depth 600 f16"},
                      A{32, 8, 128, 128, KvType::f16, "4B attn depth 128 f16"}}) {
        const size_t elem = a.kt == KvType::f16 ? 2 : 4, kv_dim = static_cast<size_t>(a.kv_heads) * a.D;
        Buf<uint8_t> kc(gpu, elem * (a.depth + 1) * kv_dim), vc(gpu, elem * (a.depth + 1) * kv_dim);
        Buf<float> q(gpu, randn(g, static_cast<size_t>(a.heads) * 2 * a.D)), out(gpu, static_cast<size_t>(a.heads) * a.D);
        Buf<int32_t> pos(gpu, std::vector<int32_t>{a.depth});
        Step s;
        s.T = 1;
        s.pos = pos.p();
        s.max_ctx = a.depth + 1;
        s.pos0_hint = a.depth;  // the kernels decode picks at this depth (without it, every token's)
        const AttnShape sh{a.heads, a.kv_heads, a.D, a.D, a.heads * a.D, 0.0625f};
        const double us = time_us([&](int) { gpu.attention(q.p(), kc.p(), vc.p(), a.kt, sh, s, out.p()); }, 50);
        const double bytes = 2.0 * elem * (a.depth + 1) * kv_dim;
        std::printf("%-32s %8.1f us %7.0f GB/s %4.0f%%\n", a.what, us, bytes / (us * 1e3), 100 * bytes / (us * 1e3) / peak);
    }
    {  // GDN token step of the 27B: 48 value heads, 16 key heads, 128x128 state each
        const GdnShape gs{16, 48, 128, 4};
        const int C = gs.channels();
        Buf<float> qkv(gpu, randn(g, C)), al(gpu, randn(g, 48)), be(gpu, randn(g, 48)), db(gpu, randn(g, 48)),
            an(gpu, std::vector<float>(48, -1.f)), st(gpu, static_cast<size_t>(48) * 128 * 128), out(gpu, 48 * 128),
            cw(gpu, randn(g, static_cast<size_t>(C) * 4)), cs(gpu, static_cast<size_t>(3) * C);
        double us = time_us([&](int) { gpu.gdn_delta(qkv.p(), al.p(), be.p(), db.p(), an.p(), 1, gs, 1e-6f, st.p(), out.p()); }, 50);
        const double bytes = 2.0 * 48 * 128 * 128 * 4;
        std::printf("%-32s %8.1f us %7.0f GB/s %4.0f%%\n", "27B gdn_delta T=1", us, bytes / (us * 1e3), 100 * bytes / (us * 1e3) / peak);
        us = time_us([&](int) { gpu.gdn_delta(qkv.p(), al.p(), be.p(), db.p(), an.p(), 1, gs, 1e-6f, st.p(), out.p()); }, 50);
        Buf<float> qkv256(gpu, randn(g, static_cast<size_t>(256) * C)), al256(gpu, randn(g, 256 * 48)), be256(gpu, randn(g, 256 * 48)),
            out256(gpu, static_cast<size_t>(256) * 48 * 128);
        us = time_us([&](int) { gpu.gdn_delta(qkv256.p(), al256.p(), be256.p(), db.p(), an.p(), 256, gs, 1e-6f, st.p(), out256.p()); }, 5);
        std::printf("%-32s %8.1f us\n", "27B gdn_delta T=256", us);
        us = time_us([&](int) { gpu.gdn_conv(qkv.p(), 1, gs, cw.p(), cs.p()); }, 50);
        std::printf("%-32s %8.1f us\n", "27B gdn_conv T=1", us);
        us = time_us([&](int) { gpu.gdn_conv(qkv256.p(), 256, gs, cw.p(), cs.p()); }, 10);
        std::printf("%-32s %8.1f us\n", "27B gdn_conv T=256", us);
    }
    {
        Buf<float> x(gpu, randn(g, 5120)), w(gpu, randn(g, 5120)), o(gpu, 5120);
        double us = time_us([&](int) { gpu.rmsnorm(x.p(), 5120, w.p(), 1, 5120, 1e-6f, o.p(), 5120); }, 100);
        std::printf("%-32s %8.1f us\n", "rmsnorm 5120", us);
        Buf<float> logits(gpu, randn(g, 248320));
        Buf<int32_t> am(gpu, 1);
        us = time_us([&](int) { gpu.argmax(logits.p(), 1, 248320, am.p()); }, 100);
        std::printf("%-32s %8.1f us\n", "argmax 248320", us);
    }
}

}  // namespace
}  // namespace df::test
