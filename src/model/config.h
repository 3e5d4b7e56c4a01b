// ModelConfig: the hyperparameters of a model, read from its GGUF keys and sized entirely from
// the file. A missing or inconsistent key is a df::gguf::Error naming it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace df::model {

struct ModelConfig {
    std::string arch;         // general.architecture ("qwen35", "qwen3")
    int n_layer = 0;          // block_count - nextn_predict_layers (MTP blocks are not run)
    int n_layer_nextn = 0;
    int n_embd = 0;
    int n_ff = 0;
    int n_head = 0;
    int n_head_kv = 0;
    int head_dim = 0;         // attention.key_length (= value_length)
    int n_rot = 0;            // rope.dimension_count (NeoX over the first n_rot dims)
    float rope_base = 10000.f;
    float eps = 1e-6f;
    int n_vocab = 0;          // rows of token_embd
    int n_ctx_train = 0;
    bool tied_output = false; // no output.weight: the LM head is token_embd
    bool attn_gated = false;  // qwen35: attn_q holds [query | gate] per head
    std::vector<bool> recurrent;  // per layer: Gated DeltaNet (true) or attention

    // Gated DeltaNet (qwen35 only)
    int ssm_conv = 0;         // conv taps
    int ssm_state = 0;        // Dk = Dv
    int ssm_k_heads = 0;      // group_count
    int ssm_v_heads = 0;      // time_step_rank
    int ssm_inner = 0;        // Hv * Dv

    int n_recurrent() const;
    int n_attention() const { return n_layer - n_recurrent(); }
    int q_dim() const { return n_head * head_dim; }
    int kv_dim() const { return n_head_kv * head_dim; }
    int ssm_channels() const { return (2 * ssm_k_heads + ssm_v_heads) * ssm_state; }

    // Reads and validates the keys of a known architecture; throws gguf::Error otherwise.
    static ModelConfig from_gguf(const gguf::File& f);
};

}  // namespace df::model
