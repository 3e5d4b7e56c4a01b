// golden/tokenizer/extra.json: 202 texts tokenized by llama.cpp with each vocabulary, with and
// without parse_special, plus llama_detokenize of the ids and llama.cpp's errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tok_test_util.h"

namespace {

using df::test::from_hex;
using df::test::golden_tokenizer;
using df::test::to_hex;

const nlohmann::json& extra() {
    static const nlohmann::json j = [] {
        const auto bytes = df::test::read_file(df::test::tokenizer_golden("extra.json"));
        return nlohmann::json::parse(bytes.begin(), bytes.end());
    }();
    return j;
}

class ExtraJson : public testing::TestWithParam<std::string> {};

TEST_P(ExtraJson, MatchesLlamaCpp) {
    const std::string vocab = GetParam();
    const auto* tok = golden_tokenizer(vocab);
    if (!tok) GTEST_SKIP() << vocab << " is only in the full golden set (../shared/golden)";
    size_t checked = 0, pass = 0;
    for (const auto& entry : extra()["texts"]) {
        const std::string text = from_hex(entry["text_hex"]);
        const auto& want = entry["tokens"][vocab];
        const std::string where = "text_hex " + entry["text_hex"].get<std::string>();
        ++checked;
        if (want.contains("error")) {
            // llama.cpp throws "invalid codepoint"; we throw a clear Error for both modes.
            EXPECT_THROW(tok->encode(text, false), df::tokenizer::Error) << where;
            EXPECT_THROW(tok->encode(text, true), df::tokenizer::Error) << where;
            pass += 1;
            continue;
        }
        const auto ids = tok->encode(text, false);
        const auto ids_special = tok->encode(text, true);
        const auto want_ids = want["ids"].get<std::vector<int32_t>>();
        const auto want_special = want["ids_parse_special"].get<std::vector<int32_t>>();
        EXPECT_EQ(ids, want_ids) << where << " parse_special=false";
        EXPECT_EQ(ids_special, want_special) << where << " parse_special=true";
        // llama_detokenize(ids, unparse_special = false).
        const std::string detok = to_hex(tok->decode(want_ids, false));
        EXPECT_EQ(detok, want["detokenized_hex"].get<std::string>()) << where;
        if (entry["valid_utf8"].get<bool>()) {
            // Round trips: plain ids give the text back; so do special ids with specials rendered.
            EXPECT_EQ(tok->decode(ids_special, true), text) << where;
        }
        pass += ids == want_ids && ids_special == want_special &&
                detok == want["detokenized_hex"].get<std::string>();
    }
    EXPECT_EQ(checked, 202u);
    std::printf("[tokenizer] extra.json with %s: %zu/%zu texts match llama.cpp\n", vocab.c_str(),
                pass, checked);
}

INSTANTIATE_TEST_SUITE_P(Vocabs, ExtraJson,
                         testing::Values("qwen3-vocab.gguf", "qwen35-tiny-vocab.gguf",
                                         "qwen3-tiny-vocab.gguf"),
                         [](const testing::TestParamInfo<std::string>& p) {
                             std::string n = p.param.substr(0, p.param.find(".gguf"));
                             for (char& c : n)
                                 if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                             return n;
                         });

}  // namespace
