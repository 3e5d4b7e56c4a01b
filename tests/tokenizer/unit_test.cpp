// Unit tests of the tokenizer's parts on hand-made inputs.
#include <gtest/gtest.h>

#include "tokenizer/byte_map.h"
#include "tokenizer/special_split.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

using namespace df::tokenizer;

TEST(TokenizerUtf8, CanonicalizeLikeLlamaCpp) {
    Utf8Canonical c;
    utf8_canonicalize("\xC0\xAF", c);  // overlong '/' is accepted
    EXPECT_EQ(c.text, "/");
    utf8_canonicalize("\xE2\x82", c);  // truncated: each byte becomes U+FFFD
    EXPECT_EQ(c.text, "\xEF\xBF\xBD\xEF\xBF\xBD");
    utf8_canonicalize("\xED\xA0\x80", c);  // a surrogate survives; PCRE2 sees U+FFFD
    EXPECT_EQ(c.text, "\xED\xA0\x80");
    EXPECT_TRUE(c.has_surrogates);
    EXPECT_EQ(c.subject, "\xEF\xBF\xBD");
    EXPECT_THROW(utf8_canonicalize("ok\xF4\x90\x80\x80", c), Error);
    EXPECT_TRUE(utf8_is_canonical("h\xC3\xA9llo \xF0\x9F\x98\x80"));
    EXPECT_FALSE(utf8_is_canonical("\xC0\xAF"));
    EXPECT_FALSE(utf8_is_canonical("\xED\xA0\x80"));
    EXPECT_FALSE(utf8_is_canonical("\xF4\x90\x80\x80"));
    EXPECT_FALSE(utf8_is_canonical("\xE4\xBD"));
}

TEST(TokenizerUtf8, IncompleteTail) {
    EXPECT_EQ(utf8_incomplete_tail("abc"), 0u);
    EXPECT_EQ(utf8_incomplete_tail("a\xE4"), 1u);
    EXPECT_EQ(utf8_incomplete_tail("a\xE4\xBD"), 2u);
    EXPECT_EQ(utf8_incomplete_tail("a\xE4\xBD\xA0"), 0u);
    EXPECT_EQ(utf8_incomplete_tail("\xF0\x9F\x98"), 3u);
    EXPECT_EQ(utf8_incomplete_tail("\xBD"), 0u);      // stray continuation: never completes
    EXPECT_EQ(utf8_incomplete_tail("\xE4" "a"), 0u);  // interrupted: emit as is
}

TEST(TokenizerByteMap, Gpt2Alphabet) {
    EXPECT_EQ(byte_to_cpt(' '), 0x120u);  // "Ġ"
    EXPECT_EQ(byte_to_cpt('\n'), 0x10Au);  // "Ċ"
    EXPECT_EQ(byte_to_cpt('A'), static_cast<uint32_t>('A'));
    EXPECT_EQ(byte_to_cpt(0xAD), 0x143u);
    for (int b = 0; b < 256; ++b) EXPECT_EQ(cpt_to_byte(byte_to_cpt(static_cast<uint8_t>(b))), b);
    std::string all;
    for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
    EXPECT_EQ(byte_decode(byte_encode(all)), all);
    EXPECT_EQ(byte_encode(" the"), "\xC4\xA0the");
}

TEST(TokenizerSpecialSplit, LongestFirstAndControlGate) {
    const std::string a = "<|a|>", ab = "<|a|>b", u = "<u>";
    SpecialSplitter sp({{1, a, true}, {2, ab, true}, {3, u, false}});
    auto everywhere = [](size_t, size_t) { return true; };
    auto f = sp.split("x<|a|>b<|a|><u>", everywhere);
    ASSERT_EQ(f.size(), 4u);
    EXPECT_EQ(f[0].id, -1);
    EXPECT_EQ(f[1].id, 2);  // the longer token wins where both match
    EXPECT_EQ(f[2].id, 1);
    EXPECT_EQ(f[3].id, 3);
    // Without permission only the user-defined token is cut out.
    f = sp.split("x<|a|><u>y", nullptr);
    ASSERT_EQ(f.size(), 3u);
    EXPECT_EQ(f[0].end, 6u);
    EXPECT_EQ(f[1].id, 3);
    EXPECT_EQ(f[2].id, -1);
}

TEST(TokenizerSpecialSplit, LongerTokenPlacedFirstEvenWhenLater) {
    // llama.cpp places "bcd" before "ab" everywhere, so "ab" cannot take the 'b' of "abcd".
    const std::string ab = "ab", bcd = "bcd";
    SpecialSplitter sp({{1, ab, false}, {2, bcd, false}});
    auto f = sp.split("abcd", nullptr);
    ASSERT_EQ(f.size(), 2u);
    EXPECT_EQ(f[0].id, -1);
    EXPECT_EQ(f[1].id, 2);
}

// A tiny vocabulary: bytes a, b, c, space; merges "a b", "ab c", "Ġ a", and "c c" whose result
// is not a token; a control, a user-defined and an unused token.
VocabSpec tiny_spec() {
    VocabSpec s;
    s.pre = "qwen2";
    s.tokens = {"a", "b", "c", "\xC4\xA0", "ab", "abc", "<|im_end|>", "<think>", "[PAD8]", "\xC4\xA0" "a"};
    s.types = {1, 1, 1, 1, 1, 1, 3, 4, 5, 1};
    s.merges = {"a b", "ab c", "\xC4\xA0 a", "c c"};
    s.eos = 6;
    return s;
}

using Ids = std::vector<int32_t>;

TEST(TokenizerBpe, MergesByRank) {
    auto tok = Tokenizer::from_spec(tiny_spec());
    EXPECT_EQ(tok->encode("abc", false), (Ids{5}));
    EXPECT_EQ(tok->encode("abcab", false), (Ids{5, 4}));
    // "a b" (rank 0) beats "Ġ a" (rank 2), then "ab c" (rank 1) completes "abc".
    EXPECT_EQ(tok->encode(" abc", false), (Ids{3, 5}));
    EXPECT_EQ(tok->encode(" a", false), (Ids{9}));
}

TEST(TokenizerBpe, FallsBackToBytes) {
    auto tok = Tokenizer::from_spec(tiny_spec());
    EXPECT_EQ(tok->encode("acc", false), (Ids{0, 2, 2}));  // "cc" is merged but not a token
    EXPECT_EQ(tok->encode("z", false), (Ids{}));            // no token for the byte: dropped
}

TEST(TokenizerSpecial, ControlOnlyWhenParsingUserDefinedAlways) {
    auto tok = Tokenizer::from_spec(tiny_spec());
    EXPECT_EQ(tok->encode("a<|im_end|>", true), (Ids{0, 6}));
    EXPECT_EQ(tok->encode("a<think>b", false), (Ids{0, 7, 1}));
    EXPECT_EQ(tok->encode("[PAD8]", true), (Ids{}));  // unused tokens are never matched
    EXPECT_TRUE(tok->is_eog(6));
    EXPECT_EQ(tok->decode(Ids{0, 6, 7, 8}, true), "a<|im_end|><think>");
    EXPECT_EQ(tok->decode(Ids{0, 6, 7, 8}, false), "a<think>");
    EXPECT_THROW(tok->decode(Ids{10}), Error);
    EXPECT_THROW(tok->decode(Ids{-1}), Error);
}

TEST(TokenizerSpecial, SegmentsGateControlTokens) {
    auto tok = Tokenizer::from_spec(tiny_spec());
    const TextSegment segs[] = {{"a<|im_end|>", true}, {"<|im_end|>b", false}, {"<|im_", true},
                                {"end|>", false}};
    // Parsed in the first segment only; a token straddling two segments is not parsed either.
    EXPECT_EQ(tok->encode(segs), (Ids{0, 6, 1}));
}

TEST(TokenizerLoad, RejectsWhatItCannotRun) {
    auto s = tiny_spec();
    s.model = "llama";
    EXPECT_THROW(Tokenizer::from_spec(s), Error);
    s = tiny_spec();
    s.pre = "llama3";
    EXPECT_THROW(Tokenizer::from_spec(s), Error);
    s = tiny_spec();
    s.types.pop_back();
    EXPECT_THROW(Tokenizer::from_spec(s), Error);
    s = tiny_spec();
    s.eos = 10;
    EXPECT_THROW(Tokenizer::from_spec(s), Error);
    s = tiny_spec();
    s.merges.push_back("nospace");
    try {
        Tokenizer::from_spec(s);
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("merges[4]"), std::string::npos) << e.what();
    }
}

}  // namespace
