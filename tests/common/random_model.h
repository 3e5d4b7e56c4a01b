// Small random qwen35 / qwen3 models with F32 weights, written with our GGUF writer, for
// differential tests against llama.cpp. Weight distributions follow the golden models' recipe
// (shared/golden/README.md) so activations stay O(1) through every layer.
#pragma once

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/golden.h"
#include "gguf/gguf.h"

namespace df::test {

struct RandomConfig {
    std::string arch = "qwen35";
    int n_layer = 4, n_embd = 128, n_ff = 192, n_head = 3, n_head_kv = 1, head_dim = 64, n_rot = 32;
    int ssm_k_heads = 2, ssm_v_heads = 4, ssm_state = 32, interval = 4;
    bool tied = false;
    float rope_base = 1e6f;
    uint64_t seed = 1;
};

inline std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
    std::vector<uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    return b;
}

// Writes the model to path; the vocabulary (1024 tokens) is copied from the tiny golden vocab.
inline void write_random_model(const RandomConfig& c, const std::string& path) {
    std::mt19937_64 rng(c.seed);
    std::normal_distribution<float> normal(0.f, 1.f);
    std::uniform_real_distribution<float> uni(0.f, 1.f);
    gguf::Writer w;
    const std::string p = c.arch + ".";
    const bool q35 = c.arch == "qwen35";
    auto vocab = gguf::File::open((golden_dir() / "tokenizer" / (q35 ? "qwen35-tiny-vocab.gguf" : "qwen3-tiny-vocab.gguf")).string());
    const int V = static_cast<int>(std::get<gguf::Array>(vocab->find("tokenizer.ggml.tokens")->v).items.size());
    w.set("general.architecture", gguf::Value::str(c.arch));
    w.set("general.name", gguf::Value::str("random-" + c.arch + "-" + std::to_string(c.seed)));
    for (const auto& kv : vocab->kv())
        if (kv.key.rfind("tokenizer.", 0) == 0) w.set(kv.key, kv.value);
    w.set(p + "context_length", gguf::Value::u32(4096));
    w.set(p + "embedding_length", gguf::Value::u32(c.n_embd));
    w.set(p + "block_count", gguf::Value::u32(c.n_layer));
    w.set(p + "feed_forward_length", gguf::Value::u32(c.n_ff));
    w.set(p + "attention.head_count", gguf::Value::u32(c.n_head));
    w.set(p + "attention.head_count_kv", gguf::Value::u32(c.n_head_kv));
    w.set(p + "attention.key_length", gguf::Value::u32(c.head_dim));
    w.set(p + "attention.value_length", gguf::Value::u32(c.head_dim));
    w.set(p + "attention.layer_norm_rms_epsilon", gguf::Value::f32(1e-6f));
    w.set(p + "rope.freq_base", gguf::Value::f32(c.rope_base));
    if (q35) {
        w.set(p + "rope.dimension_count", gguf::Value::u32(c.n_rot));
        // Text positions are equal in every section; the sections must cover n_rot / 2 pairs.
        const int half = c.n_rot / 2, s0 = (half + 2) / 3, s1 = (half - s0 + 1) / 2, s2 = half - s0 - s1;
        w.set(p + "rope.dimension_sections", gguf::Value::i32s({s0, s1, s2, 0}));
        w.set(p + "ssm.conv_kernel", gguf::Value::u32(4));
        w.set(p + "ssm.state_size", gguf::Value::u32(c.ssm_state));
        w.set(p + "ssm.group_count", gguf::Value::u32(c.ssm_k_heads));
        w.set(p + "ssm.time_step_rank", gguf::Value::u32(c.ssm_v_heads));
        w.set(p + "ssm.inner_size", gguf::Value::u32(c.ssm_v_heads * c.ssm_state));
        w.set(p + "full_attention_interval", gguf::Value::u32(c.interval));
    }
    auto matrix = [&](const std::string& name, int64_t in, int64_t out, float gain) {
        std::vector<float> v(static_cast<size_t>(in * out));
        const float sd = gain / std::sqrt(static_cast<float>(in));
        for (auto& x : v) x = normal(rng) * sd * (uni(rng) < 0.001f ? 4.f : 1.f);
        w.add_tensor(name, quant::Type::F32, {in, out}, f32_bytes(v));
    };
    auto vec = [&](const std::string& name, std::vector<int64_t> shape, auto gen) {
        int64_t n = 1;
        for (auto d : shape) n *= d;
        std::vector<float> v(static_cast<size_t>(n));
        for (auto& x : v) x = gen();
        w.add_tensor(name, quant::Type::F32, std::move(shape), f32_bytes(v));
    };
    auto norm = [&] { return 1.f + 0.1f * normal(rng); };
    const int E = c.n_embd, D = c.head_dim;
    matrix("token_embd.weight", E, V, c.tied ? 3.f : 1.f);
    vec("output_norm.weight", {E}, norm);
    if (!c.tied) matrix("output.weight", E, V, 3.f);
    for (int i = 0; i < c.n_layer; ++i) {
        const std::string b = "blk." + std::to_string(i) + ".";
        vec(b + "attn_norm.weight", {E}, norm);
        vec(b + (q35 ? "post_attention_norm.weight" : "ffn_norm.weight"), {E}, norm);
        matrix(b + "ffn_gate.weight", E, c.n_ff, 1.f);
        matrix(b + "ffn_up.weight", E, c.n_ff, 1.f);
        matrix(b + "ffn_down.weight", c.n_ff, E, 0.7f);
        const bool recurrent = q35 && (i + 1) % c.interval != 0;
        if (recurrent) {
            const int Dk = c.ssm_state, Hk = c.ssm_k_heads, Hv = c.ssm_v_heads, C = (2 * Hk + Hv) * Dk;
            matrix(b + "attn_qkv.weight", E, C, 1.f);
            matrix(b + "attn_gate.weight", E, Hv * Dk, 1.f);
            matrix(b + "ssm_alpha.weight", E, Hv, 0.5f);
            matrix(b + "ssm_beta.weight", E, Hv, 1.f);
            vec(b + "ssm_conv1d.weight", {4, C}, [&] { return uni(rng) - 0.5f; });
            vec(b + "ssm_dt.bias", {Hv}, [&] {
                const float dt = std::exp(std::log(1e-3f) + uni(rng) * (std::log(0.1f) - std::log(1e-3f)));
                return std::log(std::expm1(dt));  // softplus^-1
            });
            vec(b + "ssm_a", {Hv}, [&] { return -(1.f + 15.f * uni(rng)); });
            vec(b + "ssm_norm.weight", {Dk}, norm);
            matrix(b + "ssm_out.weight", Hv * Dk, E, 0.7f);
        } else {
            matrix(b + "attn_q.weight", E, (q35 ? 2 : 1) * c.n_head * D, 1.f);
            matrix(b + "attn_k.weight", E, c.n_head_kv * D, 1.f);
            matrix(b + "attn_v.weight", E, c.n_head_kv * D, 1.f);
            matrix(b + "attn_output.weight", c.n_head * D, E, 0.7f);
            vec(b + "attn_q_norm.weight", {D}, norm);
            vec(b + "attn_k_norm.weight", {D}, norm);
        }
    }
    w.write(path);
}

}  // namespace df::test
