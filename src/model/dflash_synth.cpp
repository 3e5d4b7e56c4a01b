// A random DFlash drafter of a target's shapes (dflash.h), for benchmarks.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "gguf/gguf.h"
#include "model/dflash.h"
#include "quant/dequant.h"

namespace df::model {

void write_random_dflash(const ModelConfig& t, const std::string& dir, int layers, uint64_t seed) {
    if (layers < 1) throw gguf::Error("dflash synth: at least one layer");
    if (t.n_recurrent() > 0) throw gguf::Error("dflash synth: the target must be attention-only (qwen3)");
    const int64_t E = t.n_embd, D = t.head_dim, F = t.n_ff, Hq = t.n_head, Hkv = t.n_head_kv, n = layers;
    std::vector<int> taps;
    for (int i = 0; i < layers; ++i)
        taps.push_back(layers == 1 ? 1 : static_cast<int>(std::lround(1 + i * static_cast<double>(t.n_layer - 4) / (layers - 1))));
    for (int& l : taps) l = std::clamp(l, 0, t.n_layer - 1);
    const nlohmann::json config = {
        {"architectures", {"DFlashDraftModel"}}, {"model_type", "qwen3"}, {"block_size", 16},
        {"dflash_config", {{"mask_token_id", std::min(151669, t.n_vocab - 1)}, {"target_layer_ids", taps}}},
        {"num_target_layers", t.n_layer}, {"hidden_size", E}, {"intermediate_size", F}, {"num_hidden_layers", n},
        {"num_attention_heads", Hq}, {"num_key_value_heads", Hkv}, {"head_dim", D}, {"rms_norm_eps", t.eps},
        {"rope_theta", t.rope_base}, {"hidden_act", "silu"}, {"attention_bias", false}, {"torch_dtype", "bfloat16"}};
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.f, 1.f);
    std::vector<SafeTensorData> data;
    auto add = [&](const std::string& name, std::vector<int64_t> shape, float scale, float offset) {
        int64_t count = 1;
        for (int64_t d : shape) count *= d;
        std::vector<uint8_t> bytes(2 * static_cast<size_t>(count));
        for (int64_t i = 0; i < count; ++i) {
            const uint16_t b = quant::f32_to_bf16(offset + scale * normal(rng));
            std::memcpy(&bytes[2 * static_cast<size_t>(i)], &b, 2);
        }
        data.push_back({name, "BF16", std::move(shape), std::move(bytes)});
    };
    const auto inv_sqrt = [](int64_t k) { return 1.f / std::sqrt(static_cast<float>(k)); };
    add("fc.weight", {E, n * E}, inv_sqrt(n * E), 0);
    add("hidden_norm.weight", {E}, 0.1f, 1);
    add("norm.weight", {E}, 0.1f, 1);
    for (int l = 0; l < layers; ++l) {
        const std::string p = "layers." + std::to_string(l) + ".";
        add(p + "input_layernorm.weight", {E}, 0.1f, 1);
        add(p + "post_attention_layernorm.weight", {E}, 0.1f, 1);
        add(p + "self_attn.q_proj.weight", {Hq * D, E}, inv_sqrt(E), 0);
        add(p + "self_attn.k_proj.weight", {Hkv * D, E}, inv_sqrt(E), 0);
        add(p + "self_attn.v_proj.weight", {Hkv * D, E}, inv_sqrt(E), 0);
        add(p + "self_attn.o_proj.weight", {E, Hq * D}, inv_sqrt(Hq * D), 0);
        add(p + "self_attn.q_norm.weight", {D}, 0.1f, 1);
        add(p + "self_attn.k_norm.weight", {D}, 0.1f, 1);
        add(p + "mlp.gate_proj.weight", {F, E}, inv_sqrt(E), 0);
        add(p + "mlp.up_proj.weight", {F, E}, inv_sqrt(E), 0);
        add(p + "mlp.down_proj.weight", {E, F}, inv_sqrt(F), 0);
    }
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/config.json") << config.dump(2) << "\n";
    const auto bytes = safetensors_bytes(data);
    data.clear();
    std::ofstream f(dir + "/model.safetensors", std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!f) throw gguf::Error("dflash synth: cannot write " + dir + "/model.safetensors");
}

}  // namespace df::model
