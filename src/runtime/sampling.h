// Host-side token sampling: penalties, top-k / top-p / min-p truncation, temperature, and a
// seeded RNG so that the same seed picks the same tokens on every machine.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "diskformer/generate.h"

namespace diskformer::sampling {

// xoshiro256** seeded through splitmix64: fast, and the same stream everywhere (std::mt19937 is
// too, but std:: distributions are not specified bit for bit, so we draw uniforms ourselves).
class Rng {
public:
    explicit Rng(uint64_t seed);
    uint64_t next();
    double uniform();  // in [0, 1), 53 random bits

private:
    uint64_t s_[4];
};

// Throws Error naming the first option out of range.
void check_options(const GenerateOptions& o);

// Log-softmax of raw next-token logits: the chosen token's log-probability and the `top`
// likeliest tokens' (best first, ties to the lower id). Sums in double.
TokenLogprobs token_logprobs(std::span<const float> logits, int32_t chosen, int top);

class Sampler {
public:
    explicit Sampler(const GenerateOptions& o);

    // True when the choice is the plain argmax of the logits, so a caller can use the backend's
    // argmax and skip copying the logits to the host.
    bool is_plain_greedy() const { return plain_greedy_; }

    // Picks a token from next-token logits (modified in place); recent: the tokens the penalties
    // see. Ties go to the lowest id, as the backends' argmax does. With `allowed`, a choice it
    // refuses is redrawn once from the logits with every refused token removed (so a valid first
    // choice costs one check): `mask` sets them to -inf when given (all at once), else each
    // token is asked; throws Error when none is left.
    int32_t sample(std::vector<float>& logits, std::span<const int32_t> recent,
                   const std::function<bool(int32_t)>& allowed = {},
                   const std::function<void(std::vector<float>&)>& mask = {});

    // The same choice from the row's likeliest tokens instead of the whole row (Session::
    // top_logits, which a GPU answers without copying the row): top_plan returns how many of
    // the likeliest are needed, 0 when sample() must see the whole row (top-k wide, or off
    // without top-p and min-p, a JSON rule, more than 1024 candidates), and sets `extra` to the
    // tokens whose own logits are needed too (the penalised and the biased ones: only theirs
    // change before the top-k, so the top-k lies within the n_top likeliest and them).
    // sample_top(cands, n_top, recent, mass), with cands = the n_top likeliest then `extra`'s,
    // picks what sample() would pick from the whole row, and draws from the same generator.
    // With top-k off it takes the row's 1024 likeliest, and mass(lmax) (Session::row_mass: the
    // row's top-p normalizer) when top-p is on; it returns -1, drawing nothing, when the cut
    // would fall past them (a flat distribution): then sample() must see the whole row.
    size_t top_plan(size_t n_vocab, std::span<const int32_t> recent, std::vector<int32_t>& extra) const;
    int32_t sample_top(std::span<const std::pair<int32_t, float>> cands, size_t n_top, std::span<const int32_t> recent,
                       const std::function<uint64_t(float)>& mass = {});

private:
    struct Cand {
        float logit;
        int32_t id;
    };
    void apply_penalties(std::vector<float>& logits, std::span<const int32_t> recent) const;
    static bool has_penalties(const GenerateOptions& o);
    static bool before(const Cand& a, const Cand& b);
    // before as a function object: the standard algorithms inline it (through a function
    // pointer every comparison is a call).
    struct Before {
        bool operator()(const Cand& a, const Cand& b) const { return before(a, b); }
    };
    static uint64_t sort_key(const Cand& x);
    void sort(std::vector<Cand>& c, size_t from);  // c[from, end) in before's order
    // The distinct tokens of the penalty window (those the penalties change), in id order, with
    // their counts; empty when the penalties are off.
    std::vector<std::pair<int32_t, int>> window_counts(std::span<const int32_t> recent) const;
    float penalized(float l, int count) const;
    // cands_ = the k best of the logits in before's order (sorted), in one pass over them.
    void top_candidates(const std::vector<float>& logits, size_t k);
    void truncate(std::vector<Cand>& c);  // top-k, top-p, min-p; leaves c sorted by logit
    int32_t pick(const std::vector<float>& logits);  // greedy or sampled, after the penalties
    int32_t draw();  // from cands_ (sorted, the top-k or every token): truncation, temperature
    int32_t draw_kept();  // from cands_ truncated: temperature, the draw
    // min-p's cut of candidates sorted by before (the likeliest always stays): whether it dropped any.
    bool cut_min_p(std::vector<Cand>& c) const;
    // Top-k off, top-p or min-p on: sample_top from the row's head (-1 when it cannot decide).
    bool head_mode() const { return o_.temperature > 0 && o_.top_k == 0 && (o_.top_p < 1 || o_.min_p > 0); }
    int32_t sample_head(const Cand& edge, std::span<const Cand> raw, std::span<const Cand> changed,
                        const std::function<uint64_t(float)>& mass);

    GenerateOptions o_;
    bool plain_greedy_;
    Rng rng_;
    // Working memory kept between tokens (a vocabulary's worth: fresh pages each token cost more
    // than the work).
    std::vector<Cand> cands_;
    std::vector<uint64_t> keys_, keys_tmp_;
    std::vector<double> weights_;
};

}  // namespace diskformer::sampling
