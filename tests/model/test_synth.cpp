// Synthetic models: layouts match the published presets tensor for tensor, the small presets
// round-trip through gguf::File, generation is deterministic, and the weights have the
// statistics the recipe promises (finite, calibrated std, GDN parameters in range).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <unistd.h>
#include <vector>

#include "gguf/gguf.h"
#include "model/synth.h"
#include "quant/dequant.h"

namespace {

namespace fs = std::filesystem;
namespace synth = df::model::synth;
using df::quant::Type;

// ---- expectations written from shared/reference/presets.md, independently of presets.cpp ----

using Entry = std::tuple<std::string, std::vector<int64_t>, Type>;

uint64_t bytes_of(Type t, const std::vector<int64_t>& shape) {
    const auto& ti = df::quant::type_info(t);
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return static_cast<uint64_t>(n / ti.block_elems) * ti.block_bytes;
}

// presets.md "saluki-27b-iq2mix" table.
std::vector<Entry> saluki_expected() {
    std::vector<Entry> e;
    const int64_t E = 5120, V = 248320, F = 17408;
    e.push_back({"token_embd.weight", {E, V}, Type::Q2_K});
    e.push_back({"output.weight", {E, V}, Type::Q4_K});
    e.push_back({"output_norm.weight", {E}, Type::F32});
    for (int i = 0; i < 64; ++i) {
        const std::string b = "blk." + std::to_string(i) + ".";
        e.push_back({b + "attn_norm.weight", {E}, Type::F32});
        e.push_back({b + "post_attention_norm.weight", {E}, Type::F32});
        e.push_back({b + "ffn_gate.weight", {E, F}, Type::IQ2_XXS});
        e.push_back({b + "ffn_up.weight", {E, F}, Type::IQ2_XXS});
        e.push_back({b + "ffn_down.weight", {F, E}, i < 8 ? Type::Q2_K : Type::IQ2_XXS});
        if ((i + 1) % 4 != 0) {
            e.push_back({b + "attn_qkv.weight", {E, 10240}, Type::IQ2_XS});
            e.push_back({b + "attn_gate.weight", {E, 6144}, Type::IQ2_XXS});
            e.push_back({b + "ssm_out.weight", {6144, E}, Type::IQ2_S});
            e.push_back({b + "ssm_alpha.weight", {E, 48}, Type::Q8_0});
            e.push_back({b + "ssm_beta.weight", {E, 48}, Type::Q8_0});
            e.push_back({b + "ssm_conv1d.weight", {4, 10240}, Type::F32});
            e.push_back({b + "ssm_dt.bias", {48}, Type::F32});
            e.push_back({b + "ssm_a", {48}, Type::F32});
            e.push_back({b + "ssm_norm.weight", {128}, Type::F32});
        } else {
            e.push_back({b + "attn_q.weight", {E, 12288}, Type::IQ3_XXS});
            e.push_back({b + "attn_k.weight", {E, 1024}, Type::IQ4_XS});
            e.push_back({b + "attn_v.weight", {E, 1024}, Type::Q5_K});
            e.push_back({b + "attn_output.weight", {6144, E}, Type::IQ3_S});
            e.push_back({b + "attn_q_norm.weight", {256}, Type::F32});
            e.push_back({b + "attn_k_norm.weight", {256}, Type::F32});
        }
    }
    return e;
}

// presets.md "qwen3-4b-q8_0" table.
std::vector<Entry> qwen3_4b_expected() {
    std::vector<Entry> e;
    const int64_t E = 2560, V = 151936, F = 9728;
    e.push_back({"token_embd.weight", {E, V}, Type::Q8_0});
    e.push_back({"output_norm.weight", {E}, Type::F32});
    for (int i = 0; i < 36; ++i) {
        const std::string b = "blk." + std::to_string(i) + ".";
        for (const char* n : {"attn_norm.weight", "ffn_norm.weight"}) e.push_back({b + n, {E}, Type::F32});
        e.push_back({b + "attn_q.weight", {E, 4096}, Type::Q8_0});
        e.push_back({b + "attn_k.weight", {E, 1024}, Type::Q8_0});
        e.push_back({b + "attn_v.weight", {E, 1024}, Type::Q8_0});
        e.push_back({b + "attn_output.weight", {4096, E}, Type::Q8_0});
        e.push_back({b + "attn_q_norm.weight", {128}, Type::F32});
        e.push_back({b + "attn_k_norm.weight", {128}, Type::F32});
        e.push_back({b + "ffn_gate.weight", {E, F}, Type::Q8_0});
        e.push_back({b + "ffn_up.weight", {E, F}, Type::Q8_0});
        e.push_back({b + "ffn_down.weight", {F, E}, Type::Q8_0});
    }
    return e;
}

// presets.md "qwen3.5-0.8b-q8_0" paragraph.
std::vector<Entry> qwen35_08b_expected() {
    std::vector<Entry> e;
    const int64_t E = 1024, V = 248320, F = 3584;
    e.push_back({"token_embd.weight", {E, V}, Type::Q8_0});
    e.push_back({"output_norm.weight", {E}, Type::F32});
    for (int i = 0; i < 24; ++i) {
        const std::string b = "blk." + std::to_string(i) + ".";
        e.push_back({b + "attn_norm.weight", {E}, Type::F32});
        e.push_back({b + "post_attention_norm.weight", {E}, Type::F32});
        e.push_back({b + "ffn_gate.weight", {E, F}, Type::Q8_0});
        e.push_back({b + "ffn_up.weight", {E, F}, Type::Q8_0});
        e.push_back({b + "ffn_down.weight", {F, E}, Type::Q8_0});
        if ((i + 1) % 4 != 0) {
            e.push_back({b + "attn_qkv.weight", {E, 6144}, Type::Q8_0});
            e.push_back({b + "attn_gate.weight", {E, 2048}, Type::Q8_0});
            e.push_back({b + "ssm_out.weight", {2048, E}, Type::Q8_0});
            e.push_back({b + "ssm_alpha.weight", {E, 16}, Type::Q8_0});
            e.push_back({b + "ssm_beta.weight", {E, 16}, Type::Q8_0});
            e.push_back({b + "ssm_conv1d.weight", {4, 6144}, Type::F32});
            e.push_back({b + "ssm_dt.bias", {16}, Type::F32});
            e.push_back({b + "ssm_a", {16}, Type::F32});
            e.push_back({b + "ssm_norm.weight", {128}, Type::F32});
        } else {
            e.push_back({b + "attn_q.weight", {E, 4096}, Type::Q8_0});
            e.push_back({b + "attn_k.weight", {E, 512}, Type::Q8_0});
            e.push_back({b + "attn_v.weight", {E, 512}, Type::Q8_0});
            e.push_back({b + "attn_output.weight", {2048, E}, Type::Q8_0});
            e.push_back({b + "attn_q_norm.weight", {256}, Type::F32});
            e.push_back({b + "attn_k_norm.weight", {256}, Type::F32});
        }
    }
    return e;
}

std::map<std::string, std::pair<std::vector<int64_t>, Type>> as_map(const std::vector<Entry>& es) {
    std::map<std::string, std::pair<std::vector<int64_t>, Type>> m;
    for (const auto& [n, s, t] : es) m[n] = {s, t};
    return m;
}

void expect_layout(const synth::Layout& l, const std::vector<Entry>& expected) {
    ASSERT_EQ(l.tensors.size(), expected.size());
    const auto want = as_map(expected);
    ASSERT_EQ(want.size(), expected.size()) << "duplicate names in the expectation";
    std::set<std::string> seen;
    for (const auto& t : l.tensors) {
        ASSERT_TRUE(seen.insert(t.name).second) << "duplicate tensor " << t.name;
        const auto it = want.find(t.name);
        ASSERT_NE(it, want.end()) << "unexpected tensor " << t.name;
        EXPECT_EQ(t.shape, it->second.first) << t.name;
        EXPECT_EQ(t.type, it->second.second) << t.name << " is " << df::quant::type_name(t.type);
        EXPECT_EQ(t.bytes, bytes_of(t.type, t.shape)) << t.name;
    }
}

double mb(uint64_t b) { return static_cast<double>(b) / 1e6; }

uint64_t type_bytes(const synth::Layout& l, Type t) {
    for (const auto& [type, bytes] : l.bytes_by_type())
        if (type == t) return bytes;
    return 0;
}

const synth::TensorSpec& tensor(const synth::Layout& l, const std::string& name) {
    for (const auto& t : l.tensors)
        if (t.name == name) return t;
    throw std::runtime_error("no tensor " + name);
}

const df::gguf::Value* kv(const synth::Layout& l, const std::string& key) {
    for (const auto& k : l.kv)
        if (k.key == key) return &k.value;
    return nullptr;
}

struct TempDir {
    fs::path path = fs::temp_directory_path() / ("df_test_synth_" + std::to_string(::getpid()));
    TempDir() { fs::create_directories(path); }
    ~TempDir() { fs::remove_all(path); }
};

std::vector<char> slurp(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}

std::vector<float> dequant(const df::gguf::TensorInfo& t) {
    std::vector<float> out(static_cast<size_t>(t.elements()));
    df::quant::dequantize_row(t.type, t.data, out.data(), t.elements());
    return out;
}

std::pair<double, double> mean_std(const std::vector<float>& v) {
    double s = 0, s2 = 0;
    for (float x : v) s += x;
    const double m = s / v.size();
    for (float x : v) s2 += (x - m) * (x - m);
    return {m, std::sqrt(s2 / v.size())};
}

}  // namespace

// ---- layouts ----

TEST(Synth, PresetsAreListed) {
    std::set<std::string> names;
    for (const auto& p : synth::presets()) names.insert(std::string(p.name));
    for (const char* n : {"saluki-27b-iq2mix", "qwen3-4b-q8_0", "qwen3.5-0.8b-q8_0", "qwen3.5-4b-q4_k_m",
                          "qwen3.5-9b-q4_k_m", "tiny-qwen35", "tiny-qwen3"})
        EXPECT_TRUE(names.count(n)) << n;
    EXPECT_THROW(synth::plan({.preset = "no-such-model"}), std::invalid_argument);
}

TEST(Synth, SalukiMatchesPresetsMd) {
    const auto l = synth::plan({.preset = "saluki-27b-iq2mix"});
    expect_layout(l, saluki_expected());
    EXPECT_EQ(l.tensors.size(), 851u);
    EXPECT_EQ(std::lround(mb(l.tensor_bytes())), 7934);
    // presets.md "Bytes by type (MB)".
    const std::map<Type, long> by_type_mb = {
        {Type::IQ2_XXS, 4617}, {Type::IQ2_XS, 727}, {Type::Q4_K, 715}, {Type::Q2_K, 651},
        {Type::IQ2_S, 484},    {Type::IQ3_XXS, 385}, {Type::IQ3_S, 216}, {Type::Q5_K, 58},
        {Type::IQ4_XS, 45},    {Type::Q8_0, 25},    {Type::F32, 11}};
    EXPECT_EQ(l.bytes_by_type().size(), by_type_mb.size());
    for (const auto& [t, m] : by_type_mb) EXPECT_EQ(std::lround(mb(type_bytes(l, t))), m) << df::quant::type_name(t);
    const auto* bc = kv(l, "qwen35.block_count");
    ASSERT_NE(bc, nullptr);
    EXPECT_EQ(std::get<uint64_t>(bc->v), 64u);
}

TEST(Synth, Qwen3_4bMatchesPresetsMd) {
    const auto l = synth::plan({.preset = "qwen3-4b-q8_0"});
    expect_layout(l, qwen3_4b_expected());
    EXPECT_EQ(l.tensors.size(), 398u);
    // presets.md says "4,277 MB of tensor data", but its own table adds up to 4,274.4 MB; 4,277 MB
    // is the whole file (the padded 151,936-entry vocabulary adds 3.4 MB of metadata).
    EXPECT_EQ(l.tensor_bytes(), 4274448384u);
    EXPECT_EQ(type_bytes(l, Type::Q8_0), 4273664000u);
    EXPECT_EQ(synth::file_size(l) / 1000000, 4277u);
    EXPECT_EQ(kv(l, "qwen3.rope.dimension_count"), nullptr);
}

TEST(Synth, Qwen35_08bMatchesPresetsMd) {
    const auto l = synth::plan({.preset = "qwen3.5-0.8b-q8_0"});
    expect_layout(l, qwen35_08b_expected());
    EXPECT_EQ(l.tensors.size(), 320u);
    EXPECT_EQ(std::lround(mb(l.tensor_bytes())), 801);
}

TEST(Synth, Q4KMFollowsLlamaCppRules) {
    const auto l4 = synth::plan({.preset = "qwen3.5-4b-q4_k_m"});
    EXPECT_EQ(tensor(l4, "token_embd.weight").type, Type::Q6_K);  // tied: takes the output type
    EXPECT_THROW(tensor(l4, "output.weight"), std::runtime_error);
    // use_more_bits(i, 32): i < 4, i >= 28, or (i - 4) % 3 == 2. attn_qkv (GDN) and attn_v share it.
    EXPECT_EQ(tensor(l4, "blk.0.attn_qkv.weight").type, Type::Q6_K);
    EXPECT_EQ(tensor(l4, "blk.3.attn_v.weight").type, Type::Q6_K);
    EXPECT_EQ(tensor(l4, "blk.4.attn_qkv.weight").type, Type::Q4_K);
    EXPECT_EQ(tensor(l4, "blk.6.attn_qkv.weight").type, Type::Q6_K);
    EXPECT_EQ(tensor(l4, "blk.7.attn_v.weight").type, Type::Q4_K);
    EXPECT_EQ(tensor(l4, "blk.27.attn_v.weight").type, Type::Q6_K);
    EXPECT_EQ(tensor(l4, "blk.29.ffn_down.weight").type, Type::Q6_K);
    EXPECT_EQ(tensor(l4, "blk.10.ffn_down.weight").type, Type::Q4_K);
    EXPECT_EQ(tensor(l4, "blk.10.attn_gate.weight").type, Type::Q4_K);
    EXPECT_EQ(tensor(l4, "blk.10.ssm_alpha.weight").shape, (std::vector<int64_t>{2560, 32}));
    EXPECT_EQ(tensor(l4, "blk.10.ssm_conv1d.weight").shape, (std::vector<int64_t>{4, 8192}));
    EXPECT_EQ(tensor(l4, "blk.11.attn_q.weight").shape, (std::vector<int64_t>{2560, 8192}));
    int q6_down = 0;
    for (int i = 0; i < 32; ++i)
        q6_down += tensor(l4, "blk." + std::to_string(i) + ".ffn_down.weight").type == Type::Q6_K;
    EXPECT_EQ(q6_down, 16);
    EXPECT_EQ(l4.tensors.size(), 24u * 14 + 8 * 11 + 2);

    const auto l9 = synth::plan({.preset = "qwen3.5-9b-q4_k_m"});
    EXPECT_EQ(tensor(l9, "output.weight").type, Type::Q6_K);
    EXPECT_EQ(tensor(l9, "token_embd.weight").type, Type::Q4_K);
    EXPECT_EQ(tensor(l9, "blk.0.ffn_down.weight").shape, (std::vector<int64_t>{12288, 4096}));
    EXPECT_EQ(l9.tensors.size(), 24u * 14 + 8 * 11 + 3);
}

TEST(Synth, LayersTruncateKeepingThePattern) {
    const auto l = synth::plan({.preset = "saluki-27b-iq2mix", .layers = 8});
    EXPECT_EQ(std::get<uint64_t>(kv(l, "qwen35.block_count")->v), 8u);
    EXPECT_EQ(l.tensors.size(), 6u * 14 + 2 * 11 + 3);
    EXPECT_NO_THROW(tensor(l, "blk.7.attn_q.weight"));
    EXPECT_NO_THROW(tensor(l, "blk.6.attn_qkv.weight"));
    EXPECT_THROW(tensor(l, "blk.8.attn_norm.weight"), std::runtime_error);
    EXPECT_EQ(tensor(l, "blk.0.ffn_down.weight").type, Type::Q2_K);  // first 1/8 of 8 layers
    EXPECT_EQ(tensor(l, "blk.1.ffn_down.weight").type, Type::IQ2_XXS);
    EXPECT_THROW(synth::plan({.preset = "tiny-qwen3", .layers = 5}), std::invalid_argument);
}

TEST(Synth, SummaryNamesTypesAndTotal) {
    const auto s = synth::summary(synth::plan({.preset = "qwen3-4b-q8_0"}));
    EXPECT_NE(s.find("398 tensors"), std::string::npos) << s;
    EXPECT_NE(s.find("4,274,448,384"), std::string::npos) << s;
    EXPECT_NE(s.find("Q8_0"), std::string::npos) << s;
}

// ---- the generator ----

TEST(Synth, EveryBlockTypeCalibrates) {
    // 64 rows of 512: every block finite, std near the target, mean near zero.
    for (const auto& ti : df::quant::kTypeTable) {
        synth::TensorSpec t{.name = "w", .type = ti.type, .shape = {512, 64}, .init = synth::Init::linear, .gain = 1};
        t.bytes = bytes_of(t.type, t.shape);
        std::vector<uint8_t> raw(t.bytes);
        synth::fill(t, 42, 0, raw.data(), raw.size());
        std::vector<float> w(512 * 64);
        df::quant::dequantize_row(t.type, raw.data(), w.data(), static_cast<int64_t>(w.size()));
        for (float x : w) ASSERT_TRUE(std::isfinite(x)) << ti.name;
        const auto [m, s] = mean_std(w);
        // Power-of-two block scales (MXFP4) land within sqrt(2) of the target.
        const double tol = ti.type == Type::MXFP4 ? 0.45 : 0.12;
        EXPECT_NEAR(s / t.target_std(), 1.0, tol) << ti.name;
        EXPECT_LT(std::abs(m), 0.5 * s) << ti.name;
    }
}

TEST(Synth, FillIgnoresHowCallsAreSplit) {
    synth::TensorSpec t{.name = "w", .type = Type::Q8_0, .shape = {4096, 300}, .init = synth::Init::linear};
    t.bytes = bytes_of(t.type, t.shape);
    std::vector<uint8_t> whole(t.bytes), parts(t.bytes), threaded(t.bytes);
    synth::fill(t, 7, 0, whole.data(), t.bytes);
    for (uint64_t off = 0; off < t.bytes;) {
        const uint64_t n = std::min<uint64_t>(12345 + off % 777, t.bytes - off);
        synth::fill(t, 7, off, parts.data() + off, n);
        off += n;
    }
    synth::fill(t, 7, 0, threaded.data(), t.bytes, 3);
    EXPECT_EQ(whole, parts);
    EXPECT_EQ(whole, threaded);
    EXPECT_NE(synth::tensor_seed(1, "a"), synth::tensor_seed(1, "b"));
    EXPECT_NE(synth::tensor_seed(1, "a"), synth::tensor_seed(2, "a"));
}

// ---- the small presets, written and re-read ----

class SynthWrite : public ::testing::TestWithParam<const char*> {};

TEST_P(SynthWrite, RoundTripsAndIsWellScaled) {
    TempDir dir;
    const auto l = synth::plan({.preset = GetParam(), .seed = 5});
    const fs::path path = dir.path / "m.gguf";
    synth::write(l, path.string(), 2);
    EXPECT_EQ(fs::file_size(path), synth::file_size(l));
    const auto f = df::gguf::File::open(path.string());

    ASSERT_EQ(f->tensors().size(), l.tensors.size());
    for (size_t i = 0; i < l.tensors.size(); ++i) {
        const auto& want = l.tensors[i];
        const auto& got = f->tensors()[i];
        EXPECT_EQ(got.name, want.name);
        EXPECT_EQ(got.type, want.type) << want.name;
        EXPECT_EQ(got.shape, want.shape) << want.name;
        EXPECT_EQ(got.bytes, want.bytes) << want.name;
    }
    EXPECT_EQ(f->get<std::string>("general.architecture"), l.arch);
    EXPECT_EQ(f->get<uint32_t>(l.arch + ".block_count"), static_cast<uint32_t>(l.n_layer));
    EXPECT_EQ(f->get<std::vector<std::string>>("tokenizer.ggml.tokens").size(), static_cast<size_t>(l.n_vocab));

    for (size_t i = 0; i < l.tensors.size(); ++i) {
        const auto& spec = l.tensors[i];
        const auto w = dequant(f->tensors()[i]);
        for (float x : w) ASSERT_TRUE(std::isfinite(x)) << spec.name;
        const auto [m, s] = mean_std(w);
        switch (spec.init) {
            case synth::Init::linear:
                EXPECT_NEAR(s / spec.target_std(), 1.0, 0.15) << spec.name;
                EXPECT_LT(std::abs(m), 0.2 * s) << spec.name;
                break;
            case synth::Init::norm:
                EXPECT_NEAR(m, 1.0, 0.05) << spec.name;
                EXPECT_NEAR(s, 0.1, 0.04) << spec.name;
                break;
            case synth::Init::conv:
                for (float x : w) EXPECT_TRUE(x >= -0.5f && x <= 0.5f) << spec.name;
                break;
            case synth::Init::ssm_a:
                for (float x : w) EXPECT_TRUE(x >= -16.f && x <= -1.f) << spec.name;
                break;
            case synth::Init::dt_bias:
                for (float x : w) {
                    const double dt = std::log1p(std::exp(static_cast<double>(x)));  // softplus
                    EXPECT_TRUE(dt >= 0.99e-3 && dt <= 0.101) << spec.name << " dt " << dt;
                }
                break;
        }
    }
}

TEST_P(SynthWrite, SameSeedSameBytes) {
    TempDir dir;
    const auto a = synth::plan({.preset = GetParam(), .seed = 11});
    synth::write(a, (dir.path / "a.gguf").string(), 1);
    synth::write(a, (dir.path / "b.gguf").string(), 2);
    synth::write(synth::plan({.preset = GetParam(), .seed = 12}), (dir.path / "c.gguf").string(), 2);
    const auto fa = slurp(dir.path / "a.gguf");
    EXPECT_EQ(fa, slurp(dir.path / "b.gguf"));
    EXPECT_NE(fa, slurp(dir.path / "c.gguf"));
}

INSTANTIATE_TEST_SUITE_P(Tiny, SynthWrite, ::testing::Values("tiny-qwen35", "tiny-qwen3"));

TEST(Synth, TinyVocabularyIsTheGoldenOne) {
    // The built-in vocabulary at 1024 tokens is the golden tiny vocabulary, token for token.
    for (const auto& [preset, file] : {std::pair{"tiny-qwen35", "qwen35-tiny-vocab.gguf"},
                                       std::pair{"tiny-qwen3", "qwen3-tiny-vocab.gguf"}}) {
        const auto ref = df::gguf::File::open(std::string(DF_SOURCE_DIR) + "/tests/golden/tokenizer/" + file);
        const auto l = synth::plan({.preset = preset});
        for (const char* key : {"tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.chat_template"})
            EXPECT_EQ(std::get<std::string>(kv(l, key)->v), ref->get<std::string>(key)) << preset << " " << key;
        for (const char* key : {"tokenizer.ggml.tokens", "tokenizer.ggml.merges"}) {
            std::vector<std::string> got;
            for (const auto& v : std::get<df::gguf::Array>(kv(l, key)->v).items) got.push_back(std::get<std::string>(v.v));
            EXPECT_EQ(got, ref->get<std::vector<std::string>>(key)) << preset << " " << key;
        }
        std::vector<int32_t> types;
        for (const auto& v : std::get<df::gguf::Array>(kv(l, "tokenizer.ggml.token_type")->v).items)
            types.push_back(static_cast<int32_t>(std::get<int64_t>(v.v)));
        EXPECT_EQ(types, ref->get<std::vector<int32_t>>("tokenizer.ggml.token_type")) << preset;
        for (const char* key : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                                "tokenizer.ggml.padding_token_id"})
            EXPECT_EQ(std::get<uint64_t>(kv(l, key)->v), ref->get<uint32_t>(key)) << preset << " " << key;
    }
}
