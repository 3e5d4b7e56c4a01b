// The vocabulary's token texts as a byte trie. Walking it from a state visits every token that
// can follow that state at once, sharing the state of common prefixes and dropping a prefix's
// whole subtree at its first refused byte: JSON mode's mask after a refused choice costs the
// trie nodes the state lets through, not a check of every token (151,936 for Qwen).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace diskformer {

class TokenTrie {
public:
    // Every token that renders to bytes (normal, byte, control and user-defined tokens; end
    // tokens too: callers treat them apart).
    explicit TokenTrie(const df::tokenizer::Tokenizer& tok);

    // For every token whose bytes `step` accepts one by one from `root` (State copied per trie
    // node), calls leaf(state after its last byte, token ids with exactly those bytes).
    template <class State, class Step, class Leaf>
    void walk(const State& root, Step&& step, Leaf&& leaf) const {
        walk_from(0, root, step, leaf);
    }

private:
    struct Node {
        uint32_t end;        // one past the node's subtree (nodes are in preorder)
        uint32_t tok_begin;  // its tokens: toks_[tok_begin, tok_begin + tok_count)
        uint16_t tok_count;
        uint8_t byte;        // the edge from its parent
    };

    template <class State, class Step, class Leaf>
    void walk_from(uint32_t node, const State& s, Step& step, Leaf& leaf) const {
        for (uint32_t c = node + 1; c < nodes_[node].end; c = nodes_[c].end) {
            State t = s;
            if (!step(t, nodes_[c].byte)) continue;
            if (nodes_[c].tok_count) leaf(t, std::span<const int32_t>(toks_.data() + nodes_[c].tok_begin, nodes_[c].tok_count));
            walk_from(c, t, step, leaf);
        }
    }

    std::vector<Node> nodes_;  // node 0: the root (the empty text)
    std::vector<int32_t> toks_;
};

}  // namespace diskformer
