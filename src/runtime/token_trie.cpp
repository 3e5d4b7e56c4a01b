#include "runtime/token_trie.h"

#include <algorithm>
#include <string_view>

#include "runtime/utf8_lead.h"

namespace diskformer {

namespace {

// kPlainLeads' index of the UTF-8 reading its bytes leave: continuation bytes due and the next
// one's range (utf8_lead: only the leads E0, ED, F0 and F4 narrow it).
uint8_t plain_index(unsigned left, unsigned lo, unsigned hi) {
    switch (left) {
        case 0: return 0;
        case 1: return 1;
        case 2: return lo == 0xA0 ? 3 : hi == 0x9F ? 4 : 2;
        default: return lo == 0x90 ? 6 : hi == 0x8F ? 7 : 5;
    }
}

}  // namespace

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
    nodes_.push_back({0, 0, 0, 0, 0});
    std::vector<uint32_t> path{0};
    // Per path entry, the UTF-8 reading after its byte: continuation bytes still due (0: whole
    // characters), the next one's range, and whether every byte so far was plain string text.
    struct Utf8 {
        unsigned left = 0, lo = 0x80, hi = 0xBF;
        bool ok = true;
    };
    std::vector<Utf8> text_at{Utf8{}};
    std::string_view prev;
    for (const auto& [text, id] : pieces) {
        size_t common = 0;
        while (common < text.size() && common < prev.size() && text[common] == prev[common]) ++common;
        while (path.size() > common + 1) {
            nodes_[path.back()].end = static_cast<uint32_t>(nodes_.size());
            path.pop_back();
            text_at.pop_back();
        }
        for (size_t i = common; i < text.size(); ++i) {
            const auto c = static_cast<unsigned char>(text[i]);
            Utf8 u = text_at.back();
            if (u.left > 0) {
                u.ok = u.ok && c >= u.lo && c <= u.hi;
                --u.left;
                u.lo = 0x80;
                u.hi = 0xBF;
            } else if (c < 0x80) {
                u.ok = u.ok && c >= 0x20 && c != '"' && c != '\\';
            } else {
                u.ok = u.ok && utf8_lead(c, u.left, u.lo, u.hi);
            }
            path.push_back(static_cast<uint32_t>(nodes_.size()));
            text_at.push_back(u);
            nodes_.push_back({0, 0, 0, c, u.ok ? plain_index(u.left, u.lo, u.hi) : kNotPlain});
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
    // Plain texts' ordinary tokens, and where plain text ends (a node's parent precedes it).
    std::vector<uint32_t> parent(nodes_.size(), 0);
    for (uint32_t n = 0; n < nodes_.size(); ++n)
        for (uint32_t c = n + 1; c < nodes_[n].end; c = nodes_[c].end) parent[c] = n;
    for (uint32_t c = 1; c < nodes_.size(); ++c) {
        const Node& n = nodes_[c];
        if (n.plain == kNotPlain) {
            if (nodes_[parent[c]].plain != kNotPlain) frontier_.push_back({c, nodes_[parent[c]].plain});
            continue;
        }
        for (const int32_t t : tokens_at(c)) {
            const auto type = tok.type(t);
            if ((type == TokenType::normal || type == TokenType::byte) && !tok.is_eog(t)) plain_toks_.push_back(t);
        }
    }
}

}  // namespace diskformer
