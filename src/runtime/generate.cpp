// The generation loop: prefill (abortable, reusing the cache), then sample → stream → step.
#include <algorithm>
#include <chrono>
#include <deque>
#include <functional>
#include <optional>
#include <string>

#include "diskformer/generate.h"
#include "runtime/draft.h"
#include "runtime/draft_model.h"
#include "runtime/json_tokens.h"
#include "runtime/model_impl.h"
#include "runtime/session_impl.h"
#include "runtime/sampling.h"
#include "runtime/text_stream.h"

namespace diskformer {
namespace {

using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

bool aborted(const GenerateOptions& o) { return o.abort && o.abort->load(std::memory_order_relaxed); }

// Prompt tokens evaluated between abort checks, at least: a long prompt on a slow CPU stays
// interruptible (a GPU's longer chunks are not cut: a slice is at least one chunk).
constexpr size_t kPrefillSlice = 512;

struct Prefill {
    int reused = 0;
    bool aborted = false;
};

// Where a hybrid model keeps checkpoints of its recurrent state while evaluating `prompt`
// (ascending): after a leading system turn (another conversation with the same system prompt,
// on this session or borrowing from it, departs after it), after the last <|im_start|> (a chat
// re-sent with this turn's answer re-rendered departs from the cache just after it) and before
// its last token (the same prompt again resumes there).
std::vector<size_t> checkpoint_marks(const Session& s, std::span<const int32_t> prompt) {
    const auto& mi = s.model().impl();
    if (mi.model->config().n_recurrent() == 0 || prompt.size() < 2) return {};
    std::vector<size_t> marks;
    const int32_t im_start = mi.tokenizer->find("<|im_start|>");
    const std::vector<int32_t> system = mi.tokenizer->encode("system", false);  // "<|im_start|>system\n": a system turn
    if (prompt[0] == im_start && prompt.size() > system.size() + 1 &&
        std::equal(system.begin(), system.end(), prompt.begin() + 1))
        for (size_t i = 1 + system.size(); i + 1 < prompt.size(); ++i)
            if (prompt[i] == im_start) {  // the next turn's start
                marks.push_back(i);
                break;
            }
    for (size_t i = prompt.size() - 1; i-- > 0;)
        if (prompt[i] == im_start) {
            marks.push_back(i + 1);
            break;
        }
    marks.push_back(prompt.size() - 1);
    std::sort(marks.begin(), marks.end());
    marks.erase(std::unique(marks.begin(), marks.end()), marks.end());
    return marks;
}

// Makes the session hold `prompt` like Session::set_prompt, but in slices with an abort check
// between them, and with checkpoints at `marks` (ascending). When aborted, the cache holds a
// prefix of the prompt, which the next call reuses.
Prefill prefill(Session& s, std::span<const int32_t> prompt, const GenerateOptions& o) {
    const std::vector<size_t> marks = checkpoint_marks(s, prompt);
    const size_t slice = std::max(kPrefillSlice, static_cast<size_t>(s.n_chunk()));
    // The end of the pass that starts at `from`: a slice, cut at the next mark.
    auto end_from = [&](size_t from) {
        size_t end = std::min(prompt.size(), from + slice);
        for (size_t m : marks)
            if (m > from && m < end) return m;
        return end;
    };
    Prefill r;
    size_t pos = end_from(static_cast<size_t>(s.reusable(prompt)));
    r.reused = s.set_prompt(prompt.first(pos));
    while (pos < prompt.size()) {
        if (std::find(marks.begin(), marks.end(), pos) != marks.end()) s.checkpoint();
        if ((r.aborted = aborted(o))) break;
        const size_t end = end_from(pos);
        s.append(prompt.subspan(pos, end - pos));
        pos = end;
    }
    return r;
}

}  // namespace

const char* to_string(StopReason reason) {
    switch (reason) {
        case StopReason::end_token: return "end token";
        case StopReason::stop_string: return "stop string";
        case StopReason::max_tokens: return "max tokens";
        case StopReason::context_full: return "context full";
        case StopReason::aborted: return "aborted";
    }
    return "?";
}

GenerateResult generate(Session& session, std::span<const int32_t> prompt, const GenerateOptions& options,
                        const StreamCallback& on_piece) {
    sampling::check_options(options);
    if ((!options.json_schema.empty() || !options.json_before.empty() || !options.json_after.empty()) && !options.json)
        throw Error("generate: json_schema, json_before and json_after need json");
    std::optional<JsonSchema> schema;  // compiled before any work: a bad one is the caller's error
    if (!options.json_schema.empty()) schema = JsonSchema::compile(options.json_schema);
    for (const auto& [t, bias] : options.logit_bias)
        if (t >= session.model().info().n_vocab)
            throw Error("generate: logit_bias names token " + std::to_string(t) + ", past the vocabulary's " +
                        std::to_string(session.model().info().n_vocab));
    const auto& mi = session.model().impl();
    if (!mi.tokenizer) throw Error("this model has no usable tokenizer: " + mi.tokenizer_error);
    if (options.drafter == &session) throw Error("generate: the drafter must be a session of its own");
    if (options.drafter) check_drafter(session.model(), options.drafter->model());
    if (options.block_drafter && &options.block_drafter->target() != &session)
        throw Error("generate: the block drafter is attached to another session");
    const auto& tok = *mi.tokenizer;
    if (prompt.empty()) throw Error("generate: the prompt is empty");
    if (prompt.size() > static_cast<size_t>(session.n_ctx()))
        throw Error("the prompt has " + std::to_string(prompt.size()) + " tokens but the context holds " +
                    std::to_string(session.n_ctx()) + " (raise --ctx or shorten the prompt)");

    GenerateResult r;
    r.stats.prompt_tokens = static_cast<int64_t>(prompt.size());
    const auto t0 = Clock::now();
    if (aborted(options)) {
        r.stop = StopReason::aborted;
        return r;
    }
    Prefill pre = prefill(session, prompt, options);
    r.stats.reused_tokens = pre.reused;
    sampling::Sampler sampler(options);
    // Speculation. A sampled or JSON-constrained answer (or one with log-probabilities) is
    // chosen row by row from a verify pass's logits, with the draws and checks of step by step:
    // the same answer.
    const bool want_logprobs = options.logprobs >= 0;
    const bool speculate = options.draft > 0 && session.max_draft() > 0;
    // A draft model reads the prompt too (in the prompt's time); one whose context cannot hold
    // it sits this answer out.
    BlockDrafter* block = speculate ? options.block_drafter : nullptr;
    Session* drafter = speculate && !block && options.drafter && prompt.size() < static_cast<size_t>(options.drafter->n_ctx())
                           ? options.drafter
                           : nullptr;
    if (drafter && !pre.aborted) pre.aborted = prefill(*drafter, prompt, options).aborted;
    r.stats.prefill_ms = ms_between(t0, Clock::now());
    if (pre.aborted) {
        r.stop = StopReason::aborted;
        return r;
    }
    if (options.max_tokens == 0) {
        r.stop = StopReason::max_tokens;
        return r;
    }

    // Concurrent loops over the same model share passes (Engine); a speculating loop drafts
    // only while it is alone (Engine::loops), else it steps with the others.
    Engine& engine = *session.impl().engine;
    const void* group = session.impl().step_group();
    const Engine::Decoding decoding(engine, group);
    TextStream text(tok, options.stop, TextStream::start_part(tok, prompt));
    // The penalty window: the last tokens of prompt + generation.
    const size_t window = static_cast<size_t>(options.penalty_window);
    std::vector<int32_t> recent(prompt.end() - std::min(prompt.size(), window), prompt.end());
    auto remember = [window](std::vector<int32_t>& seen, int32_t t) {
        if (!window) return;
        if (seen.size() == window) seen.erase(seen.begin());
        seen.push_back(t);
    };
    // The next token when it is already chosen (plain greedy: the backend's argmax; a verify
    // pass's choice after the tokens it kept), else -1.
    int32_t chosen = sampler.is_plain_greedy() ? session.argmax() : -1;
    const size_t V = static_cast<size_t>(session.model().info().n_vocab);
    std::vector<int32_t> top_extra;  // Sampler::top_plan's
    bool picked = false;  // `chosen` came from a verify pass's rule: drawn and checked already
    std::deque<TokenLogprobs> pass_logprobs;  // a pass's rows' (with logprobs): kept tokens', then chosen's
    // Speculation: prompt + answer (the drafts' source), and the draft tokens a verify pass
    // kept, already evaluated, to be emitted before the next choice.
    // JSON mode: the answer so far, and which tokens may follow it.
    std::optional<JsonTokens> json;
    if (options.json) json.emplace(tok, mi.token_trie(), schema ? &*schema : nullptr, options.json_before, options.json_after);
    const std::function<bool(int32_t)> json_allows = [&](int32_t t) { return json->allows(t); };
    const std::function<void(std::vector<float>&)> json_mask = [&](std::vector<float>& logits) { json->mask(logits); };
    std::vector<int32_t> context;
    if (speculate) context.assign(prompt.begin(), prompt.end());
    std::deque<int32_t> kept;
    int skip = 0, backoff = 0;  // after a draft that kept nothing, plain steps for a while
    // Whether drafting pays here (a pass costs more than a step, on a GPU up to several): the
    // time of a plain step (the fastest seen: the first ones record graphs) and the tokens a
    // pass yields per ms (a moving average), measured as generation goes. Until it is known to
    // pay, passes are probes of one drafted token (the cheapest): the first two, then one after
    // `probe` plain steps, the wait doubling (32 .. 1024) while probes keep losing.
    constexpr double kAlpha = 0.25;
    double step_ms = 0, pass_tok_per_ms = 0;
    int steps = 0, passes = 0, since_pass = 0, probe = 32;
    auto paid = [&] { return !options.draft_adaptive || (steps >= 2 && passes >= 2 && pass_tok_per_ms * step_ms > 1.0); };
    Clock::time_point t_first;
    for (;;) {
        const bool evaluated = !kept.empty();
        const bool constrain = json && text.part() == Part::answer;
        int32_t id = chosen;
        if (evaluated || picked) {
            if (evaluated) {
                id = kept.front();
                kept.pop_front();
            }
            if (want_logprobs) {
                r.logprobs.push_back(std::move(pass_logprobs.front()));
                pass_logprobs.pop_front();
            }
        } else if (size_t n_top; id < 0 && !constrain && !want_logprobs && (n_top = sampler.top_plan(V, recent, top_extra)) > 0 &&
                   (id = sampler.sample_top(session.top_logits(static_cast<int>(n_top), top_extra), n_top, recent,
                                            [&](float lmax) { return session.row_mass(lmax); })) >= 0) {
            // Chosen from the likeliest tokens and the penalised / biased ones only (a GPU sends a
            // few KB); -1 (a cut past them) leaves it to the whole row below.
        } else if (id < 0 || constrain) {
            std::vector<float> logits = session.logits();
            std::vector<float> raw;
            if (want_logprobs) raw = logits;  // the sampler modifies its copy
            if (constrain) id = sampler.sample(logits, recent, json_allows, json_mask);
            else id = sampler.sample(logits, recent);
            if (want_logprobs) r.logprobs.push_back(sampling::token_logprobs(raw, id, options.logprobs));
        } else if (want_logprobs) {  // the backend's argmax chose it: the logits only for this
            r.logprobs.push_back(sampling::token_logprobs(session.logits(), id, options.logprobs));
        }
        if (!evaluated) picked = false;
        if (constrain) json->accept(id);
        if (speculate) context.push_back(id);
        if (r.tokens.empty()) {
            t_first = Clock::now();
            r.stats.ttft_ms = ms_between(t0, t_first);
        }
        r.tokens.push_back(id);
        remember(recent, id);

        bool end = true;
        // Tokens evaluated before this one (a kept draft token is in the cache already).
        const size_t before = prompt.size() + r.tokens.size() - 1;
        if (tok.is_eog(id)) r.stop = StopReason::end_token;
        else if (options.max_tokens >= 0 && r.tokens.size() >= static_cast<size_t>(options.max_tokens)) r.stop = StopReason::max_tokens;
        else if (before >= static_cast<size_t>(session.n_ctx())) r.stop = StopReason::context_full;
        else if (aborted(options)) r.stop = StopReason::aborted;
        else end = false;
        const TextStream::Out out = text.push(id, end);
        if (out.stopped) {
            r.stop = StopReason::stop_string;
            end = true;
        }
        (out.part == Part::reasoning ? r.reasoning : r.text) += out.text;
        if (on_piece) on_piece(Piece{out.text, out.part, id, end, want_logprobs ? &r.logprobs.back() : nullptr});
        if (end) break;
        if (evaluated) continue;  // its successor is the next kept token, or the pass's choice
        std::vector<int32_t> guess;
        const auto t_eval = Clock::now();  // a pass's time includes its drafting
        // JSON mode drafts inside the answer only (where every row is constrained alike).
        const bool constrained = json && text.part() == Part::answer;
        if (speculate && skip > 0) {
            --skip;
        } else if (speculate && (!json || constrained) && (paid() || passes < 2 || since_pass >= probe) &&
                   engine.loops(group) == 1) {
            // Room: the pass must fit the context, and every kept token plus the next choice
            // within max_tokens (so the cache never runs past the answer); no end token inside.
            size_t room = std::min<size_t>(static_cast<size_t>(options.draft),
                                           static_cast<size_t>(session.n_ctx() - session.n_cached() - 1));
            if (options.max_tokens >= 0) room = std::min(room, static_cast<size_t>(options.max_tokens) - r.tokens.size() - 1);
            room = std::min<size_t>(room, 64);
            // A probe: the cheapest pass (a block drafter's pass costs the same for any length).
            if (!paid() && !block) room = std::min<size_t>(room, 1);
            if (block)
                guess = block->draft(id, static_cast<int>(std::min<size_t>(room, session.max_draft())));
            else if (drafter)
                guess = draft::from_model(*drafter, context, static_cast<int>(std::min<size_t>(room, session.max_draft())),
                                          session.model().info().n_vocab, tok);
            else
                guess = draft::prompt_lookup(context, static_cast<int>(room));
            guess.erase(std::find_if(guess.begin(), guess.end(), [&](int32_t t) { return tok.is_eog(t); }), guess.end());
        }
        if (guess.empty()) {
            chosen = session.step(id);
            if (!sampler.is_plain_greedy()) chosen = -1;
            if (speculate) {
                const double ms = ms_between(t_eval, Clock::now());
                step_ms = steps++ == 0 ? ms : std::min(step_ms, ms);
                ++since_pass;
            }
            continue;
        }
        int n_kept = 0;
        if (sampler.is_plain_greedy() && !constrained && !want_logprobs) {
            n_kept = session.verify(id, guess);
            chosen = session.argmax();
        } else {
            // Row i is chosen as step i would be: its penalties see the kept tokens before it,
            // and in JSON mode its check sees the answer with them.
            std::vector<int32_t> seen = recent;
            std::optional<JsonTokens> answer;
            if (constrained) answer.emplace(*json);
            const std::function<bool(int32_t)> allows = [&](int32_t t) { return answer->allows(t); };
            const std::function<void(std::vector<float>&)> mask = [&](std::vector<float>& l) { answer->mask(l); };
            std::vector<float> row;
            n_kept = session.verify(
                id, guess,
                Session::ChooseRow([&](int i, Session::Row& pass_row) {
                    if (i > 0) {
                        const int32_t prev = guess[static_cast<size_t>(i) - 1];
                        remember(seen, prev);
                        if (answer) answer->accept(prev);
                    }
                    // As a step chooses: from the row's likeliest tokens where that is exact.
                    if (size_t n_top; !answer && !want_logprobs && (n_top = sampler.top_plan(V, seen, top_extra)) > 0)
                        if (const int32_t t = sampler.sample_top(pass_row.top(static_cast<int>(n_top), top_extra), n_top, seen,
                                                                 [&](float lmax) { return pass_row.mass(lmax); });
                            t >= 0)
                            return t;
                    const std::span<const float> logits = pass_row.logits();
                    row.assign(logits.begin(), logits.end());
                    const int32_t t = answer ? sampler.sample(row, seen, allows, mask) : sampler.sample(row, seen);
                    if (want_logprobs) pass_logprobs.push_back(sampling::token_logprobs(logits, t, options.logprobs));
                    return t;
                }),
                chosen);
            picked = true;
        }
        const double rate = (n_kept + 1) / std::max(1e-3, ms_between(t_eval, Clock::now()));
        pass_tok_per_ms = passes++ == 0 ? rate : pass_tok_per_ms + kAlpha * (rate - pass_tok_per_ms);
        probe = paid() ? 32 : std::min(2 * probe, 1024);
        since_pass = 0;
        r.stats.drafted_tokens += std::min<int64_t>(static_cast<int64_t>(guess.size()), session.max_draft());
        r.stats.accepted_tokens += n_kept;
        kept.assign(guess.begin(), guess.begin() + n_kept);
        if (n_kept == 0) skip = backoff = std::min(2 * backoff + 1, 16);
        else backoff = 0;
    }
    r.stats.generated_tokens = static_cast<int64_t>(r.tokens.size());
    r.stats.decode_ms = ms_between(t_first, Clock::now());
    // A stop string may end the answer inside the tokens a verify pass kept: leave the cache
    // holding the prompt and every generated token but the last, as without speculation.
    const size_t want = prompt.size() + r.tokens.size() - 1;
    if (speculate && static_cast<size_t>(session.n_cached()) > want) {
        std::vector<int32_t> held(prompt.begin(), prompt.end());
        held.insert(held.end(), r.tokens.begin(), r.tokens.end() - 1);
        session.set_prompt(held);
    }
    return r;
}

}  // namespace diskformer
