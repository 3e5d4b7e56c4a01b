// `diskformer run` as a script would use it: reproducible with a seed, the reasoning shown or
// hidden, and bad input answered with one line on stderr and exit code 1.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "common/golden.h"
#include "common/random_dflash.h"
#include "common/run_cli.h"

namespace {

namespace fs = std::filesystem;

using Outcome = df::test::CliOutcome;

// Runs `diskformer <args>` with stdout and stderr captured (not a terminal: no ANSI).
Outcome diskformer(const std::string& args) { return df::test::run_diskformer(args); }

std::string model(const char* name) {
    return "'" + (df::test::golden_dir() / "models" / (std::string(name) + ".gguf")).string() + "' --backend cpu -t 2";
}

void expect_one_line_error(const Outcome& r, const std::string& mentions) {
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(r.out, "");
    ASSERT_FALSE(r.err.empty());
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "more than one line:\n" << r.err;
    EXPECT_NE(r.err.find(mentions), std::string::npos) << r.err;
}

TEST(Run, SameSeedSameOutput) {
    const std::string args = "run -m " + model("q3_4L_kmix") + " -p 'Write a poem' -n 40 --temp 0.9 --top-k 0 --top-p 1 --min-p 0";
    const Outcome a = diskformer(args + " --seed 123");
    const Outcome b = diskformer(args + " --seed 123");
    const Outcome c = diskformer(args + " --seed 124");
    ASSERT_EQ(a.code, 0) << a.err;
    EXPECT_FALSE(a.out.empty());
    EXPECT_EQ(a.out, b.out);
    EXPECT_NE(a.out, c.out);
    // Stats go to stderr, in one line that names the seed.
    EXPECT_NE(a.err.find("prompt tokens"), std::string::npos) << a.err;
    EXPECT_NE(a.err.find("seed 123"), std::string::npos) << a.err;
}

TEST(Run, GreedyIsTheDefaultAndRawWorks) {
    const Outcome a = diskformer("run -m " + model("q3_4L_kmix") + " -p hello -n 16");
    const Outcome b = diskformer("run -m " + model("q3_4L_kmix") + " -p hello -n 16");
    ASSERT_EQ(a.code, 0) << a.err;
    EXPECT_EQ(a.out, b.out);
    const Outcome raw = diskformer("run -m " + model("q3_4L_kmix") + " --raw -p '<|im_start|>user\nhi<|im_end|>\n' -n 8");
    EXPECT_EQ(raw.code, 0) << raw.err;
}

TEST(Run, ReasoningIsPrefixedOrHidden) {
    // A random network does not close its think block: everything it writes is reasoning.
    const std::string args = "run -m " + model("q35_4L_iq2mix") + " -p hello -n 24 --think";
    const Outcome shown = diskformer(args);
    ASSERT_EQ(shown.code, 0) << shown.err;
    ASSERT_FALSE(shown.out.empty());
    EXPECT_EQ(shown.out.rfind("> ", 0), 0u) << shown.out;
    EXPECT_EQ(shown.out.find('\x1b'), std::string::npos) << "ANSI codes in a file";
    const Outcome hidden = diskformer(args + " --hide-think");
    ASSERT_EQ(hidden.code, 0) << hidden.err;
    EXPECT_EQ(hidden.out.find("> "), std::string::npos) << hidden.out;
}

TEST(Run, StopStringEndsTheAnswer) {
    const std::string args = "run -m " + model("q3_4L_kmix") + " -p 'Write a poem' -n 60 --temp 1.5 --top-k 0 --top-p 1 --min-p 0 --seed 1";
    const Outcome full = diskformer(args);
    ASSERT_EQ(full.code, 0) << full.err;
    // Two letters from past the start of the text make the stop string.
    auto letter = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
    size_t at = 4;
    while (at + 1 < full.out.size() && !(letter(full.out[at]) && letter(full.out[at + 1]))) ++at;
    ASSERT_LT(at + 1, full.out.size()) << "no two letters in a row in:\n" << full.out;
    const std::string stop = full.out.substr(at, 2);
    const Outcome cut = diskformer(args + " --stop '" + stop + "'");
    ASSERT_EQ(cut.code, 0) << cut.err;
    const std::string before = full.out.substr(0, full.out.find(stop));
    EXPECT_EQ(cut.out, before.empty() ? "" : before + "\n");
    EXPECT_NE(cut.err.find("stopped: stop string"), std::string::npos) << cut.err;
}

TEST(Run, BadInputIsOneLineAndExitOne) {
    expect_one_line_error(diskformer("run -m /no/such/model.gguf -p hi"), "/no/such/model.gguf");
    expect_one_line_error(
        diskformer("run -m " + model("q3_4L_kmix") + " --ctx 16 -p 'a prompt that is much longer than sixteen tokens, "
                   "so that it cannot fit in so small a context at all'"),
        "context");
    expect_one_line_error(diskformer("run -m " + model("q3_4L_kmix") + " -p hi --no-such-flag"), "--no-such-flag");
    expect_one_line_error(diskformer("run -m " + model("q3_4L_kmix")), "--prompt");
    expect_one_line_error(diskformer("run -m " + model("q3_4L_kmix") + " -p hi --top-p 0"), "top_p");
    expect_one_line_error(diskformer("run -m " + model("q3_4L_kmix") + " -p hi --think --no-think"), "--no-think");
    expect_one_line_error(diskformer("chat -m /no/such/model.gguf"), "/no/such/model.gguf");
    // Numbers out of range say the bound plainly.
    expect_one_line_error(diskformer("run -m " + model("q3_4L_kmix") + " -p hi --temp -1"), "--temp: must be at least 0, got -1");
    expect_one_line_error(diskformer("run -m " + model("q3_4L_kmix") + " -p hi --repeat-penalty 0"), "must be above 0");
    expect_one_line_error(diskformer("run -m " + model("q3_4L_kmix") + " -p hi --ctx 0"), "--ctx: must be at least 1");
    expect_one_line_error(diskformer("run -m " + model("q3_4L_kmix") + " -p hi --top-k many"), "'many' is not a number");
    expect_one_line_error(diskformer("run -m " + model("q3_4L_kmix") + " -p hi --top-p 2"), "--top-p: must be 0 to 1, got 2");
}

TEST(Run, ADraftModelGivesTheSameAnswer) {
    const std::string args = "run -m " + model("q35_4L_iq2mix") + " --raw -p 'def main():\n    print(' -n 40";
    const Outcome plain = diskformer(args);
    ASSERT_EQ(plain.code, 0) << plain.err;
    for (const char* drafter : {"q35_4L_iq2mix", "q3_4L_kmix"}) {
        const std::string path = (df::test::golden_dir() / "models" / (std::string(drafter) + ".gguf")).string();
        const Outcome r = diskformer(args + " --draft-model '" + path + "'");
        ASSERT_EQ(r.code, 0) << r.err;
        EXPECT_EQ(r.out, plain.out) << drafter;
        EXPECT_NE(r.err.find(" · drafts "), std::string::npos) << "drafting is on by default with a draft model: " << r.err;
    }
    // Sampled: the same --seed gives the same text with a draft model.
    const std::string sampled = args + " --temp 0.8 --top-k 3 --seed 4";
    const Outcome want = diskformer(sampled);
    ASSERT_EQ(want.code, 0) << want.err;
    const Outcome with = diskformer(sampled + " --draft-model '" + (df::test::golden_dir() / "models" / "q35_4L_iq2mix.gguf").string() + "'");
    ASSERT_EQ(with.code, 0) << with.err;
    EXPECT_EQ(with.out, want.out);
    EXPECT_NE(with.err.find(" · drafts "), std::string::npos) << with.err;
    // A DFlash drafter (random weights) for the qwen3 model; refused for a hybrid one.
    const auto dir = df::test::write_dflash_dir(df::test::DflashSpec{}, 5);
    const std::string q3 = "run -m " + model("q3_4L_kmix") + " --raw -p 'def main():\n    print(' -n 40";
    const Outcome q3_plain = diskformer(q3);
    const Outcome block = diskformer(q3 + " --dflash '" + dir.string() + "'");
    ASSERT_EQ(block.code, 0) << block.err;
    EXPECT_EQ(block.out, q3_plain.out);
    EXPECT_NE(block.err.find(" · drafts "), std::string::npos) << block.err;
    expect_one_line_error(diskformer(args + " --dflash '" + dir.string() + "'"), "--dflash");
    std::filesystem::remove_all(dir);
    // Not a model, and a model with another tokenizer: one line naming the option.
    const std::string vocab_only = (df::test::golden_dir() / "tokenizer" / "ggml-vocab-qwen35.gguf").string();
    expect_one_line_error(diskformer(args + " --draft-model '" + vocab_only + "'"), "--draft-model");
}

TEST(Run, HelpOnEveryCommand) {
    for (const char* cmd : {"run", "chat"}) {
        const Outcome r = diskformer(std::string(cmd) + " --help");
        EXPECT_EQ(r.code, 0);
        EXPECT_NE(r.out.find("--temp"), std::string::npos) << r.out;
        EXPECT_NE(r.out.find("--model"), std::string::npos) << r.out;
        EXPECT_NE(r.out.find("--draft-model"), std::string::npos) << r.out;
    }
}

TEST(Chat, PipedInputWorks) {
    // Not a terminal: plain lines, no prompt; the stats of both turns on stderr.
    const Outcome r = diskformer("chat -m " + model("q3_4L_kmix") + " -n 8 </dev/null");
    EXPECT_EQ(r.code, 0) << r.err;
    const fs::path in = fs::temp_directory_path() / ("df_chat_in_" + std::to_string(::getpid()));
    std::ofstream(in) << "hello\n/think off\nagain\n";
    const Outcome two = diskformer("chat -m " + model("q3_4L_kmix") + " -n 8 <'" + in.string() + "'");
    fs::remove(in);
    EXPECT_EQ(two.code, 0) << two.err;
    size_t turns = 0;
    for (size_t at = 0; (at = two.err.find("prompt tokens", at)) != std::string::npos; ++at) ++turns;
    EXPECT_EQ(turns, 2u) << two.err;
}

}  // namespace
