// The DFlash block drafter (reference/drafters.md §1.2, z-lab/dflash): a small Qwen3-style stack
// without embeddings or LM head of its own that drafts a whole block of tokens in one pass from
// the target's hidden states.
//
//   context (per target token, once):  ctx = hidden_norm(fc(concat of the target's residual
//       stream after its tap layers)); every drafter layer stores k_norm(Wk ctx) (RoPE at the
//       token's position) and Wv ctx in its KV cache;
//   block (per draft):  [last token, MASK x (K-1)] embedded by the target's token_embd at
//       positions start..start+K-1; pre-norm layers whose queries attend bidirectionally to the
//       whole cache (context rows and the block's own K/V, written at the block's positions and
//       overwritten by the next context rows); norm; the target's LM head; slot j's argmax is
//       the guess for position start + j (no shift), j = 1..K-1.
//
// Loaded from a checkpoint directory (config.json + model.safetensors, bf16 as published):
// every config field and tensor is checked, and one this code does not know (FlashMap's time
// conditioning, a sliding window) is an error naming it, never ignored. The matrices are held as
// Q8_0 by default (quantized at load: half the bytes, and the tuned kernels of both backends; on
// the H200 a bf16 drafter pass took ~0.6 ms per layer at 16 rows); drafts only steer speed, never
// the answer.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/model.h"
#include "model/safetensors.h"

namespace df::model {

struct DflashConfig {
    int n_embd = 0, n_layer = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_ff = 0;
    int block_size = 16;
    int mask_token = -1;
    std::vector<int> target_layers;  // 0-based target layers whose output is a context feature
    float eps = 1e-6f;
    float rope_base = 1e6f;

    // Reads config.json's text for a drafter of `target`; throws gguf::Error naming the field.
    static DflashConfig from_json(const std::string& text, const ModelConfig& target);
};

class Dflash {
public:
    // dir holds config.json and model.safetensors.
    // q8_0: the matrices quantized at load; false: as stored (BF16, F16 or F32).
    static std::unique_ptr<Dflash> load(const std::string& dir, const Model& target, bool q8_0 = true);
    static std::unique_ptr<Dflash> from_parts(const std::string& config_json, std::unique_ptr<SafeTensors> weights,
                                              const Model& target, bool q8_0 = true);
    ~Dflash();

    const DflashConfig& config() const { return config_; }
    size_t weight_bytes() const { return weight_bytes_; }

    // Per-session buffers: the KV caches of ctx positions and scratch for chunks of up to
    // `chunk` context rows (the target's chunk).
    struct State;
    std::unique_ptr<State, void (*)(State*)> new_state(int ctx, int chunk) const;

    // Context rows: the target's features for T tokens at positions pos0.. (taps as
    // Model::enable_taps keeps them: [n_taps][chunk][n_embd] on the backend, T <= chunk).
    void inject(State& st, const float* taps, int chunk, int T, int pos0) const;
    // One block after `start` context rows: `last` at position start, masks after; returns the
    // guesses for positions start + 1 .. start + K - 1 (the argmax of each slot).
    std::vector<int32_t> draft(State& st, int32_t last, int start) const;
    // The last draft's logits of slots 1..K-1 ([K-1, n_vocab] on the host: tests, inspection).
    std::vector<float> logits(const State& st) const;

private:
    Dflash() = default;
    void block(State& st, const Step& s, const Step& all) const;  // the draft pass's ops
    struct Layer {
        Weight wq, wk, wv, wo, gate, up, down, attn_norm, ffn_norm, q_norm, k_norm;
    };
    const Model* target_ = nullptr;
    Backend* be_ = nullptr;
    DflashConfig config_;
    std::unique_ptr<SafeTensors> file_;
    std::vector<std::vector<uint8_t>> host_;  // converted or split copies the weights point into
    std::vector<Weight> fc_;                  // fc split by tap: [n_embd, n_embd] each
    Weight hidden_norm_, norm_;
    std::vector<Layer> layers_;
    size_t weight_bytes_ = 0;
};

// Writes a DFlash drafter with random, well-scaled bf16 weights for `target` into dir
// (config.json + model.safetensors): the shapes of a real one (the target's width, heads and FFN,
// `layers` layers with one tap each, block 16) for benchmarks (`synth --dflash-for`).
void write_random_dflash(const ModelConfig& target, const std::string& dir, int layers, uint64_t seed);

}  // namespace df::model
