// Prompt-lookup drafts (draft.h).
#include "runtime/draft.h"

#include <algorithm>

namespace diskformer::draft {

std::vector<int32_t> prompt_lookup(std::span<const int32_t> context, int max_tokens, int max_ngram, int min_ngram) {
    const size_t n = context.size();
    if (max_tokens <= 0) return {};
    for (int g = std::min<int>(max_ngram, static_cast<int>(n) - 1); g >= std::max(1, min_ngram); --g) {
        const auto suffix = context.last(static_cast<size_t>(g));
        // The most recent occurrence that ends before the suffix itself.
        for (size_t start = n - static_cast<size_t>(g); start-- > 0;) {
            if (!std::equal(suffix.begin(), suffix.end(), context.begin() + static_cast<std::ptrdiff_t>(start))) continue;
            const size_t from = start + static_cast<size_t>(g);
            const size_t len = std::min(static_cast<size_t>(max_tokens), n - from);
            return {context.begin() + static_cast<std::ptrdiff_t>(from), context.begin() + static_cast<std::ptrdiff_t>(from + len)};
        }
    }
    return {};
}

}  // namespace diskformer::draft
