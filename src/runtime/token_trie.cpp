#include "runtime/token_trie.h"

#include <algorithm>
#include <string_view>

namespace diskformer {

TokenTrie::TokenTrie(const df::tokenizer::Tokenizer& tok) {
    using df::tokenizer::TokenType;
    std::vector<std::pair<std::string_view, int32_t>> pieces;
    for (size_t id = 0; id < tok.vocab_size(); ++id) {
        const auto t = static_cast<int32_t>(id);
        const auto type = tok.type(t);
        if (type == TokenType::unused || type == TokenType::unknown || type == TokenType::undefined) continue;
        if (const std::string_view p = tok.piece(t); !p.empty()) pieces.emplace_back(p, t);
    }
    std::sort(pieces.begin(), pieces.end());
    // Preorder from sorted texts: the path to the previous text stays on a stack; each text pops
    // to its common prefix with that one (closing those subtrees) and pushes its own bytes.
    nodes_.push_back({0, 0, 0, 0});
    std::vector<uint32_t> path{0};
    std::string_view prev;
    for (const auto& [text, id] : pieces) {
        size_t common = 0;
        while (common < text.size() && common < prev.size() && text[common] == prev[common]) ++common;
        while (path.size() > common + 1) {
            nodes_[path.back()].end = static_cast<uint32_t>(nodes_.size());
            path.pop_back();
        }
        for (size_t i = common; i < text.size(); ++i) {
            path.push_back(static_cast<uint32_t>(nodes_.size()));
            nodes_.push_back({0, 0, 0, static_cast<uint8_t>(text[i])});
        }
        Node& n = nodes_[path.back()];
        if (n.tok_count == 0) n.tok_begin = static_cast<uint32_t>(toks_.size());
        toks_.push_back(id);  // equal texts are neighbours: one node's tokens stay contiguous
        ++n.tok_count;
        prev = text;
    }
    while (!path.empty()) {
        nodes_[path.back()].end = static_cast<uint32_t>(nodes_.size());
        path.pop_back();
    }
}

}  // namespace diskformer
