// Drafts for speculative decoding without a second model (prompt lookup): when the context's
// last tokens occurred before, the tokens that followed them then are a cheap guess at what
// follows now (code, quotes, lists, repeated names). Session::verify() keeps what the target's
// own choices (greedy or sampled) agree with, so a wrong guess costs time, never a different
// answer.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace diskformer::draft {

// The tokens that followed the most recent earlier occurrence of the longest suffix of
// `context` of max_ngram .. min_ngram tokens, at most max_tokens of them; empty if none.
std::vector<int32_t> prompt_lookup(std::span<const int32_t> context, int max_tokens, int max_ngram = 3,
                                   int min_ngram = 2);

}  // namespace diskformer::draft
