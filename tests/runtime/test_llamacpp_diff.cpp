// Random-config differential test: our GGUF writer makes small random qwen35 / qwen3 models
// (odd head counts, GQA ratios, Hv != Hk, rope dims < head dim) with F32 weights, and llama.cpp
// itself (node-llama-cpp 3.22.1 = llama.cpp v0.5.0, tests/oracle) computes the reference logits
// with an F32 KV cache and flash attention off, so only summation order separates the two.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <unistd.h>

#include "common/random_model.h"
#include "diskformer/diskformer.h"

namespace {

namespace fs = std::filesystem;

fs::path oracle_dir() { return fs::path(DF_SOURCE_DIR) / "tests" / "oracle"; }

bool oracle_available() {
    return fs::exists(oracle_dir() / "node_modules" / "node-llama-cpp") && std::system("node --version >/dev/null 2>&1") == 0;
}

double nmse(const float* a, const float* b, int n) {
    double num = 0, den = 0;
    for (int i = 0; i < n; ++i) {
        num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
        den += double(b[i]) * b[i];
    }
    return num / den;
}

std::vector<df::test::RandomConfig> configs() {
    std::vector<df::test::RandomConfig> out;
    df::test::RandomConfig a;  // qwen35: Hq 3 / Hkv 1, Hk 2 / Hv 4, rope 32 of 64
    a.seed = 11;
    out.push_back(a);
    df::test::RandomConfig b;  // qwen35: Hq 5 / Hkv 5, Hk 3 / Hv 3, rope 16 of 32, interval 2
    b.seed = 12;
    b.n_embd = 96;
    b.n_head = 5;
    b.n_head_kv = 5;
    b.head_dim = 32;
    b.n_rot = 16;
    b.ssm_k_heads = 3;
    b.ssm_v_heads = 3;
    b.ssm_state = 16;
    b.interval = 2;
    b.n_layer = 3;
    out.push_back(b);
    df::test::RandomConfig c;  // qwen35: Hq 6 / Hkv 2, Hk 1 / Hv 3, state 64
    c.seed = 13;
    c.n_head = 6;
    c.n_head_kv = 2;
    c.ssm_k_heads = 1;
    c.ssm_v_heads = 3;
    c.ssm_state = 64;
    c.interval = 3;
    out.push_back(c);
    df::test::RandomConfig d;  // qwen3: Hq 6 / Hkv 3, head 64, tied head
    d.arch = "qwen3";
    d.seed = 21;
    d.n_head = 6;
    d.n_head_kv = 3;
    d.tied = true;
    out.push_back(d);
    df::test::RandomConfig e;  // qwen3: Hq 7 / Hkv 1, head 32, untied
    e.arch = "qwen3";
    e.seed = 22;
    e.n_embd = 160;
    e.n_head = 7;
    e.n_head_kv = 1;
    e.head_dim = 32;
    e.n_layer = 3;
    out.push_back(e);
    return out;
}

class LlamaCppDiff : public ::testing::TestWithParam<int> {};

TEST_P(LlamaCppDiff, LogitsMatchLlamaCpp) {
    if (!oracle_available())
        GTEST_SKIP() << "llama.cpp oracle not installed (scripts/test.sh runs `npm install` in tests/oracle)";
    const auto cfg = configs()[GetParam()];
    const fs::path dir = fs::temp_directory_path() / ("df_diff_" + std::to_string(::getpid()) + "_" + std::to_string(GetParam()));
    fs::create_directories(dir);
    const std::string model = (dir / "model.gguf").string();
    df::test::write_random_model(cfg, model);

    std::mt19937 rng(static_cast<uint32_t>(cfg.seed));
    std::vector<int32_t> ids(48);
    for (auto& t : ids) t = static_cast<int32_t>(rng() % 974);  // ordinary tokens
    std::ofstream(dir / "ids.json") << nlohmann::json(ids).dump();
    const std::string cmd = "node " + (oracle_dir() / "logits.mjs").string() + " " + model + " " +
                            (dir / "ids.json").string() + " " + (dir / "ref.f32").string();
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    const auto ref = df::test::read_f32(dir / "ref.f32");

    diskformer::ModelOptions mo;
    mo.backend = diskformer::BackendKind::cpu;
    auto m = diskformer::Model::load(model, mo);
    const int V = m->info().n_vocab;
    ASSERT_EQ(ref.size(), ids.size() * V);
    for (int chunk : {1, 16}) {
        diskformer::Session s(m, {.ctx = 256, .chunk = chunk, .kv_type = diskformer::KvType::f32});
        std::vector<float> got(ids.size() * V);
        s.append(ids, got.data());
        double worst = 0;
        int top1 = 0;
        for (size_t t = 0; t < ids.size(); ++t) {
            const float* a = got.data() + t * V;
            const float* b = ref.data() + t * V;
            worst = std::max(worst, nmse(a, b, V));
            top1 += std::max_element(a, a + V) - a == std::max_element(b, b + V) - b;
        }
        std::printf("[%s seed %llu] chunk %d: worst NMSE vs llama.cpp %.3g, top-1 %d/%zu\n", cfg.arch.c_str(),
                    static_cast<unsigned long long>(cfg.seed), chunk, worst, top1, ids.size());
        EXPECT_LE(worst, chunk == 1 ? 1e-8 : 1e-6) << "chunk " << chunk;
        EXPECT_EQ(top1, static_cast<int>(ids.size()));
    }
    fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Random, LlamaCppDiff, ::testing::Range(0, static_cast<int>(configs().size())));

}  // namespace
