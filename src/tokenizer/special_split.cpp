#include "tokenizer/special_split.h"

#include <algorithm>

namespace df::tokenizer {

SpecialSplitter::SpecialSplitter(std::vector<Token> tokens) : tokens_(std::move(tokens)) {
    std::erase_if(tokens_, [](const Token& t) { return t.text.empty(); });
    // llama.cpp sorts by length only (ties in unspecified order); lower id first makes ours
    // deterministic and matters only for two equally long tokens that overlap in the text.
    std::sort(tokens_.begin(), tokens_.end(), [](const Token& a, const Token& b) {
        return a.text.size() != b.text.size() ? a.text.size() > b.text.size() : a.id < b.id;
    });
    std::fill(std::begin(root_next_), std::end(root_next_), -1);
    nodes_.emplace_back();
    for (size_t t = 0; t < tokens_.size(); ++t) {
        int32_t node = 0;
        for (char c : tokens_[t].text) {
            const auto b = static_cast<uint8_t>(c);
            int32_t nx = child(node, b);
            if (nx < 0) {
                nx = static_cast<int32_t>(nodes_.size());
                nodes_.emplace_back();
                auto& kids = nodes_[node].next;
                auto at = std::lower_bound(kids.begin(), kids.end(), std::make_pair(b, int32_t{0}));
                kids.insert(at, {b, nx});
                if (node == 0) root_next_[b] = nx;
            }
            node = nx;
        }
        // Two tokens with the same text: the first in priority order wins, as in llama.cpp
        // where the later one never finds text left to match.
        if (nodes_[node].token < 0) nodes_[node].token = static_cast<int32_t>(t);
    }
}

int32_t SpecialSplitter::child(int32_t node, uint8_t b) const {
    if (node == 0) return nodes_.size() > 1 ? root_next_[b] : -1;
    const auto& kids = nodes_[node].next;
    auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(b, int32_t{0}));
    return it != kids.end() && it->first == b ? it->second : -1;
}

std::vector<SpecialSplitter::Fragment> SpecialSplitter::split(std::string_view text,
                                                              const ControlAllowed& allowed) const {
    // 1. Every occurrence of every token, as (priority, position).
    std::vector<std::pair<uint32_t, size_t>> hits;
    if (nodes_.size() > 1) {
        const auto* s = reinterpret_cast<const uint8_t*>(text.data());
        for (size_t p = 0; p < text.size(); ++p) {
            int32_t node = root_next_[s[p]];
            for (size_t q = p + 1; node >= 0; ++q) {
                const int32_t t = nodes_[node].token;
                if (t >= 0) {
                    const Token& tok = tokens_[t];
                    if (!tok.control || (allowed && allowed(p, q))) hits.emplace_back(t, p);
                }
                if (q >= text.size()) break;
                node = child(node, s[q]);
            }
        }
    }
    std::vector<Fragment> out;
    if (hits.empty()) {
        if (!text.empty()) out.push_back({0, text.size(), -1});
        return out;
    }
    // 2. Accept in llama.cpp's order: by priority, then left to right, skipping an occurrence
    //    that overlaps the previous accepted one of the same token or any accepted token.
    std::sort(hits.begin(), hits.end());
    std::vector<uint8_t> taken(text.size(), 0);
    std::vector<Fragment> placed;
    size_t last_end = 0;
    uint32_t last_tok = UINT32_MAX;
    for (auto [t, p] : hits) {
        const size_t len = tokens_[t].text.size();
        if (t != last_tok) last_end = 0, last_tok = t;
        if (p < last_end) continue;
        if (std::any_of(taken.begin() + p, taken.begin() + p + len, [](uint8_t x) { return x; }))
            continue;
        std::fill(taken.begin() + p, taken.begin() + p + len, 1);
        placed.push_back({p, p + len, tokens_[t].id});
        last_end = p + len;
    }
    // 3. Fill the gaps with raw text.
    std::sort(placed.begin(), placed.end(),
              [](const Fragment& a, const Fragment& b) { return a.begin < b.begin; });
    size_t pos = 0;
    for (const Fragment& f : placed) {
        if (f.begin > pos) out.push_back({pos, f.begin, -1});
        out.push_back(f);
        pos = f.end;
    }
    if (pos < text.size()) out.push_back({pos, text.size(), -1});
    return out;
}

}  // namespace df::tokenizer
