#include "runtime/json_tokens.h"

#include <cmath>

namespace diskformer {

using df::tokenizer::TokenType;

JsonTokens::JsonTokens(const df::tokenizer::Tokenizer& tok, const TokenTrie& trie, const JsonSchema* schema,
                       std::string_view before, std::string_view after)
    : tok_(&tok), trie_(&trie), answer_(schema, before, after) {}

bool JsonTokens::special(int32_t t) const {
    const auto type = tok_->type(t);
    return type == TokenType::control || type == TokenType::user_defined;
}

bool JsonTokens::eligible(int32_t t) const {
    const auto type = tok_->type(t);
    return special(t) || type == TokenType::normal || type == TokenType::byte;
}

bool JsonTokens::allows(int32_t t) const {
    if (tok_->is_eog(t)) return answer_.complete();
    if (answer_.complete() || !eligible(t)) return false;
    const std::string_view bytes = tok_->piece(t);
    return !bytes.empty() && answer_.allows(bytes, special(t));
}

void JsonTokens::mask(std::vector<float>& logits) const {
    ok_.assign(logits.size(), 0);
    auto allow = [&](int32_t t) {
        if (static_cast<size_t>(t) < ok_.size()) ok_[static_cast<size_t>(t)] = 1;
    };
    if (answer_.complete()) {
        for (const int32_t e : tok_->eog_ids()) allow(e);
    } else {
        struct Walk {
            JsonAnswer a;
            bool in_object = false;  // some byte went into the object: no special token here
        };
        auto step = [](Walk& w, uint8_t c) {
            bool in = false;
            if (!w.a.advance(c, in)) return false;
            w.in_object = w.in_object || in;
            return true;
        };
        auto leaf = [&](const Walk& w, std::span<const int32_t> ids) {
            for (const int32_t t : ids)
                if (!tok_->is_eog(t) && (!special(t) || !w.in_object)) allow(t);
        };
        if (answer_.free_string()) {
            // Inside a string most tokens are plain text, which leaves the state as it is (up to
            // the UTF-8 reading): those are allowed at once, the rest walked from where they differ.
            std::vector<Walk> plain;
            for (const std::string_view lead : TokenTrie::kPlainLeads) {
                Walk w{answer_, true};
                for (const char c : lead) (void)step(w, static_cast<uint8_t>(c));
                plain.push_back(w);
            }
            for (const int32_t t : trie_->plain_tokens()) allow(t);
            trie_->walk_past_plain(std::span<const Walk>(plain), step, leaf);
        } else {
            trie_->walk(Walk{answer_}, step, leaf);
        }
    }
    for (size_t i = 0; i < logits.size(); ++i)
        if (!ok_[i]) logits[i] = -INFINITY;
}

void JsonTokens::accept(int32_t t) {
    if (!tok_->is_eog(t)) answer_.feed(tok_->piece(t));
}

}  // namespace diskformer
