// Drafts from a draft model (draft_model.h) and the check that a drafter fits its target.
#include "runtime/draft_model.h"

#include <string>

#include "diskformer/generate.h"
#include "runtime/model_impl.h"

namespace diskformer {

void check_drafter(const Model& target, const Model& drafter) {
    const auto& t = target.impl();
    const auto& d = drafter.impl();
    if (!t.tokenizer) throw Error("the target model has no usable tokenizer: " + t.tokenizer_error);
    if (!d.tokenizer) throw Error("the draft model has no usable tokenizer: " + d.tokenizer_error);
    const auto& a = *t.tokenizer;
    const auto& b = *d.tokenizer;
    if (a.vocab_size() != b.vocab_size())
        throw Error("the draft model's vocabulary has " + std::to_string(b.vocab_size()) + " tokens, the target's " +
                    std::to_string(a.vocab_size()) + ": a drafter must share the target's tokenizer");
    for (size_t i = 0; i < a.vocab_size(); ++i) {
        const auto id = static_cast<int32_t>(i);
        if (a.text(id) != b.text(id))
            throw Error("the draft model's token " + std::to_string(id) + " is \"" + std::string(b.text(id)) +
                        "\", the target's \"" + std::string(a.text(id)) + "\": a drafter must share the target's tokenizer");
    }
    if (a.eos() != b.eos())
        throw Error("the draft model ends with token " + std::to_string(b.eos()) + ", the target with " + std::to_string(a.eos()));
}

namespace draft {

std::vector<int32_t> from_model(Session& drafter, std::span<const int32_t> context, int max_tokens, int target_vocab,
                                const df::tokenizer::Tokenizer& tok) {
    // The drafter evaluates the context and all guesses but the last.
    if (max_tokens <= 0 || context.empty() ||
        context.size() + static_cast<size_t>(max_tokens) - 1 > static_cast<size_t>(drafter.n_ctx()))
        return {};
    drafter.set_prompt(context);
    drafter.checkpoint();  // a hybrid drafter's way back here (attention-only ones rewind anyway)
    std::vector<int32_t> guess;
    int32_t next = drafter.argmax();
    for (;;) {
        if (tok.is_eog(next) || next >= target_vocab) break;
        guess.push_back(next);
        if (guess.size() == static_cast<size_t>(max_tokens)) break;
        next = drafter.step(next);
    }
    return guess;
}

}  // namespace draft
}  // namespace diskformer
