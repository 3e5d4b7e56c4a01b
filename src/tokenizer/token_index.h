// Spelling → id lookup over a vocabulary: a flat open-addressing table over one contiguous copy
// of the spellings, because loading a 152k vocabulary makes ~450k lookups (the tokens, then both
// parts and the result of every merge) and a node-based std::unordered_map over separately
// allocated strings spent most of the load time in cache misses.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace df::tokenizer {

class TokenIndex {
public:
    TokenIndex() = default;
    // Indexes texts; a repeated spelling maps to its last id, as llama.cpp's token_to_id does.
    explicit TokenIndex(const std::vector<std::string>& texts);

    // The id spelled text, or -1.
    int32_t find(std::string_view text) const;

private:
    struct Slot {
        uint32_t hash;
        int32_t id;  // -1: empty
    };
    size_t probe(std::string_view text, uint32_t hash) const;
    std::string_view text_of(int32_t id) const {
        return std::string_view(blob_).substr(offsets_[id], offsets_[id + 1] - offsets_[id]);
    }

    std::string blob_;               // every spelling, back to back
    std::vector<size_t> offsets_;    // id -> start in blob_, plus the end
    std::vector<Slot> slots_;
    size_t mask_ = 0;
};

}  // namespace df::tokenizer
