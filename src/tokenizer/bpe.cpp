#include "tokenizer/bpe.h"

#include <algorithm>
#include <bit>
#include <functional>
#include <unordered_map>

#include "tokenizer/byte_map.h"
#include "tokenizer/tokenizer.h"

namespace df::tokenizer {

namespace {
uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}
}  // namespace

void Bpe::PairTable::reserve(size_t n) {
    const size_t cap = std::bit_ceil(std::max<size_t>(16, n * 2));  // at most half full
    slots_.assign(cap, Slot{0, Merge{-1, -1}});
    mask_ = cap - 1;
    size_ = 0;
}

size_t Bpe::PairTable::slot_of(uint64_t key) const {
    // Fibonacci hashing spreads the (left, right) bits over the table index.
    size_t i = static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 32) & mask_;
    while (slots_[i].merge.rank >= 0 && slots_[i].key != key) i = (i + 1) & mask_;
    return i;
}

void Bpe::PairTable::insert(int32_t a, int32_t b, Merge m) {
    if ((size_ + 1) * 2 > slots_.size()) {
        std::vector<Slot> old = std::move(slots_);
        reserve(std::max<size_t>(size_ * 2, 16));
        for (const Slot& s : old)
            if (s.merge.rank >= 0) slots_[slot_of(s.key)] = s, ++size_;
    }
    const uint64_t key = pair_key(a, b);
    Slot& s = slots_[slot_of(key)];
    if (s.merge.rank >= 0) return;
    s = Slot{key, m};
    ++size_;
}

const Bpe::Merge* Bpe::PairTable::find(int32_t a, int32_t b) const {
    if (slots_.empty()) return nullptr;
    const Slot& s = slots_[slot_of(pair_key(a, b))];
    return s.merge.rank >= 0 ? &s.merge : nullptr;
}

Bpe::Bpe(const Lookup& lookup, int32_t vocab_size, std::span<const std::string> merges)
    : vocab_size_(vocab_size) {
    // Spellings that are not tokens (merge parts or results) get ids past the vocabulary, one
    // per distinct spelling, so "same id" still means "same text".
    std::unordered_map<std::string, int32_t> extra;
    auto symbol = [&](std::string_view text) -> int32_t {
        int32_t id = lookup(text);
        if (id >= 0) return id;
        auto [it, inserted] = extra.try_emplace(std::string(text), 0);
        if (inserted) it->second = vocab_size_ + static_cast<int32_t>(extra.size()) - 1;
        return it->second;
    };
    for (int b = 0; b < 256; ++b) {
        const char c = static_cast<char>(b);
        byte_symbol_[b] = symbol(byte_encode(std::string_view(&c, 1)));
    }
    merges_.reserve(merges.size());
    std::string joined;
    for (size_t rank = 0; rank < merges.size(); ++rank) {
        const std::string& m = merges[rank];
        // llama.cpp splits at the first space after the first byte.
        const size_t sp = m.find(' ', 1);
        if (sp == std::string::npos)
            throw Error("tokenizer.ggml.merges[" + std::to_string(rank) + "] = \"" + m +
                        "\" has no space separating its two parts");
        const std::string_view a(m.data(), sp), b(m.data() + sp + 1, m.size() - sp - 1);
        joined.assign(a);
        joined.append(b);
        // The first (lowest) rank of a duplicated pair stays, as with llama.cpp's emplace.
        merges_.insert(symbol(a), symbol(b), Merge{static_cast<int32_t>(rank), symbol(joined)});
    }
}

void Bpe::encode_word(std::string_view word, std::vector<int32_t>& out) const {
    const size_t n = word.size();
    const auto* s = reinterpret_cast<const uint8_t*>(word.data());
    auto emit_bytes = [&](size_t begin, size_t len) {
        for (size_t i = begin; i < begin + len; ++i) {
            const int32_t id = byte_symbol_[s[i]];
            // A byte with no token is dropped, as in llama.cpp.
            if (id < vocab_size_) out.push_back(id);
        }
    };
    if (n == 1) {
        emit_bytes(0, 1);
        return;
    }
    struct Symbol {
        int32_t id, prev, next;
        uint32_t begin, len;
    };
    // A queued pair is (rank << 32 | left position): one 64-bit compare orders by rank, then
    // leftmost, and 8-byte entries keep the heap cache-friendly on very long words. Whether
    // the pair is still current is checked when it is popped (see below).
    thread_local std::vector<Symbol> sym;
    thread_local std::vector<uint64_t> heap;
    sym.resize(n);
    heap.clear();
    for (size_t i = 0; i < n; ++i) {
        sym[i] = {byte_symbol_[s[i]], static_cast<int32_t>(i) - 1,
                  i + 1 < n ? static_cast<int32_t>(i) + 1 : -1, static_cast<uint32_t>(i), 1};
    }
    const auto later = std::greater<uint64_t>();
    auto queue = [&](int32_t left) {
        const Merge* m = merges_.find(sym[left].id, sym[sym[left].next].id);
        if (!m) return;
        heap.push_back((static_cast<uint64_t>(m->rank) << 32) | static_cast<uint32_t>(left));
        std::push_heap(heap.begin(), heap.end(), later);
    };
    for (size_t i = 0; i + 1 < n; ++i) {
        const Merge* m = merges_.find(sym[i].id, sym[i + 1].id);
        if (m) heap.push_back((static_cast<uint64_t>(m->rank) << 32) | i);
    }
    std::make_heap(heap.begin(), heap.end(), later);
    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), later);
        const uint64_t top = heap.back();
        heap.pop_back();
        const auto left = static_cast<int32_t>(top & 0xFFFFFFFFu);
        const auto rank = static_cast<int32_t>(top >> 32);
        Symbol& l = sym[left];
        if (l.len == 0 || l.next < 0) continue;  // absorbed, or nothing to its right any more
        // Stale unless the pair now at this position is the one queued: each rank is one
        // (left, right) pair, so an equal rank means the same pair. A merged symbol's id
        // changes, so a pair queued before a merge of either side no longer matches.
        const Merge* m = merges_.find(l.id, sym[l.next].id);
        if (!m || m->rank != rank) continue;
        Symbol& r = sym[l.next];
        l.id = m->result;
        l.len += r.len;
        r.len = 0;
        l.next = r.next;
        if (l.next >= 0) sym[l.next].prev = left;
        if (l.prev >= 0) queue(l.prev);
        if (l.next >= 0) queue(left);
    }
    for (int32_t i = 0; i >= 0; i = sym[i].next) {
        if (sym[i].id < vocab_size_) {
            out.push_back(sym[i].id);
        } else {
            emit_bytes(sym[i].begin, sym[i].len);
        }
    }
}

}  // namespace df::tokenizer
