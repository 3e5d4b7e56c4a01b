// What a diskformer::Session holds (session.cpp; the block drafter attaches to it).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "diskformer/diskformer.h"
#include "model/model.h"
#include "runtime/model_impl.h"

namespace diskformer {

struct Session::Impl {
    std::shared_ptr<Model> model;
    const df::model::Model* m = nullptr;
    df::Backend* be = nullptr;
    Engine* engine = nullptr;  // the backend's; public calls that touch the backend hold it
    SessionOptions opt;
    std::unique_ptr<df::model::State> st;
    std::vector<int32_t> tokens;   // what the cache holds, in order
    std::vector<int32_t> host_buf; // staging for token ids / positions
    bool logits_valid = false;     // the last evaluated position's logits are in st
    int64_t last_row = 0;          // row of st->logits holding them
    // What the last forward's argmax feed left in st->tokens[0] / st->pos[0] (ArgmaxFeed): a
    // one-token step of that token at that position needs no upload. fed_pos < 0: nothing.
    int32_t fed_token = 0;
    int64_t fed_pos = -1;
    Stats stats;
    // Copies of the recurrent state after the first n cached tokens (hybrid models).
    struct Checkpoint {
        size_t n = 0;
        void* buf = nullptr;  // kept for reuse while invalid (no allocation per request)
        bool valid = false;
        uint64_t used = 0;  // last taken or restored, for least-recently-used replacement
    };
    std::vector<Checkpoint> checkpoints;
    uint64_t checkpoint_uses = 0;

    // How set_prompt(prompt) gets to a prefix of it with at least one token left to evaluate:
    // n cached tokens kept, by extending (rewinding) the cache or from checkpoint cp.
    struct Resume {
        size_t n = 0;
        int cp = -1;
    };
    Resume resume(std::span<const int32_t> prompt) const;
    // What this session can take from `donor` for `prompt` (Session::borrow): n tokens, from the
    // donor's checkpoint cp (-1: its live state, or no recurrent state); n = 0: nothing better
    // than its own cache.
    Resume borrow_plan(const Impl& donor, std::span<const int32_t> prompt) const;
    // Whether the cache holds exactly `prompt` with its logits: nothing to evaluate.
    bool holds(std::span<const int32_t> prompt) const {
        return logits_valid && prompt.size() == tokens.size() && std::equal(prompt.begin(), prompt.end(), tokens.begin());
    }
    // A backend buffer for one copy of the recurrent state (checkpoints, speculation), counted
    // with the state; `what` names it in the error.
    void* alloc_state_copy(const char* what) {
        const size_t bytes = m->recurrent_bytes();
        void* p = nullptr;
        try {
            p = be->alloc(bytes, df::MemKind::state);
        } catch (const std::exception& e) {
            throw Error(std::string("cannot allocate ") + what + ": " + e.what());
        }
        st->state_bytes += bytes;
        return p;
    }

    // The step graphs' keys: the state's address (operator new aligns it) plus the length band,
    // and for verify passes their length in the top byte (above any address).
    static_assert(__STDCPP_DEFAULT_NEW_ALIGNMENT__ >= df::Backend::kGraphVariants);
    uint64_t graph_key(int variant = 0, int T = 1) const {
        return (reinterpret_cast<uintptr_t>(st.get()) + variant) ^ (T > 1 ? uint64_t(T) << 56 : 0);
    }
    // Drops this session's graphs and the batched passes' graphs that hold its state (the backend held).
    void drop_graphs() {
        for (int T = 1; T <= df::model::kVerifyRows; ++T)
            for (int v = 0; v < df::Backend::kGraphVariants; ++v) be->drop_capture(graph_key(v, T));
        engine->drop_lane_graphs(st.get());
    }
    // Throws unless `ids` fit the context and the vocabulary; drops the checkpoints past the cache
    // (these tokens overwrite the attention layers' KV rows from there on). Host only.
    void admit(std::span<const int32_t> ids);
    // Evaluates `ids` after the cache; `all` receives every position's logits when given. rows:
    // one verify pass (ids.size() <= kVerifyRows), the logits and argmax of every row kept.
    void eval(std::span<const int32_t> ids, float* all, bool decode, bool rows = false);
    void* spec_state = nullptr;  // the recurrent state before a verify pass (hybrid models)
    // With a block drafter attached: called after each forward with the hidden states it kept
    // (Model::enable_taps: [taps][st->chunk][n_embd] on the backend) for its T tokens at pos0..
    std::function<void(const float* taps, int T, int pos0)> on_taps;

    // Runs one-token steps of sessions over one model (Engine::RunSteps): one alone as eval()
    // does (graph replay), several in one batched pass (model::Model::forward_lanes).
    static void run_steps(std::span<Engine::Step* const> batch);
    // Which steps may share a pass (Engine::Step::group): a session whose forward keeps hidden
    // states for a block drafter runs its own.
    const void* step_group() const { return on_taps ? static_cast<const void*>(this) : static_cast<const void*>(m); }
    void clear();  // forgets the cache (Session::reset, the backend held)
};


}  // namespace diskformer
