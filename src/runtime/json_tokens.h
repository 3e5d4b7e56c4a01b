// JSON mode at the level of tokens: which of the vocabulary's tokens may come next in an answer
// that must be `before`, one JSON object (a schema's, when given), `after` (JsonAnswer), and
// the answer so far advanced by the chosen ones. generate() asks allows() for the sampler's
// choice and, when it is refused, mask() for all tokens at once (through the TokenTrie).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "runtime/json_prefix.h"
#include "runtime/token_trie.h"
#include "tokenizer/tokenizer.h"

namespace diskformer {

class JsonTokens {
public:
    // tok, trie, schema and the literals must outlive this.
    JsonTokens(const df::tokenizer::Tokenizer& tok, const TokenTrie& trie, const JsonSchema* schema,
               std::string_view before, std::string_view after);

    // End tokens only once the answer is complete; other tokens whose text keeps it valid,
    // special ones (control, user-defined) only as part of the literals.
    bool allows(int32_t token) const;
    // Sets every refused token's logit to -inf.
    void mask(std::vector<float>& logits) const;
    void accept(int32_t token);

private:
    bool special(int32_t token) const;
    bool eligible(int32_t token) const;  // renders to text of its own (not unused or unknown)

    const df::tokenizer::Tokenizer* tok_;
    const TokenTrie* trie_;
    JsonAnswer answer_;
    mutable std::vector<uint8_t> ok_;
};

}  // namespace diskformer
