// The heap-based BPE against a plain reference: repeatedly merge the adjacent pair of lowest
// rank (leftmost on ties) over strings, as BPE is defined, on random words with many merges.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <unordered_map>

#include "tok_test_util.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_map.h"

namespace {

using df::tokenizer::Bpe;
using df::tokenizer::VocabSpec;

std::vector<int32_t> reference_bpe(const std::string& word,
                                   const std::map<std::pair<std::string, std::string>, int>& ranks,
                                   const std::unordered_map<std::string, int32_t>& ids) {
    std::vector<std::string> sym;
    for (char c : word) sym.push_back(df::tokenizer::byte_encode(std::string(1, c)));
    for (;;) {
        int best = -1, best_rank = INT32_MAX;
        for (size_t i = 0; i + 1 < sym.size(); ++i) {
            auto it = ranks.find({sym[i], sym[i + 1]});
            if (it != ranks.end() && it->second < best_rank) best_rank = it->second, best = static_cast<int>(i);
        }
        if (best < 0) break;
        sym[best] += sym[best + 1];
        sym.erase(sym.begin() + best + 1);
    }
    std::vector<int32_t> out;
    for (const auto& s : sym) out.push_back(ids.at(s));  // this vocabulary has every merge result
    return out;
}

TEST(TokenizerBpe, MatchesReferenceOnRandomWords) {
    const auto path = df::test::tokenizer_golden("ggml-vocab-qwen35.gguf");
    auto file = df::gguf::File::open(path.string());
    const VocabSpec spec = VocabSpec::from_gguf(*file);
    std::unordered_map<std::string, int32_t> ids;
    for (size_t i = 0; i < spec.tokens.size(); ++i) ids[spec.tokens[i]] = static_cast<int32_t>(i);
    std::map<std::pair<std::string, std::string>, int> ranks;
    for (size_t r = 0; r < spec.merges.size(); ++r) {
        const auto& m = spec.merges[r];
        const size_t sp = m.find(' ', 1);
        ranks.emplace(std::make_pair(m.substr(0, sp), m.substr(sp + 1)), static_cast<int>(r));
    }
    const Bpe bpe([&](std::string_view t) {
                      auto it = ids.find(std::string(t));
                      return it == ids.end() ? int32_t{-1} : it->second;
                  },
                  static_cast<int32_t>(spec.tokens.size()), spec.merges);

    // Alphabets rich in merges, so words merge deeply and in many orders.
    const std::vector<std::string> alphabets = {" aeinrst", "ab", " \n", "=-#*", "0123456789",
                                                "\xe4\xbd\xa0\xe5\xa5\xbd"};
    std::mt19937 rng(7);
    for (int iter = 0; iter < 600; ++iter) {
        const auto& alpha = alphabets[iter % alphabets.size()];
        std::string word;
        const size_t len = 1 + rng() % (iter < 500 ? 24 : 400);
        while (word.size() < len) {
            if (alpha.size() == 6 && static_cast<uint8_t>(alpha[0]) >= 0x80) {
                word += alpha.substr(3 * (rng() % 2), 3);  // whole CJK characters
            } else {
                word += alpha[rng() % alpha.size()];
            }
        }
        std::vector<int32_t> got;
        bpe.encode_word(word, got);
        ASSERT_EQ(got, reference_bpe(word, ranks, ids)) << "word \"" << word << "\"";
    }
}

}  // namespace
