// Byte-level BPE merging (llama.cpp's llm_tokenizer_bpe_session::tokenize, keyed by ids).
//
// A word starts as one symbol per byte; the adjacent pair with the lowest merge rank (leftmost
// on ties) merges until no pair has a rank; each final symbol is its vocabulary id, or, when the
// merged text is not in the vocabulary, one byte token per byte. Symbols are ids rather than
// strings: merge results missing from the vocabulary get ids past its end.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace df::tokenizer {

class Bpe {
public:
    // Looks a vocabulary spelling up: its id, or -1.
    using Lookup = std::function<int32_t(std::string_view)>;

    Bpe() = default;
    // merges: "A B" spellings in rank order (rank = index); a line without a separating space
    // throws tokenizer::Error naming it.
    Bpe(const Lookup& lookup, int32_t vocab_size, std::span<const std::string> merges);

    // Appends the ids of one pre-tokenized word (raw bytes, not byte-encoded) to out.
    void encode_word(std::string_view word, std::vector<int32_t>& out) const;

    size_t merge_count() const { return merges_.size(); }

private:
    struct Merge {
        int32_t rank;
        int32_t result;
    };
    // (left, right) -> merge, open addressing: no allocation per entry, and a probe is
    // usually one cache line, which matters when BPE looks up every adjacent pair.
    class PairTable {
    public:
        void reserve(size_t n);
        // Inserts unless the pair is present (the first, lowest rank wins).
        void insert(int32_t a, int32_t b, Merge m);
        const Merge* find(int32_t a, int32_t b) const;
        size_t size() const { return size_; }

    private:
        struct Slot {
            uint64_t key;
            Merge merge;  // rank < 0: empty
        };
        size_t slot_of(uint64_t key) const;
        std::vector<Slot> slots_;
        size_t mask_ = 0, size_ = 0;
    };

    int32_t vocab_size_ = 0;
    int32_t byte_symbol_[256] = {};  // symbol id of each byte (>= vocab_size_ if not a token)
    PairTable merges_;
};

}  // namespace df::tokenizer
