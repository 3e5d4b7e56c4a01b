#include "tokenizer/token_index.h"

#include <bit>
#include <algorithm>
#include <functional>

namespace df::tokenizer {

namespace {
uint32_t hash_of(std::string_view s) {
    const size_t h = std::hash<std::string_view>{}(s);
    return static_cast<uint32_t>(h ^ (h >> 32));
}
}  // namespace

TokenIndex::TokenIndex(const std::vector<std::string>& texts) {
    offsets_.reserve(texts.size() + 1);
    for (const auto& t : texts) {
        offsets_.push_back(blob_.size());
        blob_.append(t);
    }
    offsets_.push_back(blob_.size());
    // At most half full keeps linear-probe runs short.
    const size_t cap = std::bit_ceil(std::max<size_t>(16, texts.size() * 2));
    slots_.assign(cap, Slot{0, -1});
    mask_ = cap - 1;
    for (size_t i = 0; i < texts.size(); ++i) {
        const std::string_view t = texts[i];
        const uint32_t h = hash_of(t);
        slots_[probe(t, h)] = Slot{h, static_cast<int32_t>(i)};
    }
}

size_t TokenIndex::probe(std::string_view text, uint32_t hash) const {
    for (size_t i = hash & mask_;; i = (i + 1) & mask_) {
        const Slot& s = slots_[i];
        if (s.id < 0 || (s.hash == hash && text_of(s.id) == text)) return i;
    }
}

int32_t TokenIndex::find(std::string_view text) const {
    if (slots_.empty()) return -1;
    return slots_[probe(text, hash_of(text))].id;
}

}  // namespace df::tokenizer
