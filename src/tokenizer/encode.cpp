// Text to ids: special tokens, then pre-tokenizer words, then BPE per word.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace df::tokenizer {

namespace {

// Ids of the words seen so far in one encode call. Natural text repeats a few thousand words,
// so caching them skips most BPE work; the cache lives per call to stay lock-free.
struct WordCache {
    struct Hash {
        using is_transparent = void;
        size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
    };
    std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, Hash, std::equal_to<>> spans;
    std::vector<int32_t> ids;
};

}  // namespace

struct Tokenizer::Impl::Scratch {
    WordCache cache;
    Utf8Canonical canon;
    std::vector<size_t> ends;
};

void Tokenizer::Impl::encode_raw(std::string_view raw, Scratch& sc,
                                 std::vector<int32_t>& out) const {
    std::string_view text = raw, subject = raw;
    if (!utf8_is_canonical(raw)) {
        utf8_canonicalize(raw, sc.canon);
        text = sc.canon.text;
        subject = sc.canon.has_surrogates ? std::string_view(sc.canon.subject) : text;
    }
    sc.ends.clear();
    splitter->split(subject, sc.ends);
    size_t begin = 0;
    for (size_t end : sc.ends) {
        const std::string_view word = text.substr(begin, end - begin);
        begin = end;
        if (word.size() == 1) {  // one byte: no merges to try, not worth a cache entry
            bpe.encode_word(word, out);
            continue;
        }
        auto it = sc.cache.spans.find(word);
        if (it == sc.cache.spans.end()) {
            const auto first = static_cast<uint32_t>(sc.cache.ids.size());
            bpe.encode_word(word, sc.cache.ids);
            const auto count = static_cast<uint32_t>(sc.cache.ids.size()) - first;
            it = sc.cache.spans.emplace(std::string(word), std::make_pair(first, count)).first;
        }
        const auto [first, count] = it->second;
        out.insert(out.end(), sc.cache.ids.begin() + first, sc.cache.ids.begin() + first + count);
    }
}

std::vector<int32_t> Tokenizer::Impl::encode(std::string_view text,
                                             const SpecialSplitter::ControlAllowed& allowed) const {
    // Positions inside a word are 32-bit (see Bpe); no real prompt comes near this.
    if (text.size() > static_cast<size_t>(INT32_MAX))
        throw Error("text of " + std::to_string(text.size()) +
                    " bytes is too long to tokenize (limit 2 GiB)");
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 4);
    Scratch sc;
    for (const auto& frag : special.split(text, allowed)) {
        if (frag.id >= 0) {
            out.push_back(frag.id);
        } else {
            encode_raw(text.substr(frag.begin, frag.end - frag.begin), sc, out);
        }
    }
    return out;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
    if (!parse_special) return impl_->encode(text, nullptr);
    return impl_->encode(text, [](size_t, size_t) { return true; });
}

std::vector<int32_t> Tokenizer::encode(std::span<const TextSegment> segments) const {
    std::string joined;
    std::vector<std::pair<size_t, size_t>> open;  // byte ranges where control tokens may match
    for (const auto& seg : segments) {
        const size_t b = joined.size();
        joined.append(seg.text);
        if (!seg.parse_special || seg.text.empty()) continue;
        if (!open.empty() && open.back().second == b) {
            open.back().second = joined.size();
        } else {
            open.emplace_back(b, joined.size());
        }
    }
    return impl_->encode(joined, [&open](size_t b, size_t e) {
        auto it = std::upper_bound(open.begin(), open.end(), b,
                                   [](size_t x, const auto& r) { return x < r.first; });
        return it != open.begin() && std::prev(it)->second >= e;
    });
}

}  // namespace df::tokenizer
