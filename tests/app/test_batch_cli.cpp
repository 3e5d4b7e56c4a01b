// `diskformer batch`: JSON lines in, one JSON line out per prompt in input order; each answer is
// the library's answer alone, whatever ran beside it (--parallel), and a bad line is an error
// line, not the end of the run.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "common/golden.h"
#include "common/run_cli.h"
#include "diskformer/generate.h"

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

const std::string kModel = "q35_4L_iq2mix";

fs::path model_path() { return df::test::golden_dir() / "models" / (kModel + ".gguf"); }

std::vector<Json> json_lines(const std::string& text) {
    std::vector<Json> v;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) v.push_back(Json::parse(line, nullptr, false));
    return v;
}

struct Input {
    fs::path path = fs::temp_directory_path() / ("df_batch_" + std::to_string(::getpid()) + ".jsonl");
    explicit Input(const std::string& text) { std::ofstream(path) << text; }
    ~Input() { fs::remove(path); }
};

const char* const kLines =
    "{\"prompt\": \"Name a fish.\", \"id\": \"fish\"}\n"
    "What is rain?\n"
    "\n"
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be terse.\"}, {\"role\": \"user\", \"content\": \"Count to three.\"}]}\n"
    "{\"messages\": [{\"role\": \"wizard\", \"content\": \"x\"}], \"id\": 7}\n"
    "{\"prompt\": 3}\n"
    "Say hello twice.\n"
    "Why is snow white?\n";

TEST(Batch, EachLineGetsTheLibrarysAnswerInInputOrder) {
    const Input in(kLines);
    const auto r = df::test::run_diskformer("batch -m " + df::test::shell_quote(model_path()) + " --backend cpu -t 2 -i " +
                                            df::test::shell_quote(in.path) + " --parallel 3 -n 12");
    EXPECT_EQ(r.code, 2) << "two lines are bad: " << r.err;
    const auto out = json_lines(r.out);
    ASSERT_EQ(out.size(), 7u) << r.out;  // the blank line is skipped
    for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i]["index"], i);
    EXPECT_EQ(out[0]["id"], "fish");
    EXPECT_EQ(out[3]["id"], 7);
    EXPECT_NE(out[3].value("error", "").find("wizard"), std::string::npos) << out[3].dump();
    EXPECT_NE(out[4].value("error", "").find("must be a string"), std::string::npos) << out[4].dump();
    auto model = diskformer::Model::load(model_path().string(), {.backend = diskformer::BackendKind::cpu, .threads = 2});
    const std::vector<std::vector<diskformer::ChatMessage>> prompts = {
        {{"user", "Name a fish.", {}}},
        {{"user", "What is rain?", {}}},
        {{"system", "Be terse.", {}}, {"user", "Count to three.", {}}},
        {},
        {},
        {{"user", "Say hello twice.", {}}},
        {{"user", "Why is snow white?", {}}}};
    for (size_t i = 0; i < prompts.size(); ++i) {
        if (prompts[i].empty()) continue;
        diskformer::Session s(model, {.ctx = 512});
        diskformer::GenerateOptions o;
        o.max_tokens = 12;
        const auto want = diskformer::generate(s, diskformer::chat_prompt(*model, prompts[i]), o);
        EXPECT_EQ(out[i].value("text", ""), want.text) << i;
        EXPECT_EQ(out[i].value("reasoning", ""), want.reasoning) << i;
        EXPECT_EQ(out[i]["completion_tokens"], want.tokens.size()) << i;
        EXPECT_EQ(out[i]["finish_reason"], "length") << i;
    }
    EXPECT_NE(r.err.find("5 of 7 prompts answered (2 failed)"), std::string::npos) << r.err;
}

TEST(Batch, SampledAnswersRepeatWithTheSeedWhateverRunsBeside) {
    const Input in("One.\nTwo.\nThree.\nFour.\nFive.\n");
    const std::string args = "batch -m " + df::test::shell_quote(model_path()) + " --backend cpu -t 2 -i " +
                             df::test::shell_quote(in.path) + " -n 10 --temp 0.9 --top-k 0 --top-p 1 --min-p 0 --seed 5";
    const auto one = df::test::run_diskformer(args + " --parallel 1");
    const auto four = df::test::run_diskformer(args + " --parallel 4");
    ASSERT_EQ(one.code, 0) << one.err;
    ASSERT_EQ(four.code, 0) << four.err;
    EXPECT_EQ(one.out, four.out);
    EXPECT_NE(four.err.find("seed 5"), std::string::npos) << four.err;
    const auto lines = json_lines(one.out);
    ASSERT_EQ(lines.size(), 5u);
    auto said = [](const Json& l) { return l.value("reasoning", "") + "|" + l.value("text", ""); };
    EXPECT_GT(said(lines[0]).size(), 1u);
    EXPECT_NE(said(lines[0]), said(lines[1])) << "each line draws with its own seed";
}

TEST(Batch, PromptsFromStdinAndAMissingFileIsAnError) {
    const Input in("Hello there.\n");
    const auto r = df::test::run_diskformer("batch -m " + df::test::shell_quote(model_path()) + " --backend cpu -t 2 -n 4 < " +
                                            df::test::shell_quote(in.path));
    ASSERT_EQ(r.code, 0) << r.err;
    const auto lines = json_lines(r.out);
    ASSERT_EQ(lines.size(), 1u) << r.out;
    EXPECT_EQ(lines[0]["completion_tokens"], 4);
    const auto missing = df::test::run_diskformer("batch -m " + df::test::shell_quote(model_path()) + " -i /nonexistent/in.jsonl");
    EXPECT_EQ(missing.code, 1);
    EXPECT_NE(missing.err.find("cannot open '/nonexistent/in.jsonl'"), std::string::npos) << missing.err;
}

}  // namespace
