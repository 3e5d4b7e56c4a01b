// A random DFlash drafter for the tiny golden qwen3 models (n_embd 256, 4 layers): its
// config.json text and bf16 weights (with the floats they round to, for references).
#pragma once

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "model/safetensors.h"
#include "quant/dequant.h"

namespace df::test {

struct DflashSpec {
    int E = 256, L = 2, Hq = 4, Hkv = 2, D = 64, F = 96, K = 16, mask = 1000;
    std::vector<int> taps{0, 2};
    double theta = 1e6, eps = 1e-6;
};

inline std::string dflash_config(const DflashSpec& s, const std::string& extra = "") {
    std::string taps;
    for (int t : s.taps) taps += (taps.empty() ? "" : ", ") + std::to_string(t);
    return R"({"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "block_size": )" + std::to_string(s.K) +
           R"(, "dflash_config": {"mask_token_id": )" + std::to_string(s.mask) + R"(, "target_layer_ids": [)" + taps +
           R"(]}, "num_target_layers": 4, "hidden_size": )" + std::to_string(s.E) + R"(, "intermediate_size": )" +
           std::to_string(s.F) + R"(, "num_hidden_layers": )" + std::to_string(s.L) + R"(, "num_attention_heads": )" +
           std::to_string(s.Hq) + R"(, "num_key_value_heads": )" + std::to_string(s.Hkv) + R"(, "head_dim": )" +
           std::to_string(s.D) + R"(, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "attention_bias": false,
           "hidden_act": "silu", "layer_types": ["full_attention", "full_attention"], "tie_word_embeddings": false,
           "vocab_size": 151936, "torch_dtype": "bfloat16")" + extra + "}";
}

// Random bf16 weights, kept as the floats they round to for the reference.
struct DflashWeights {
    std::map<std::string, std::vector<double>> f;
    std::vector<model::SafeTensorData> data;
};

inline DflashWeights random_dflash(const DflashSpec& s, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> normal(0, 1);
    DflashWeights w;
    auto add = [&](const std::string& name, std::vector<int64_t> shape, double scale, double offset) {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        std::vector<uint8_t> bytes(2 * static_cast<size_t>(n));
        std::vector<double> vals(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) {
            const uint16_t b = quant::f32_to_bf16(static_cast<float>(offset + scale * normal(rng)));
            std::memcpy(&bytes[2 * static_cast<size_t>(i)], &b, 2);
            vals[static_cast<size_t>(i)] = quant::bf16_to_f32(b);
        }
        w.f[name] = vals;
        w.data.push_back({name, "BF16", shape, bytes});
    };
    const int64_t T = static_cast<int64_t>(s.taps.size());
    add("fc.weight", {s.E, T * s.E}, 1 / std::sqrt(double(T * s.E)), 0);
    add("hidden_norm.weight", {s.E}, 0.1, 1);
    add("norm.weight", {s.E}, 0.1, 1);
    for (int l = 0; l < s.L; ++l) {
        const std::string p = "layers." + std::to_string(l) + ".";
        add(p + "input_layernorm.weight", {s.E}, 0.1, 1);
        add(p + "post_attention_layernorm.weight", {s.E}, 0.1, 1);
        add(p + "self_attn.q_proj.weight", {s.Hq * s.D, s.E}, 1 / std::sqrt(double(s.E)), 0);
        add(p + "self_attn.k_proj.weight", {s.Hkv * s.D, s.E}, 1 / std::sqrt(double(s.E)), 0);
        add(p + "self_attn.v_proj.weight", {s.Hkv * s.D, s.E}, 1 / std::sqrt(double(s.E)), 0);
        add(p + "self_attn.o_proj.weight", {s.E, s.Hq * s.D}, 1 / std::sqrt(double(s.Hq * s.D)), 0);
        add(p + "self_attn.q_norm.weight", {s.D}, 0.1, 1);
        add(p + "self_attn.k_norm.weight", {s.D}, 0.1, 1);
        add(p + "mlp.gate_proj.weight", {s.F, s.E}, 1 / std::sqrt(double(s.E)), 0);
        add(p + "mlp.up_proj.weight", {s.F, s.E}, 1 / std::sqrt(double(s.E)), 0);
        add(p + "mlp.down_proj.weight", {s.E, s.F}, 1 / std::sqrt(double(s.F)), 0);
    }
    return w;
}

// Writes config.json and model.safetensors into a fresh temp directory and returns it.
inline std::filesystem::path write_dflash_dir(const DflashSpec& s, uint64_t seed) {
    const auto dir = std::filesystem::temp_directory_path() / ("df_dflash_" + std::to_string(::getpid()) + "_" + std::to_string(seed));
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "config.json") << dflash_config(s);
    const auto bytes = model::safetensors_bytes(random_dflash(s, seed).data);
    std::ofstream(dir / "model.safetensors", std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    return dir;
}

}  // namespace df::test
