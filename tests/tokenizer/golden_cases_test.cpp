// llama.cpp's own tokenizer test cases (test-tokenizer-0): .inp texts, .out expected ids, run
// with add_special = false, parse_special = false.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "tok_test_util.h"

namespace {

using df::test::golden_tokenizer;
using df::test::tokenizer_golden;

struct Case {
    std::string text;
    std::vector<int32_t> ids;
};

std::vector<Case> load_cases(const std::string& stem) {
    const auto inp = df::test::read_file(tokenizer_golden(stem + ".inp"));
    const std::string all(inp.begin(), inp.end());
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> texts;
    size_t pos = 0;
    for (size_t at; (at = all.find(sep, pos)) != std::string::npos; pos = at + sep.size())
        texts.push_back(all.substr(pos, at - pos));
    // The piece after the last separator is empty and not a case.
    EXPECT_EQ(pos, all.size());

    std::ifstream out(tokenizer_golden(stem + ".out"));
    std::vector<Case> cases;
    std::string line;
    for (const auto& t : texts) {
        EXPECT_TRUE(std::getline(out, line)) << "missing .out line for case " << cases.size();
        Case c{t, {}};
        std::istringstream ls(line);
        for (int32_t id; ls >> id;) c.ids.push_back(id);
        cases.push_back(std::move(c));
    }
    return cases;
}

void run_cases(const std::string& stem, const std::string& vocab, size_t expected_cases) {
    const auto* tok = golden_tokenizer(vocab);
    if (!tok) GTEST_SKIP() << vocab << " is only in the full golden set (../shared/golden)";
    const auto cases = load_cases(stem);
    ASSERT_EQ(cases.size(), expected_cases);
    size_t pass = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
        const auto got = tok->encode(cases[i].text, false);
        EXPECT_EQ(got, cases[i].ids) << stem << " case " << i << " text \"" << cases[i].text << "\"";
        pass += got == cases[i].ids;
        // Valid UTF-8 round-trips exactly.
        EXPECT_EQ(tok->decode(got), cases[i].text) << stem << " case " << i;
    }
    std::printf("[tokenizer] %s with %s: %zu/%zu cases match llama.cpp\n", stem.c_str(),
                vocab.c_str(), pass, cases.size());
}

TEST(TokenizerGolden, Qwen35Cases) {
    run_cases("ggml-vocab-qwen35.gguf", "ggml-vocab-qwen35.gguf", 50);
}

TEST(TokenizerGolden, Qwen2CasesWithQwen3Vocab) {
    run_cases("ggml-vocab-qwen2.gguf", "qwen3-vocab.gguf", 46);
}

// The qwen35 texts with the qwen2 pre-tokenizer vocabulary: golden/README says they give the
// same ids, so this checks the two regexes agree where they should.
TEST(TokenizerGolden, Qwen35CasesWithQwen3Vocab) {
    run_cases("ggml-vocab-qwen35.gguf", "qwen3-vocab.gguf", 50);
}

TEST(TokenizerGolden, VocabularyFacts) {
    const auto* tok = golden_tokenizer("ggml-vocab-qwen35.gguf");
    ASSERT_TRUE(tok);
    EXPECT_EQ(tok->vocab_size(), 151936u);
    EXPECT_EQ(tok->pre_tokenizer(), df::tokenizer::PreTokenizer::qwen35);
    EXPECT_EQ(tok->eos(), 151643);
    EXPECT_EQ(tok->bos(), 151643);
    EXPECT_FALSE(tok->add_bos());
    EXPECT_EQ(tok->find("<|im_end|>"), 151645);
    EXPECT_TRUE(tok->is_eog(151645));
    EXPECT_TRUE(tok->is_eog(151643));
    EXPECT_FALSE(tok->is_eog(151644));
    EXPECT_EQ(tok->piece(tok->find("Ġthe")), " the");
    EXPECT_EQ(tok->text(tok->find("Ġthe")), "Ġthe");
}

TEST(TokenizerGolden, Qwen3EndOfGeneration) {
    const auto* tok = golden_tokenizer("qwen3-vocab.gguf");
    if (!tok) GTEST_SKIP() << "qwen3-vocab.gguf is only in the full golden set";
    std::vector<int32_t> want;
    for (const char* t : {"<|endoftext|>", "<|im_end|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"})
        want.push_back(tok->find(t));
    std::sort(want.begin(), want.end());
    EXPECT_EQ(tok->eog_ids(), want);  // eos 151645 is <|im_end|>, already in the set
    EXPECT_EQ(tok->eos(), 151645);
    EXPECT_EQ(tok->type(151667), df::tokenizer::TokenType::user_defined);
    EXPECT_EQ(tok->piece(151700), "");  // [PAD…] tokens are unused and render as nothing
}

}  // namespace
