// StreamDecoder: never emits part of a UTF-8 character, flushes what is left at the end.
#include <gtest/gtest.h>

#include "tok_test_util.h"
#include "tokenizer/byte_map.h"

namespace {

using df::tokenizer::StreamDecoder;
using df::tokenizer::Tokenizer;

// The byte token of each byte of s, so multi-byte characters arrive one byte per token.
std::vector<int32_t> byte_ids(const Tokenizer& tok, const std::string& s) {
    std::vector<int32_t> ids;
    for (char c : s) ids.push_back(tok.find(df::tokenizer::byte_encode(std::string(1, c))));
    return ids;
}

bool is_complete_utf8(const std::string& s) {
    for (size_t i = 0; i < s.size();) {
        const auto b = static_cast<uint8_t>(s[i]);
        const size_t len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
        if (i + len > s.size()) return false;
        for (size_t k = 1; k < len; ++k)
            if ((static_cast<uint8_t>(s[i + k]) & 0xC0) != 0x80) return false;
        i += len;
    }
    return true;
}

TEST(TokenizerStream, HoldsIncompleteCharacters) {
    const auto* tok = df::test::golden_tokenizer("ggml-vocab-qwen35.gguf");
    ASSERT_TRUE(tok);
    const std::string text = "é 你好 😀 Vieết ok";
    StreamDecoder dec(*tok);
    std::string got;
    for (int32_t id : byte_ids(*tok, text)) {
        ASSERT_GE(id, 0);
        const std::string part = dec.push(id);
        EXPECT_TRUE(is_complete_utf8(part)) << "emitted a partial character";
        got += part;
    }
    EXPECT_EQ(dec.pending(), 0u);
    got += dec.flush();
    EXPECT_EQ(got, text);
}

TEST(TokenizerStream, WholeTokensAndFlush) {
    const auto* tok = df::test::golden_tokenizer("ggml-vocab-qwen35.gguf");
    ASSERT_TRUE(tok);
    const std::string text = "Hello 世界! <|im_end|>";
    const auto ids = tok->encode(text, true);
    StreamDecoder plain(*tok), special(*tok, true);
    std::string a, b;
    for (int32_t id : ids) {
        a += plain.push(id);
        b += special.push(id);
    }
    EXPECT_EQ(a + plain.flush(), "Hello 世界! ");
    EXPECT_EQ(b + special.flush(), text);

    // A character cut off by the end of generation comes out at flush, as raw bytes.
    StreamDecoder dec(*tok);
    const auto cut = byte_ids(*tok, "a\xE4\xBD");
    std::string out;
    for (int32_t id : cut) out += dec.push(id);
    EXPECT_EQ(out, "a");
    EXPECT_EQ(dec.pending(), 2u);
    EXPECT_EQ(dec.flush(), "\xE4\xBD");
}

}  // namespace
