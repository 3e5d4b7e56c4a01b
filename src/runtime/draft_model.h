// Drafts from a draft model: a smaller model of the target's vocabulary guesses what follows by
// its own greedy decoding (GenerateOptions::drafter). Session::verify keeps what the target's
// own choices (greedy or sampled) agree with, so a poor drafter costs time, never a different
// answer.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "diskformer/diskformer.h"
#include "tokenizer/tokenizer.h"

namespace diskformer::draft {

// Up to max_tokens tokens that `drafter`'s greedy decoding puts after `context` (whose last
// token the target has not evaluated yet), ending before an end-of-generation token or a token
// outside the target's n_vocab; empty when the drafter's context cannot take them. The drafter
// then holds `context` and all the guesses but the last; a hybrid drafter also keeps a
// checkpoint at the end of `context`, so the next call resumes there whatever the target kept.
std::vector<int32_t> from_model(Session& drafter, std::span<const int32_t> context, int max_tokens,
                                int target_vocab, const df::tokenizer::Tokenizer& tok);

}  // namespace diskformer::draft
