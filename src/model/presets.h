// Synthetic model presets: the geometry and block-type mix of real models, as data.
//
// One row per preset in presets.cpp; synth.cpp turns a row into a tensor list. Nothing else
// switches on a preset's name.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "quant/types.h"

namespace df::model::synth {

// Which layers of a tensor role take TypeRule::alt instead of TypeRule::type. Both follow
// llama.cpp's llama_tensor_get_type, where the counter is the layer index for our layouts
// (one tensor of each role per layer, visited in layer order).
enum class LayerSel : uint8_t {
    none,          // every layer takes `type`
    first_eighth,  // i < n_layer / 8 (IQ2 mixes: the first ffn_down layers)
    more_bits,     // i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2 (Q4_K_M attn_v-like, ffn_down)
};

struct TypeRule {
    quant::Type type = quant::Type::F32;
    quant::Type alt = quant::Type::F32;
    LayerSel alt_when = LayerSel::none;
};

// Block type of each quantizable role. Norms, conv1d, ssm_a and ssm_dt.bias are always F32.
struct TypeMix {
    TypeRule token_embd{}, output{};
    TypeRule ffn_gate{}, ffn_up{}, ffn_down{};
    TypeRule attn_q{}, attn_k{}, attn_v{}, attn_output{};                   // attention layers
    TypeRule attn_qkv{}, attn_gate{}, ssm_out{}, ssm_alpha{}, ssm_beta{};   // Gated DeltaNet layers
};

struct Preset {
    std::string_view name;
    std::string_view arch;         // GGUF general.architecture: "qwen35" or "qwen3"
    std::string_view about;        // one line for --list
    int n_embd = 0, n_layer = 0, n_ff = 0;
    int n_head = 0, n_head_kv = 0, head_dim = 0;
    int n_rot = 0;                 // rope.dimension_count (qwen3: = head_dim, key not written)
    int n_vocab = 0, n_ctx = 0;
    float rope_base = 0;
    bool tied = false;             // no output.weight: the LM head is token_embd
    // Gated DeltaNet (qwen35 only)
    int ssm_k_heads = 0, ssm_v_heads = 0, ssm_state = 0, ssm_conv = 0, attn_interval = 0;
    uint32_t file_type = 0;        // general.file_type (llama_ftype) of the mix it mirrors
    TypeMix types;
};

std::span<const Preset> presets();
const Preset* find_preset(std::string_view name);  // nullptr when unknown

// The rule's type for layer il of n_layer (layer-less roles pass il = 0, n_layer = 1).
quant::Type rule_type(const TypeRule& r, int il, int n_layer);

}  // namespace df::model::synth
