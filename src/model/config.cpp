#include "model/config.h"

#include <cmath>
#include <optional>
#include <string>

namespace df::model {
namespace {

[[noreturn]] void bad(const std::string& key, const std::string& what) {
    throw gguf::Error("model config: key '" + key + "': " + what);
}

int positive(const gguf::File& f, const std::string& key) {
    const auto v = f.get<uint32_t>(key);
    if (v == 0 || v > (1u << 24)) bad(key, "must be in 1.." + std::to_string(1u << 24) + ", got " + std::to_string(v));
    return static_cast<int>(v);
}

// Keys like head_count may also be per-layer arrays in GGUF; our architectures use one value, so
// an array must be uniform.
int uniform(const gguf::File& f, const std::string& key, std::optional<int> fallback = std::nullopt) {
    const gguf::Value* v = f.find(key);
    if (!v) {
        if (fallback) return *fallback;
        bad(key, "missing");
    }
    if (v->type == gguf::ValueType::ARRAY) {
        const auto xs = f.get<std::vector<int32_t>>(key);
        if (xs.empty()) bad(key, "empty array");
        for (int x : xs)
            if (x != xs[0]) bad(key, "per-layer values differ; only uniform layers are supported");
        if (xs[0] <= 0) bad(key, "must be positive");
        return xs[0];
    }
    return positive(f, key);
}

}  // namespace

int ModelConfig::n_recurrent() const {
    int n = 0;
    for (bool r : recurrent) n += r;
    return n;
}

ModelConfig ModelConfig::from_gguf(const gguf::File& f) {
    ModelConfig c;
    c.arch = f.get<std::string>("general.architecture");
    if (c.arch != "qwen35" && c.arch != "qwen3")
        throw gguf::Error("model config: architecture '" + c.arch + "' is not supported (supported: qwen35, qwen3)");
    const std::string p = c.arch + ".";

    const int n_all = positive(f, p + "block_count");
    c.n_layer_nextn = static_cast<int>(f.get_or<uint32_t>(p + "nextn_predict_layers", 0));
    if (c.n_layer_nextn >= n_all) bad(p + "nextn_predict_layers", "must be below block_count");
    c.n_layer = n_all - c.n_layer_nextn;
    c.n_embd = positive(f, p + "embedding_length");
    c.n_ff = uniform(f, p + "feed_forward_length");
    c.n_head = uniform(f, p + "attention.head_count");
    c.n_head_kv = uniform(f, p + "attention.head_count_kv", c.n_head);
    if (c.n_head % c.n_head_kv != 0)
        bad(p + "attention.head_count_kv", "head_count " + std::to_string(c.n_head) + " is not a multiple of " + std::to_string(c.n_head_kv));
    c.head_dim = static_cast<int>(f.get_or<uint32_t>(p + "attention.key_length", static_cast<uint32_t>(c.n_embd / c.n_head)));
    const int v_len = static_cast<int>(f.get_or<uint32_t>(p + "attention.value_length", static_cast<uint32_t>(c.head_dim)));
    if (c.head_dim <= 0 || c.head_dim > 1024) bad(p + "attention.key_length", "must be in 1..1024");
    if (v_len != c.head_dim) bad(p + "attention.value_length", "must equal key_length " + std::to_string(c.head_dim));
    c.n_rot = static_cast<int>(f.get_or<uint32_t>(p + "rope.dimension_count", static_cast<uint32_t>(c.head_dim)));
    if (c.n_rot <= 0 || c.n_rot > c.head_dim || c.n_rot % 2)
        bad(p + "rope.dimension_count", "must be even and in 2.." + std::to_string(c.head_dim) + ", got " + std::to_string(c.n_rot));
    c.rope_base = f.get_or<float>(p + "rope.freq_base", 10000.f);
    if (!(c.rope_base > 0.f) || !std::isfinite(c.rope_base)) bad(p + "rope.freq_base", "must be positive");
    c.eps = f.get<float>(p + "attention.layer_norm_rms_epsilon");
    if (!(c.eps > 0.f) || !std::isfinite(c.eps)) bad(p + "attention.layer_norm_rms_epsilon", "must be positive");
    c.n_ctx_train = static_cast<int>(f.get_or<uint32_t>(p + "context_length", 4096));

    const auto* embd = f.find_tensor("token_embd.weight");
    if (embd) {
        if (embd->shape.size() != 2 || embd->shape[0] != c.n_embd)
            throw gguf::Error("model config: tensor 'token_embd.weight' must be [" + std::to_string(c.n_embd) + ", n_vocab]");
        c.n_vocab = static_cast<int>(embd->shape[1]);
    } else if (auto toks = f.find("tokenizer.ggml.tokens"); toks && toks->type == gguf::ValueType::ARRAY) {
        c.n_vocab = static_cast<int>(std::get<gguf::Array>(toks->v).items.size());
    }
    c.tied_output = f.find_tensor("output.weight") == nullptr;

    c.recurrent.assign(c.n_layer, false);
    if (c.arch == "qwen35") {
        c.attn_gated = true;
        c.ssm_conv = positive(f, p + "ssm.conv_kernel");
        c.ssm_state = positive(f, p + "ssm.state_size");
        c.ssm_k_heads = positive(f, p + "ssm.group_count");
        c.ssm_v_heads = positive(f, p + "ssm.time_step_rank");
        c.ssm_inner = positive(f, p + "ssm.inner_size");
        if (c.ssm_v_heads % c.ssm_k_heads != 0)
            bad(p + "ssm.time_step_rank", "value heads " + std::to_string(c.ssm_v_heads) + " must be a multiple of group_count " + std::to_string(c.ssm_k_heads));
        if (c.ssm_inner != c.ssm_v_heads * c.ssm_state)
            bad(p + "ssm.inner_size", "must equal time_step_rank * state_size = " + std::to_string(c.ssm_v_heads * c.ssm_state));
        if (c.ssm_conv < 2 || c.ssm_conv > 16) bad(p + "ssm.conv_kernel", "must be in 2..16");
        if (const gguf::Value* rl = f.find(p + "attention.recurrent_layers")) {
            if (rl->type == gguf::ValueType::ARRAY) {
                const auto xs = f.get<std::vector<bool>>(p + "attention.recurrent_layers");
                if (static_cast<int>(xs.size()) < c.n_layer)
                    bad(p + "attention.recurrent_layers", "has " + std::to_string(xs.size()) + " entries for " + std::to_string(c.n_layer) + " layers");
                for (int i = 0; i < c.n_layer; ++i) c.recurrent[i] = xs[i];
            } else {
                const bool all = f.get<bool>(p + "attention.recurrent_layers");
                c.recurrent.assign(c.n_layer, all);
            }
        } else {
            const int interval = static_cast<int>(f.get_or<uint32_t>(p + "full_attention_interval", 4));
            if (interval <= 0) bad(p + "full_attention_interval", "must be positive");
            for (int i = 0; i < c.n_layer; ++i) c.recurrent[i] = (i + 1) % interval != 0;
        }
    }
    return c;
}

}  // namespace df::model
