// diskformer public API: load a GGUF model, run sessions over it.
//
//   auto model = diskformer::Model::load("model.gguf");
//   diskformer::Session s(model, {.ctx = 4096});
//   s.append(model->tokenize("Hello"));
//   int32_t next = s.argmax();
//
// Recoverable problems (bad file, unsupported model, prompt past the context) throw
// diskformer::Error with a message a user can act on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace diskformer {

struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

enum class BackendKind { automatic, cpu, cuda };
enum class KvType { f16, f32 };

struct ModelOptions {
    BackendKind backend = BackendKind::automatic;  // cuda when a GPU is present
    int threads = 0;                               // CPU threads; 0 = one per core
    int device = 0;                                // CUDA device
};

struct ModelInfo {
    std::string arch;
    std::string name;
    std::string backend;      // "cpu" or "cuda"
    int n_layer = 0;
    int n_embd = 0;
    int n_vocab = 0;
    int n_ctx_train = 0;
    size_t weight_bytes = 0;  // as held by the backend
    double load_ms = 0;
};

class Model {
public:
    static std::shared_ptr<Model> load(const std::string& path, const ModelOptions& options = {});
    // Loads another model onto `beside`'s backend (the same device, or the same CPU threads): a
    // draft model next to its target (GenerateOptions::drafter).
    static std::shared_ptr<Model> load_beside(const std::string& path, const Model& beside);
    ~Model();
    const ModelInfo& info() const;

    // Tokenizer of the file (throws Error if the file has none).
    std::vector<int32_t> tokenize(std::string_view text, bool parse_special = false) const;
    std::string detokenize(std::span<const int32_t> ids) const;

    // Sessions may be used from several threads at once (one thread per session): calls that
    // touch the backend take turns, and one-token steps (Session::step) that come together from
    // sessions of the same model run as one batched pass, up to 8 (continuous batching; each
    // step's result is bit for bit that of a step alone). What happened so far on this model's
    // backend (a draft model loaded beside it shares it):
    struct BatchStats {
        uint64_t passes = 0;         // passes that ran several steps
        uint64_t batched_steps = 0;  // the steps they ran
        uint64_t lone_steps = 0;     // steps that ran alone
    };
    BatchStats batch_stats() const;

    struct Impl;
    Impl& impl() const { return *impl_; }
    static std::shared_ptr<Model> make(std::unique_ptr<Impl> impl);  // internal (the loaders)

private:
    explicit Model(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

struct SessionOptions {
    int ctx = 4096;            // KV capacity in tokens (clamped to the model's training context)
    int chunk = 0;             // prompt tokens per forward pass (0: 256 on the CPU; GPU 2048, hybrid 4096)
    KvType kv_type = KvType::f16;
    // Hybrid models: copies of the recurrent state kept by checkpoint() (each as large as that
    // state: ~160 MB for a 27B qwen35, allocated on first use); 0 turns them off.
    int checkpoints = 3;
};

struct Stats {
    size_t weight_bytes = 0, kv_bytes = 0, state_bytes = 0, scratch_bytes = 0;
    int64_t prompt_tokens = 0;   // tokens evaluated in prompt passes (T > 1 or append)
    int64_t reused_tokens = 0;   // tokens taken from the cache by the last set_prompt
    int64_t decode_tokens = 0;   // tokens evaluated by step()
    double prefill_ms = 0, decode_ms = 0;
    double prefill_tok_s() const { return prefill_ms > 0 ? prompt_tokens * 1e3 / prefill_ms : 0; }
    double decode_tok_s() const { return decode_ms > 0 ? decode_tokens * 1e3 / decode_ms : 0; }
    double ms_per_token() const { return decode_tokens ? decode_ms / decode_tokens : 0; }
};

// A session is used by one thread at a time; sessions of one model may be used from several
// threads at once (Model::BatchStats says how their steps shared passes).
class Session {
public:
    explicit Session(std::shared_ptr<Model> model, const SessionOptions& options = {});
    ~Session();
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    // Evaluates tokens after the cached ones, in chunks. When all_logits is given it receives
    // the logits of every one of these positions ([tokens.size(), n_vocab], row-major).
    // Throws Error when the context would overflow (naming the limit).
    void append(std::span<const int32_t> tokens, float* all_logits = nullptr);

    // Makes the cache hold exactly `prompt`, reusing the longest cached prefix where the model
    // allows it (attention-only models rewind; hybrid models extend the cache, resume from a
    // checkpoint, or restart). Returns the number of reused tokens. At least one token is always
    // evaluated so logits are fresh.
    int set_prompt(std::span<const int32_t> prompt);
    // How many of `prompt`'s tokens set_prompt(prompt) would reuse (nothing is evaluated).
    int reusable(std::span<const int32_t> prompt) const;

    // Prefix sharing between sessions of one model (the same KV type): makes this session hold
    // the longest start of `prompt` that `donor` holds, copied on the backend instead of
    // evaluated (KV rows, and for a hybrid model the recurrent state of a checkpoint or of the
    // donor's whole cache, so the prefix ends there), when that is longer than what this
    // session would reuse itself and leaves a token to evaluate. Returns the tokens now held
    // from the donor (0: nothing changed); set_prompt(prompt) then goes on from them, with the
    // bits it would have had evaluating them here. The donor is only read (no thread may use it
    // meanwhile); this session's checkpoints are dropped when it borrows.
    int borrowable(const Session& donor, std::span<const int32_t> prompt) const;
    int borrow(const Session& donor, std::span<const int32_t> prompt);

    // Hybrid models cannot rewind their recurrent state: this keeps a copy of it at the current
    // position (at most SessionOptions::checkpoints; the least recently used is replaced), and a
    // later set_prompt whose prompt shares the cache up to there resumes from it instead of from
    // token 0 (e.g. the same prompt again, or a conversation re-sent with its last answer
    // re-rendered). A checkpoint lasts until the cache evaluates a position before it (the
    // attention layers' KV rows are not copied). Returns false (nothing kept) on attention-only
    // models, which rewind anyway, and when checkpoints are off.
    bool checkpoint();

    // Appends one token and returns the argmax of the next-token logits.
    int32_t step(int32_t token);

    // Speculative decoding, greedy: evaluates `token` and then `draft` (a guess at what follows)
    // in one pass, and keeps `token` and the longest prefix of `draft` that greedy decoding
    // would have produced (a hybrid model restores its recurrent state and re-evaluates the
    // kept tokens). Returns how many draft tokens were kept; argmax() is then the greedy choice
    // after the last kept one. Lossless: a pass of up to max_draft() + 1 tokens gives each
    // token the bits of one-token steps (DESIGN.md, numerics). Drafts past max_draft() are cut.
    int verify(int32_t token, std::span<const int32_t> draft);
    // The same pass for an answer another rule chooses (a sampler: temperature, penalties,
    // logit biases): choose(i, logits) picks the token after `token` and draft[0..i) from that
    // row's logits, row by row, and `draft` is kept while the choices equal it. Returns how
    // many draft tokens were kept (k); `next` is the choice at row k, not yet evaluated (the
    // caller's next token). A rule that draws once per choice so picks exactly what it would
    // pick one step at a time: a seeded sampler's answer is the same with drafts or without.
    using Choose = std::function<int32_t(int row, std::span<const float> logits)>;
    int verify(int32_t token, std::span<const int32_t> draft, const Choose& choose, int32_t& next);
    // The same for a rule that may need only a row's likeliest tokens (a sampler's top k): it
    // gets each row as a Row, whose logits() copies the whole row and whose top() answers as
    // top_logits() does for that row (from a GPU a few KB instead of the row).
    class Row {
    public:
        virtual std::span<const float> logits() = 0;
        virtual std::vector<std::pair<int32_t, float>> top(int k, std::span<const int32_t> extra) = 0;
        virtual uint64_t mass(float lmax) = 0;  // row_mass() of this row

    protected:
        ~Row() = default;
    };
    using ChooseRow = std::function<int32_t(int row, Row& r)>;
    int verify(int32_t token, std::span<const int32_t> draft, const ChooseRow& choose, int32_t& next);
    int max_draft() const;  // 7, or fewer when the chunk is smaller than 8 tokens

    int32_t argmax() const;                  // of the last evaluated position
    std::vector<float> logits() const;       // of the last evaluated position
    // A sampler's candidates at the last evaluated position without the whole row's copy from
    // a GPU: the k likeliest tokens (larger logit first, then the lower id; NaN last) with their
    // logits, then `extra` with theirs, in its order. k in 1..min(n_vocab, 1024), at most 1024
    // extra ids, each in the vocabulary; throws Error otherwise.
    std::vector<std::pair<int32_t, float>> top_logits(int k, std::span<const int32_t> extra = {}) const;
    // A sampler's top-p normalizer at the last evaluated position without the row's copy: the sum
    // over the vocabulary of exp(logit - lmax) in the fixed point of df::mass_term (backend/
    // row_mass.h), the same integer a sum over the copied row gives.
    uint64_t row_mass(float lmax) const;
    void reset();

    int n_ctx() const;
    int n_chunk() const;                     // prompt tokens per forward pass (chunk 0 resolved)
    int n_cached() const;
    const std::vector<int32_t>& tokens() const;
    Stats stats() const;
    void reset_stats();
    const Model& model() const;

    struct Impl;
    Impl& impl() const { return *impl_; }  // internal (the runtime)

private:
    friend class BlockDrafter;
    std::unique_ptr<Impl> impl_;
};

// A DFlash block drafter for speculative decoding (GenerateOptions::block_drafter): a small
// network that reads the target's hidden states and guesses a whole block of tokens in one pass,
// such as z-lab's Qwen3-4B-DFlash-b16 beside Qwen3-4B (a directory with config.json and
// model.safetensors). It attaches to one session of an attention-only (qwen3) target, which
// from then on keeps the hidden states the drafter reads (the session's cache is cleared: the
// drafter must see every token it holds); the session must outlive it. Throws Error for a
// checkpoint this engine cannot run (each unknown field or tensor is named).
class BlockDrafter {
public:
    BlockDrafter(const std::string& dir, Session& target);
    ~BlockDrafter();
    BlockDrafter(const BlockDrafter&) = delete;
    BlockDrafter& operator=(const BlockDrafter&) = delete;

    // Up to max_tokens guesses at the tokens after `last`, the token that follows the target's
    // cached ones (the drafter's argmax per slot, at most block_size() - 1); empty when the
    // context has no room for a block.
    std::vector<int32_t> draft(int32_t last, int max_tokens);
    int block_size() const;
    size_t weight_bytes() const;
    const Session& target() const;

    struct Impl;

private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace diskformer
