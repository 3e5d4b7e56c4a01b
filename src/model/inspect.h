// What a GGUF file holds, without loading any weights: architecture, the hyperparameters the
// engine reads (through ModelConfig, so this shows exactly what a run would use), the vocabulary,
// and the tensors with their bytes per block type. Backs `diskformer inspect`.
#pragma once

#include <iosfwd>

#include <nlohmann/json.hpp>

#include "gguf/gguf.h"

namespace df::model {

// One JSON object describing f:
//   arch      general.architecture (null when absent)
//   config    layers (block_count - nextn_predict_layers), hidden, ff, heads, kv_heads, head_dim,
//             rope_dims, rope_base, eps, vocab, recurrent (one bool per layer), nextn, ctx_train,
//             tied_output; for qwen35 also ssm_conv, ssm_state, ssm_k_heads, ssm_v_heads, ssm_inner
//   tensors   [{name, type, shape}] in file order; type is the table name ("Q4_K"), shape in ggml
//             ne order (shape[0] is the row length)
//   types     {type: {count, bytes}} per block type
//   bytes     sum of all tensor data
//   file      {path, version, alignment, size, kv_count, data_offset}
//   tokenizer {model, pre, tokens, merges, bos, eos} for the keys present
// A file without tensors (a vocabulary-only GGUF) whose config cannot be read gets a partial
// config (whichever hyperparameter keys are present, vocab from the token list) and
// `config_error`; a file with tensors whose config is invalid or unsupported throws gguf::Error.
nlohmann::json inspect(const gguf::File& f);

// Writes inspect()'s object as aligned text; every tensor on its own line when list_tensors.
void print_inspect(const nlohmann::json& j, std::ostream& os, bool list_tensors = false);

}  // namespace df::model
