#include "model/presets.h"

namespace df::model::synth {
namespace {

using quant::Type;

constexpr TypeRule all(Type t) { return {t, t, LayerSel::none}; }
constexpr TypeRule split(Type t, Type alt, LayerSel when) { return {t, alt, when}; }

// One place for every layout. Geometry: shared/reference/presets.md (the two benchmark seeds and
// 0.8B) and llamacpp.md §8 (4B, 9B). Q4_K_M mixes follow llama.cpp's llama_tensor_get_type for
// ftype Q4_K_M: base Q4_K; output (or the tied token_embd) Q6_K; attn_v-like tensors (attn_v and
// the GDN attn_qkv share one counter) and ffn_down Q6_K on the "more bits" layers.
constexpr Preset kPresets[] = {
    {
        .name = "saluki-27b-iq2mix",
        .arch = "qwen35",
        .about = "Qwen3.5-27B geometry, imatrix IQ2 mix of eleven block types (benchmark seed)",
        .n_embd = 5120, .n_layer = 64, .n_ff = 17408,
        .n_head = 24, .n_head_kv = 4, .head_dim = 256, .n_rot = 64,
        .n_vocab = 248320, .n_ctx = 262144, .rope_base = 1e7f, .tied = false,
        .ssm_k_heads = 16, .ssm_v_heads = 48, .ssm_state = 128, .ssm_conv = 4, .attn_interval = 4,
        .file_type = 19,  // LLAMA_FTYPE_MOSTLY_IQ2_XXS
        .types = {
            .token_embd = all(Type::Q2_K), .output = all(Type::Q4_K),
            .ffn_gate = all(Type::IQ2_XXS), .ffn_up = all(Type::IQ2_XXS),
            .ffn_down = split(Type::IQ2_XXS, Type::Q2_K, LayerSel::first_eighth),
            .attn_q = all(Type::IQ3_XXS), .attn_k = all(Type::IQ4_XS), .attn_v = all(Type::Q5_K),
            .attn_output = all(Type::IQ3_S),
            .attn_qkv = all(Type::IQ2_XS), .attn_gate = all(Type::IQ2_XXS), .ssm_out = all(Type::IQ2_S),
            .ssm_alpha = all(Type::Q8_0), .ssm_beta = all(Type::Q8_0),
        },
    },
    {
        .name = "qwen3-4b-q8_0",
        .arch = "qwen3",
        .about = "Qwen3-4B, Q8_0, tied head (benchmark seed)",
        .n_embd = 2560, .n_layer = 36, .n_ff = 9728,
        .n_head = 32, .n_head_kv = 8, .head_dim = 128, .n_rot = 128,
        .n_vocab = 151936, .n_ctx = 40960, .rope_base = 1e6f, .tied = true,
        .file_type = 7,  // LLAMA_FTYPE_MOSTLY_Q8_0
        .types = {
            .token_embd = all(Type::Q8_0), .output = all(Type::Q8_0),
            .ffn_gate = all(Type::Q8_0), .ffn_up = all(Type::Q8_0), .ffn_down = all(Type::Q8_0),
            .attn_q = all(Type::Q8_0), .attn_k = all(Type::Q8_0), .attn_v = all(Type::Q8_0),
            .attn_output = all(Type::Q8_0),
        },
    },
    {
        .name = "qwen3.5-0.8b-q8_0",
        .arch = "qwen35",
        .about = "Qwen3.5-0.8B geometry, Q8_0, tied head (CPU measurements)",
        .n_embd = 1024, .n_layer = 24, .n_ff = 3584,
        .n_head = 8, .n_head_kv = 2, .head_dim = 256, .n_rot = 64,
        .n_vocab = 248320, .n_ctx = 262144, .rope_base = 1e7f, .tied = true,
        .ssm_k_heads = 16, .ssm_v_heads = 16, .ssm_state = 128, .ssm_conv = 4, .attn_interval = 4,
        .file_type = 7,
        .types = {
            .token_embd = all(Type::Q8_0), .output = all(Type::Q8_0),
            .ffn_gate = all(Type::Q8_0), .ffn_up = all(Type::Q8_0), .ffn_down = all(Type::Q8_0),
            .attn_q = all(Type::Q8_0), .attn_k = all(Type::Q8_0), .attn_v = all(Type::Q8_0),
            .attn_output = all(Type::Q8_0),
            .attn_qkv = all(Type::Q8_0), .attn_gate = all(Type::Q8_0), .ssm_out = all(Type::Q8_0),
            .ssm_alpha = all(Type::Q8_0), .ssm_beta = all(Type::Q8_0),
        },
    },
    {
        .name = "qwen3.5-4b-q4_k_m",
        .arch = "qwen35",
        .about = "Qwen3.5-4B geometry, llama.cpp Q4_K_M mix, tied head",
        .n_embd = 2560, .n_layer = 32, .n_ff = 9216,
        .n_head = 16, .n_head_kv = 4, .head_dim = 256, .n_rot = 64,
        .n_vocab = 248320, .n_ctx = 262144, .rope_base = 1e7f, .tied = true,
        .ssm_k_heads = 16, .ssm_v_heads = 32, .ssm_state = 128, .ssm_conv = 4, .attn_interval = 4,
        .file_type = 15,  // LLAMA_FTYPE_MOSTLY_Q4_K_M
        .types = {
            .token_embd = all(Type::Q6_K), .output = all(Type::Q6_K),
            .ffn_gate = all(Type::Q4_K), .ffn_up = all(Type::Q4_K),
            .ffn_down = split(Type::Q4_K, Type::Q6_K, LayerSel::more_bits),
            .attn_q = all(Type::Q4_K), .attn_k = all(Type::Q4_K),
            .attn_v = split(Type::Q4_K, Type::Q6_K, LayerSel::more_bits),
            .attn_output = all(Type::Q4_K),
            .attn_qkv = split(Type::Q4_K, Type::Q6_K, LayerSel::more_bits),
            .attn_gate = all(Type::Q4_K), .ssm_out = all(Type::Q4_K),
            .ssm_alpha = all(Type::Q4_K), .ssm_beta = all(Type::Q4_K),
        },
    },
    {
        // Untied: 8.95B parameters as published only add up with a separate output.weight.
        .name = "qwen3.5-9b-q4_k_m",
        .arch = "qwen35",
        .about = "Qwen3.5-9B geometry, llama.cpp Q4_K_M mix, untied head",
        .n_embd = 4096, .n_layer = 32, .n_ff = 12288,
        .n_head = 16, .n_head_kv = 4, .head_dim = 256, .n_rot = 64,
        .n_vocab = 248320, .n_ctx = 262144, .rope_base = 1e7f, .tied = false,
        .ssm_k_heads = 16, .ssm_v_heads = 32, .ssm_state = 128, .ssm_conv = 4, .attn_interval = 4,
        .file_type = 15,
        .types = {
            .token_embd = all(Type::Q4_K), .output = all(Type::Q6_K),
            .ffn_gate = all(Type::Q4_K), .ffn_up = all(Type::Q4_K),
            .ffn_down = split(Type::Q4_K, Type::Q6_K, LayerSel::more_bits),
            .attn_q = all(Type::Q4_K), .attn_k = all(Type::Q4_K),
            .attn_v = split(Type::Q4_K, Type::Q6_K, LayerSel::more_bits),
            .attn_output = all(Type::Q4_K),
            .attn_qkv = split(Type::Q4_K, Type::Q6_K, LayerSel::more_bits),
            .attn_gate = all(Type::Q4_K), .ssm_out = all(Type::Q4_K),
            .ssm_alpha = all(Type::Q4_K), .ssm_beta = all(Type::Q4_K),
        },
    },
    {
        // The golden q35_4L geometry with saluki's block types, so tests and the README demo
        // exercise the same kernels as the 27B benchmark at 2 MB.
        .name = "tiny-qwen35",
        .arch = "qwen35",
        .about = "toy qwen35: 4 layers, hidden 256, saluki's block types, real 1024-token BPE vocab",
        .n_embd = 256, .n_layer = 4, .n_ff = 768,
        .n_head = 4, .n_head_kv = 1, .head_dim = 256, .n_rot = 64,
        .n_vocab = 1024, .n_ctx = 4096, .rope_base = 1e7f, .tied = false,
        .ssm_k_heads = 2, .ssm_v_heads = 4, .ssm_state = 128, .ssm_conv = 4, .attn_interval = 4,
        .file_type = 19,
        .types = {
            .token_embd = all(Type::Q2_K), .output = all(Type::Q4_K),
            .ffn_gate = all(Type::IQ2_XXS), .ffn_up = all(Type::IQ2_XXS),
            .ffn_down = split(Type::IQ2_XXS, Type::Q2_K, LayerSel::first_eighth),
            .attn_q = all(Type::IQ3_XXS), .attn_k = all(Type::IQ4_XS), .attn_v = all(Type::Q5_K),
            .attn_output = all(Type::IQ3_S),
            .attn_qkv = all(Type::IQ2_XS), .attn_gate = all(Type::IQ2_XXS), .ssm_out = all(Type::IQ2_S),
            .ssm_alpha = all(Type::Q8_0), .ssm_beta = all(Type::Q8_0),
        },
    },
    {
        .name = "tiny-qwen3",
        .arch = "qwen3",
        .about = "toy qwen3: 4 layers, hidden 256, Q8_0 + K-quant FFN, tied, real 1024-token BPE vocab",
        .n_embd = 256, .n_layer = 4, .n_ff = 768,
        .n_head = 4, .n_head_kv = 2, .head_dim = 128, .n_rot = 128,
        .n_vocab = 1024, .n_ctx = 4096, .rope_base = 1e6f, .tied = true,
        .file_type = 7,
        .types = {
            .token_embd = all(Type::Q8_0), .output = all(Type::Q8_0),
            .ffn_gate = all(Type::Q4_K), .ffn_up = all(Type::Q4_K), .ffn_down = all(Type::Q6_K),
            .attn_q = all(Type::Q8_0), .attn_k = all(Type::Q8_0), .attn_v = all(Type::Q8_0),
            .attn_output = all(Type::Q8_0),
        },
    },
};

bool more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

}  // namespace

std::span<const Preset> presets() { return kPresets; }

const Preset* find_preset(std::string_view name) {
    for (const auto& p : kPresets)
        if (p.name == name) return &p;
    return nullptr;
}

quant::Type rule_type(const TypeRule& r, int il, int n_layer) {
    switch (r.alt_when) {
        case LayerSel::none: return r.type;
        case LayerSel::first_eighth: return il < n_layer / 8 ? r.alt : r.type;
        case LayerSel::more_bits: return more_bits(il, n_layer) ? r.alt : r.type;
    }
    return r.type;
}

}  // namespace df::model::synth
