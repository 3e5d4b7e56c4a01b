// The special-token pass that runs before the pre-tokenizer (llama.cpp's tokenizer_st_partition):
// control, unknown and user-defined tokens are cut out of the raw text as single ids.
//
// llama.cpp places the tokens one at a time, longest text first, each at every non-overlapping
// occurrence (left to right) that lies wholly in text no longer token has taken. This class gives
// the same result without scanning the text once per special token: one pass over a trie finds
// every occurrence of every token, then the occurrences are accepted in that same order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

namespace df::tokenizer {

class SpecialSplitter {
public:
    struct Token {
        int32_t id;
        std::string_view text;  // must outlive the splitter
        bool control;           // control/unknown: only matched where parse_special allows
    };
    // A span of the text: a special token (id >= 0) or raw text to pre-tokenize (id = -1).
    struct Fragment {
        size_t begin, end;
        int32_t id;
    };
    // Says whether a control token may be matched over text[begin, end).
    using ControlAllowed = std::function<bool(size_t begin, size_t end)>;

    SpecialSplitter() = default;
    explicit SpecialSplitter(std::vector<Token> tokens);

    // Cuts text into fragments covering it in order. User-defined tokens always match; control
    // tokens only where allowed says so (null: never).
    std::vector<Fragment> split(std::string_view text, const ControlAllowed& allowed) const;

private:
    struct Node {
        std::vector<std::pair<uint8_t, int32_t>> next;  // sorted by byte
        int32_t token = -1;                             // index into tokens_ ending here
    };
    int32_t child(int32_t node, uint8_t b) const;

    std::vector<Token> tokens_;  // sorted by priority: longer first, then lower id
    std::vector<Node> nodes_;    // nodes_[0] is the root
    int32_t root_next_[256] = {};  // the root's children, for a fast first-byte test
};

}  // namespace df::tokenizer
