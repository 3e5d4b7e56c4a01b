// A JSON Schema "pattern" for JSON mode: the regular expression (ECMA-262 syntax, the subset
// that is regular) as a Thompson NFA over code points, so that a string value's text can be
// checked a character at a time: which code points may come next, and whether it may end.
//
// Supported: literals, `.`, classes `[...]` (ranges, negation, \d \w \s inside), the escapes
// \d \D \w \W \s \S \t \n \r \f \v \0 \xHH \uXXXX and escaped punctuation, groups `( )`,
// `(?: )`, `(?<name> )`, alternation, the quantifiers * + ? {n} {n,} {n,m} (lazy forms match the
// same strings), `^` / `$` at the start / end of the pattern or of a top-level alternative. As
// in JSON Schema the pattern is not anchored: without `^` / `$` it may match anywhere in the
// string. Refused with a clear error: backreferences, lookaround, word boundaries, \p{...},
// anchors elsewhere, patterns above kMaxStates states once repetitions are expanded.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace diskformer {

class JsonRegex {
public:
    static constexpr int kMaxStates = 512;
    using Set = std::array<uint64_t, kMaxStates / 64>;  // states the text so far may be in

    // Throws diskformer::Error naming the construct it cannot enforce.
    static JsonRegex compile(std::string_view pattern);

    const Set& start() const { return start_; }
    // The states after code point cp (empty: the text can no longer match).
    Set next(const Set& s, uint32_t cp) const;
    // Whether some code point in [lo, hi] may come next, after which the text can still end
    // with between at_least and at_most more code points (string length bounds; see fits).
    bool any_in(const Set& s, uint32_t lo, uint32_t hi, int at_least = 0, int at_most = kUnbounded) const;
    // Whether the text can end matched after between at_least and at_most more code points: some
    // state's shortest way to the end is <= at_most and its longest >= at_least. (Exact for
    // either bound alone; with both, a state whose lengths have a gap around the window, e.g.
    // (ab)+ asked for exactly 3 more, passes.)
    bool fits(const Set& s, int at_least, int at_most) const;
    static constexpr int kUnbounded = 1 << 30;
    // Whether the text so far matches (the string may end here).
    bool accepts(const Set& s) const { return (s[accept_ / 64] >> (accept_ % 64)) & 1; }
    static bool empty(const Set& s);
    // Whether the whole of a UTF-8 text matches.
    bool matches(std::string_view utf8) const;

    using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;  // inclusive, sorted, disjoint

private:
    struct State {
        Ranges ranges;  // a consuming state (non-empty) moves to `out` on these code points
        int out = -1;
        std::vector<int> eps;  // epsilon edges
    };
    std::vector<State> states_;
    std::vector<Set> closure_;  // per state: the consuming / accepting states reachable by epsilons, live only
    // Per state of the sets: the fewest and most code points to the end (kUnbounded: a loop).
    std::vector<int> shortest_, longest_;
    Set start_{};
    int accept_ = 0;

    friend class RegexBuilder;
};

}  // namespace diskformer
