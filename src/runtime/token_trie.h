// The vocabulary's token texts as a byte trie. Walking it from a state visits every token that
// can follow that state at once, sharing the state of common prefixes and dropping a prefix's
// whole subtree at its first refused byte: JSON mode's mask after a refused choice costs the
// trie nodes the state lets through, not a check of every token (151,936 for Qwen).
//
// Inside a JSON string most of the vocabulary is allowed, and walking every node (~330,000 for
// Qwen3.5) would still cost milliseconds; so the trie also knows which texts are plain string
// text (whole or partial UTF-8 characters a JSON string takes as they are: no '"', '\' or
// controls) and where such text first stops being plain.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
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

    // For a state that plain text leaves as it is (JsonAnswer::free_string), up to the UTF-8
    // reading: plain[k] is that state after the bytes kPlainLeads[k] (k = 0: none; else a
    // character's first bytes, standing for every text that leaves the same continuation bytes
    // due with the same range for the next; utf8_lead).
    static constexpr int kPlainStates = 8;
    static constexpr std::string_view kPlainLeads[kPlainStates] = {"", "\xC2", "\xE1", "\xE0", "\xED", "\xF1", "\xF0", "\xF4"};
    // The ordinary tokens (normal or byte, not end tokens) whose texts are plain: all of them
    // may follow such a state. (Control and user-defined tokens are left out: a JSON string's
    // text never takes them.)
    std::span<const int32_t> plain_tokens() const { return plain_toks_; }
    // Every other token from such a state, as walk does: from the first byte where its text
    // stops being plain, with plain[k] the state before that byte.
    template <class State, class Step, class Leaf>
    void walk_past_plain(std::span<const State> plain, Step&& step, Leaf&& leaf) const {
        for (const Frontier& f : frontier_) {
            State t = plain[f.state];
            if (!step(t, nodes_[f.node].byte)) continue;
            if (nodes_[f.node].tok_count) leaf(t, tokens_at(f.node));
            walk_from(f.node, t, step, leaf);
        }
    }

private:
    static constexpr uint8_t kNotPlain = 0xFF;
    struct Node {
        uint32_t end;        // one past the node's subtree (nodes are in preorder)
        uint32_t tok_begin;  // its tokens: toks_[tok_begin, tok_begin + tok_count)
        uint16_t tok_count;
        uint8_t byte;        // the edge from its parent
        uint8_t plain;       // its text is plain: the kPlainLeads index of the state it leaves; else kNotPlain
    };

    struct Frontier {
        uint32_t node;  // its text is not plain, its parent's is
        uint8_t state;  // the parent's Node::plain
    };

    std::span<const int32_t> tokens_at(uint32_t c) const { return {toks_.data() + nodes_[c].tok_begin, nodes_[c].tok_count}; }

    template <class State, class Step, class Leaf>
    void walk_from(uint32_t node, const State& s, Step& step, Leaf& leaf) const {
        for (uint32_t c = node + 1; c < nodes_[node].end; c = nodes_[c].end) {
            State t = s;
            if (!step(t, nodes_[c].byte)) continue;
            if (nodes_[c].tok_count) leaf(t, tokens_at(c));
            walk_from(c, t, step, leaf);
        }
    }

    std::vector<Node> nodes_;  // node 0: the root (the empty text)
    std::vector<int32_t> toks_;
    std::vector<int32_t> plain_toks_;
    std::vector<Frontier> frontier_;
};

}  // namespace diskformer
