// A loaded model: config, weights on a backend, and the layer program of its architecture.
//
// Weights belong to the Model (loaded once, read-only, shared by sessions); KV cache, recurrent
// state and scratch belong to a State that a session owns, so several sessions (or a drafter and
// its target) can run over one Model.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "gguf/gguf.h"
#include "model/config.h"

namespace df::model {

struct LayerWeights {
    Weight attn_norm, ffn_norm;                  // ffn_norm: post_attention_norm in qwen35
    Weight wq, wk, wv, wo, q_norm, k_norm;       // attention layers
    Weight ssm_qkv, ssm_gate, ssm_alpha, ssm_beta, ssm_conv, ssm_dt_bias, ssm_a, ssm_norm, ssm_out;
    Weight ffn_gate, ffn_up, ffn_down;
};

struct Weights {
    Weight tok_embd, output_norm, output;        // output == tok_embd when tied
    std::vector<LayerWeights> layers;
};

// What a forward pass leaves behind.
// Rows of logits a state holds without all_logits: a verify pass (Output::all) of up to this many
// tokens fits, the limit up to which passes are batch-invariant (DESIGN.md, numerics).
inline constexpr int kVerifyRows = 8;

enum class Output : uint8_t {
    none,      // only the caches advance (a prompt chunk that is not the last)
    last,      // logits (+ argmax) of the last token
    all,       // logits (+ argmax) of every token of the step
};

// Per-session buffers on the backend, sized from the config, the context and the chunk size.
struct State {
    int ctx = 0;
    int chunk = 0;
    KvType kv_type = KvType::f16;
    std::vector<void*> k_cache, v_cache;         // per layer; null for recurrent layers
    std::vector<float*> conv_state, ssm_state;   // per layer; null for attention layers
    int32_t* tokens = nullptr;                   // [chunk]; after a forward with logits, [0] = the argmax
    int32_t* pos = nullptr;                      // [chunk]; ... and [0] = the next position (ArgmaxFeed)
    int32_t* argmax = nullptr;                   // [chunk], host-visible (Backend::alloc_host_visible)
    float* logits = nullptr;                     // [chunk, n_vocab] when all_logits, else [1, n_vocab]
    // A sampler's candidates (Backend::top_logits), host-visible: ids and vals [2 kTopLogitsMax],
    // extra [kTopLogitsMax].
    int32_t* top_ids = nullptr;
    float* top_vals = nullptr;
    int32_t* top_extra = nullptr;
    bool all_logits = false;
    // Hidden states kept for a block drafter (Model::enable_taps): after layer tap_layers[i], the
    // residual stream of the forward's T tokens at taps + i * chunk * n_embd.
    std::vector<int> tap_layers;
    float* taps = nullptr;
    // scratch
    float *h = nullptr, *x = nullptr, *big = nullptr, *big2 = nullptr, *small = nullptr,
          *small2 = nullptr, *attn = nullptr;
    std::vector<void*> owned;                    // everything above, for release
    size_t kv_bytes = 0, state_bytes = 0, scratch_bytes = 0;
};

// One sequence's share of a batched forward (Model::forward_lanes): its state (KV cache, recurrent
// state, logits and argmax) and its tokens, rows [row0, row0 + s.T) of the pass, whose ids and
// positions s.tokens / s.pos point to (inside the scratch state's buffers).
struct Lane {
    State* st = nullptr;
    Step s;
    int row0 = 0;
};

class Model {
public:
    // Opens, validates and loads the file onto the backend; throws gguf::Error on a bad file.
    static std::unique_ptr<Model> load(const std::string& path, std::shared_ptr<Backend> backend);
    ~Model();

    const ModelConfig& config() const { return config_; }
    const gguf::File& file() const { return *file_; }
    Backend& backend() const { return *backend_; }
    const Weights& weights() const { return weights_; }
    size_t weight_bytes() const { return weight_bytes_; }

    std::unique_ptr<State> new_state(int ctx, int chunk, KvType kv_type, bool all_logits) const;
    // Scratch for forward_lanes over up to `rows` tokens (at most kVerifyRows): no KV cache or
    // recurrent state of its own.
    std::unique_ptr<State> new_scratch(int rows) const;
    void free_state(State& st) const;
    void reset_state(State& st) const;  // zero the recurrent state (KV rows need no clearing)
    // From the next forward on, keeps the residual stream after each of `layers` (0-based; the
    // output of that layer) in st.taps. Graphs recorded before do not: drop them.
    void enable_taps(State& st, const std::vector<int>& layers) const;

    // The recurrent state (every GDN layer's conv and delta state) packed in one backend buffer
    // of recurrent_bytes() (0 for attention-only models): a hybrid model cannot rewind, so
    // sessions keep such copies to resume from (checkpoints).
    size_t recurrent_bytes() const;
    void save_recurrent(const State& st, void* dst) const;
    void load_recurrent(State& st, const void* src) const;
    // Prefix sharing between states of this model with the same KV type: the first n KV rows
    // of every attention layer, and the whole recurrent state.
    void copy_kv_rows(const State& from, State& to, int n) const;
    void copy_recurrent(const State& from, State& to) const;

    // Runs T = s.T tokens (tokens/pos already in st.tokens/st.pos) through the network.
    void forward(State& st, const Step& s, Output out) const;
    // Runs several sequences' tokens as one pass (continuous batching): the token-wise ops
    // (embedding, norms, projections, FFN, LM head) over all rows at once, the per-sequence ones
    // (RoPE + KV store, attention, the GDN mixer) on each lane's own state (Backend::attention_lanes,
    // gdn_mix_lanes), in the order a lone forward issues them. At most kVerifyRows rows in all, so
    // each row gets the bits a one-token step of its sequence would (DESIGN.md, numerics). Each
    // lane's last row's logits and argmax land in its state's logits / argmax row 0 (no
    // ArgmaxFeed). Lanes without block-drafter taps; a lane's ids and positions are its rows of the
    // scratch's buffers, and all lanes share one KV type.
    void forward_lanes(State& scratch, std::span<const Lane> lanes) const;

private:
    Model() = default;
    void alloc_scratch(State& st, int chunk) const;  // activations, logits, tokens, pos, argmax
    std::unique_ptr<gguf::File> file_;
    std::shared_ptr<Backend> backend_;
    ModelConfig config_;
    Weights weights_;
    size_t weight_bytes_ = 0;
};

}  // namespace df::model
