// Prompt-lookup drafts: the tokens after the most recent earlier occurrence of the longest
// suffix of 3 down to 2 tokens.
#include <gtest/gtest.h>

#include <vector>

#include "runtime/draft.h"

namespace {

using diskformer::draft::prompt_lookup;
using V = std::vector<int32_t>;

TEST(PromptLookup, TakesWhatFollowedTheMostRecentLongestMatch) {
    // [7 8 9] occurred at 0 and at 5; the most recent (5) is followed by 3 1.
    EXPECT_EQ(prompt_lookup(V{7, 8, 9, 4, 4, 7, 8, 9, 3, 1, 0, 7, 8, 9}, 2), (V{3, 1}));
    EXPECT_EQ(prompt_lookup(V{7, 8, 9, 4, 4, 7, 8, 9, 3, 1, 0, 7, 8, 9}, 10), (V{3, 1, 0, 7, 8, 9}));
    // No 3-gram match, a 2-gram one ([5 6] at 1).
    EXPECT_EQ(prompt_lookup(V{1, 5, 6, 2, 9, 5, 6}, 3), (V{2, 9, 5}));
    // A run overlaps itself: [4 4 4] at 1 is followed by the last 4.
    EXPECT_EQ(prompt_lookup(V{3, 4, 4, 4, 4}, 5), (V{4}));
}

TEST(PromptLookup, NothingWithoutAMatchOrRoom) {
    EXPECT_TRUE(prompt_lookup(V{1, 2, 3, 4, 5}, 4).empty());
    EXPECT_TRUE(prompt_lookup(V{1, 2, 1, 2}, 0).empty());
    EXPECT_TRUE(prompt_lookup(V{}, 4).empty());
    EXPECT_TRUE(prompt_lookup(V{5}, 4).empty());
    EXPECT_TRUE(prompt_lookup(V{1, 2, 3, 1}, 4).empty()) << "single tokens are too weak a match by default";
    EXPECT_EQ(prompt_lookup(V{1, 2, 3, 1}, 4, 3, 1), (V{2, 3, 1}));
}

}  // namespace
