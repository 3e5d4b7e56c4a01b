// The whole engine against llama.cpp's f32-twin references (tests/golden or ../shared/golden).
//
// Contract (DESIGN.md numerics): with an f32 KV cache, per-position NMSE of the logits
// Σ(a−b)²/Σb² ≤ 1e-8 token by token and ≤ 1e-6 with chunked prefill, identical greedy
// continuation; with the f16 cache NMSE ≤ 1e-6 and top-1 agreement ≥ 98 %.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "common/golden.h"
#include "diskformer/diskformer.h"

namespace {

using df::test::golden_dir;

struct Golden {
    std::string name;
    std::vector<int32_t> prompt, greedy;
    std::vector<float> logits;  // [prompt, vocab]
    int vocab = 0;
};

std::vector<std::string> golden_models() {
    std::vector<std::string> names;
    const auto index = nlohmann::json::parse(df::test::read_file(golden_dir() / "models" / "index.json"));
    for (const auto& m : index["models"]) {
        const std::string n = m["name"];
        if (std::filesystem::exists(golden_dir() / "models" / (n + ".gguf"))) names.push_back(n);
    }
    return names;
}

Golden load_golden(const std::string& name) {
    Golden g;
    g.name = name;
    const auto dir = golden_dir() / "models";
    const auto j = nlohmann::json::parse(df::test::read_file(dir / (name + ".greedy_f32w.json")));
    g.prompt = j["prompt"].get<std::vector<int32_t>>();
    g.greedy = j["generated"].get<std::vector<int32_t>>();
    g.logits = df::test::read_f32(dir / (name + ".logits_f32w.f32"));
    g.vocab = static_cast<int>(g.logits.size() / g.prompt.size());
    return g;
}

std::string model_path(const std::string& name) { return (golden_dir() / "models" / (name + ".gguf")).string(); }

std::shared_ptr<diskformer::Model> load(const std::string& name) {
    diskformer::ModelOptions o;
    o.backend = diskformer::BackendKind::cpu;
    return diskformer::Model::load(model_path(name), o);
}

std::vector<float> run_logits(const std::shared_ptr<diskformer::Model>& m, const std::vector<int32_t>& prompt, int chunk,
                              diskformer::KvType kv) {
    diskformer::Session s(m, {.ctx = 512, .chunk = chunk, .kv_type = kv});
    std::vector<float> out(prompt.size() * m->info().n_vocab);
    s.append(prompt, out.data());
    return out;
}

double nmse(const float* a, const float* b, int n) {
    double num = 0, den = 0;
    for (int i = 0; i < n; ++i) {
        num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
        den += double(b[i]) * b[i];
    }
    return num / den;
}

int argmax(const float* x, int n) { return static_cast<int>(std::max_element(x, x + n) - x); }

struct Agreement {
    double worst_nmse = 0;
    int top1 = 0;
};

Agreement compare(const std::vector<float>& got, const Golden& g) {
    Agreement a;
    const int P = static_cast<int>(g.prompt.size());
    for (int t = 0; t < P; ++t) {
        const float* x = got.data() + static_cast<size_t>(t) * g.vocab;
        const float* r = g.logits.data() + static_cast<size_t>(t) * g.vocab;
        a.worst_nmse = std::max(a.worst_nmse, nmse(x, r, g.vocab));
        a.top1 += argmax(x, g.vocab) == argmax(r, g.vocab);
    }
    return a;
}

class GoldenModel : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenModel, TokenByTokenF32KvMatchesTwin) {
    const Golden g = load_golden(GetParam());
    auto m = load(g.name);
    ASSERT_EQ(m->info().n_vocab, g.vocab);
    const auto a = compare(run_logits(m, g.prompt, 1, diskformer::KvType::f32), g);
    std::printf("[%s] chunk 1, f32 KV: worst NMSE %.3g, top-1 %d/%zu\n", g.name.c_str(), a.worst_nmse, a.top1, g.prompt.size());
    EXPECT_LE(a.worst_nmse, 1e-8);
    EXPECT_EQ(a.top1, static_cast<int>(g.prompt.size()));
}

TEST_P(GoldenModel, ChunkedF32KvMatchesTwin) {
    const Golden g = load_golden(GetParam());
    auto m = load(g.name);
    const auto a = compare(run_logits(m, g.prompt, 256, diskformer::KvType::f32), g);
    std::printf("[%s] chunk 256, f32 KV: worst NMSE %.3g, top-1 %d/%zu\n", g.name.c_str(), a.worst_nmse, a.top1, g.prompt.size());
    EXPECT_LE(a.worst_nmse, 1e-6);
}

TEST_P(GoldenModel, GreedyContinuationEqualsTwin) {
    const Golden g = load_golden(GetParam());
    auto m = load(g.name);
    diskformer::Session s(m, {.ctx = 512, .chunk = 256, .kv_type = diskformer::KvType::f32});
    s.append(g.prompt);
    std::vector<int32_t> gen{s.argmax()};
    while (gen.size() < g.greedy.size()) gen.push_back(s.step(gen.back()));
    EXPECT_EQ(gen, g.greedy);
}

TEST_P(GoldenModel, F16KvWithinContract) {
    const Golden g = load_golden(GetParam());
    auto m = load(g.name);
    const auto a = compare(run_logits(m, g.prompt, 256, diskformer::KvType::f16), g);
    std::printf("[%s] chunk 256, f16 KV: worst NMSE %.3g, top-1 %d/%zu\n", g.name.c_str(), a.worst_nmse, a.top1, g.prompt.size());
    EXPECT_LE(a.worst_nmse, 1e-6);
    EXPECT_GE(a.top1, static_cast<int>(std::ceil(0.98 * g.prompt.size())));
}

TEST_P(GoldenModel, ChunkSizesAgree) {
    const Golden g = load_golden(GetParam());
    auto m = load(g.name);
    const auto ref = run_logits(m, g.prompt, 256, diskformer::KvType::f32);
    for (int chunk : {1, 7, 64}) {
        const auto got = run_logits(m, g.prompt, chunk, diskformer::KvType::f32);
        double worst = 0;
        for (size_t t = 0; t < g.prompt.size(); ++t)
            worst = std::max(worst, nmse(got.data() + t * g.vocab, ref.data() + t * g.vocab, g.vocab));
        EXPECT_LE(worst, 1e-10) << "chunk " << chunk;
    }
}

TEST_P(GoldenModel, PrefillThenStepEqualsOnePrefill) {
    const Golden g = load_golden(GetParam());
    auto m = load(g.name);
    const auto ref = run_logits(m, g.prompt, 256, diskformer::KvType::f32);
    diskformer::Session s(m, {.ctx = 512, .chunk = 256, .kv_type = diskformer::KvType::f32});
    const size_t half = g.prompt.size() / 2;
    s.append(std::span(g.prompt).first(half));
    for (size_t t = half; t < g.prompt.size(); ++t) {
        s.step(g.prompt[t]);
        const auto l = s.logits();
        EXPECT_LE(nmse(l.data(), ref.data() + t * g.vocab, g.vocab), 1e-10) << "position " << t;
    }
}

INSTANTIATE_TEST_SUITE_P(Golden, GoldenModel, ::testing::ValuesIn(golden_models()),
                         [](const auto& p) { return p.param; });

TEST(Session, ContextFullNamesTheLimit) {
    auto m = load(golden_models().front());
    diskformer::Session s(m, {.ctx = 8, .chunk = 4});
    std::vector<int32_t> ids(9, 1);
    try {
        s.append(ids);
        FAIL() << "expected a context-full error";
    } catch (const diskformer::Error& e) {
        EXPECT_NE(std::string(e.what()).find("context of 8 tokens"), std::string::npos) << e.what();
    }
}

TEST(Session, PrefixReuseExtendsTheCache) {
    const Golden g = load_golden(golden_models().front());
    auto m = load(g.name);
    diskformer::Session s(m, {.ctx = 512, .chunk = 16, .kv_type = diskformer::KvType::f32});
    std::vector<int32_t> first(g.prompt.begin(), g.prompt.begin() + 40);
    EXPECT_EQ(s.set_prompt(first), 0);
    EXPECT_EQ(s.set_prompt(g.prompt), 40);  // extends: only the rest is evaluated
    const auto l = s.logits();
    EXPECT_LE(nmse(l.data(), g.logits.data() + (g.prompt.size() - 1) * g.vocab, g.vocab), 1e-6);
    // A diverging prompt still yields the right logits (rewind or restart).
    std::vector<int32_t> other(g.prompt.begin(), g.prompt.begin() + 60);
    s.set_prompt(other);
    const auto l2 = s.logits();
    EXPECT_LE(nmse(l2.data(), g.logits.data() + 59 * g.vocab, g.vocab), 1e-6);
}

}  // namespace
