// Speculative decoding with a draft model (GenerateOptions::drafter): whatever the drafter
// guesses, the answer is the target's greedy answer token for token; a drafter equal to the
// target has every guess kept; a truncated copy of the target (a correlated drafter) has some
// kept and some refused, which exercises the hybrid drafter's way back through its checkpoint.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "common/gguf_edit.h"
#include "common/random_dflash.h"
#include "diskformer/generate.h"

namespace {

namespace dfm = diskformer;
namespace fs = std::filesystem;
using dfm::GenerateOptions;

constexpr const char* kQwen3 = "q3_4L_kmix";      // attention only
constexpr const char* kQwen35 = "q35_4L_iq2mix";  // hybrid: gated delta net + attention

using df::test::golden_model;

dfm::ModelOptions cpu() {
    dfm::ModelOptions o;
    o.backend = dfm::BackendKind::cpu;
    o.threads = 2;
    return o;
}

// Targets and drafters, loaded once (a drafter beside its target's backend).
std::shared_ptr<dfm::Model> model(const std::string& name) {
    static std::map<std::string, std::shared_ptr<dfm::Model>> cache;
    auto& m = cache[name];
    if (!m) {
        if (name.ends_with("-3L")) {
            const std::string base = name.substr(0, name.size() - 3);
            const fs::path p = df::test::truncated_model(base, model(base)->info().n_layer - 1);
            m = dfm::Model::load_beside(p.string(), *model(base));
            fs::remove(p);  // mapped: the file stays readable until unmapped
        } else {
            m = dfm::Model::load(golden_model(name).string(), cpu());
        }
    }
    return m;
}

std::vector<int32_t> prompt_of(const std::string& name) {
    return model(name)->tokenize("def main():\n    print(");
}

GenerateOptions greedy(int n) {
    GenerateOptions o;
    o.max_tokens = n;
    return o;
}

TEST(DraftModel, TheTargetAsItsOwnDrafterHasEveryGuessKept) {
    for (const char* name : {kQwen3, kQwen35}) {
        SCOPED_TRACE(name);
        const auto prompt = prompt_of(name);
        dfm::Session plain(model(name), {.ctx = 256});
        const auto want = dfm::generate(plain, prompt, greedy(60));
        GenerateOptions o = greedy(60);
        o.draft = 7;
        o.draft_adaptive = false;
        dfm::Session target(model(name), {.ctx = 256});
        dfm::Session drafter(model(name), {.ctx = 256});
        o.drafter = &drafter;
        const auto got = dfm::generate(target, prompt, o);
        EXPECT_EQ(got.tokens, want.tokens);
        EXPECT_EQ(got.text, want.text);
        // Its greedy steps are the target's (a verify pass has the bits of steps), so each pass
        // keeps all it was given; only the answer's last tokens go without a full draft.
        EXPECT_GT(got.stats.drafted_tokens, 40);
        EXPECT_EQ(got.stats.accepted_tokens, got.stats.drafted_tokens);
    }
}

struct Pair {
    std::string target, drafter;
};

class DraftPairs : public ::testing::TestWithParam<Pair> {};
INSTANTIATE_TEST_SUITE_P(Models, DraftPairs,
                         ::testing::Values(Pair{kQwen3, std::string(kQwen3) + "-3L"},
                                           Pair{kQwen35, std::string(kQwen35) + "-3L"},
                                           Pair{kQwen3, kQwen35}, Pair{kQwen35, "q3_4L_exotic"}),
                         [](const auto& param_info) {
                             std::string s = param_info.param.target + "_by_" + param_info.param.drafter;
                             for (char& c : s)
                                 if (c == '-') c = '_';
                             return s;
                         });

TEST_P(DraftPairs, AnyDrafterGivesTheTargetsAnswer) {
    const auto& [tname, dname] = GetParam();
    const auto prompt = prompt_of(tname);
    dfm::Session plain(model(tname), {.ctx = 512});
    const auto want = dfm::generate(plain, prompt, greedy(120));
    int64_t kept = 0, refused = 0;
    for (const auto& [d, adaptive] : std::vector<std::pair<int, bool>>{{1, false}, {3, false}, {7, false}, {20, false}, {7, true}}) {
        SCOPED_TRACE(std::to_string(d) + (adaptive ? " adaptive" : " always"));
        GenerateOptions o = greedy(120);
        o.draft = d;
        o.draft_adaptive = adaptive;
        dfm::Session target(model(tname), {.ctx = 512});
        dfm::Session drafter(model(dname), {.ctx = 512});
        o.drafter = &drafter;
        const auto got = dfm::generate(target, prompt, o);
        EXPECT_EQ(got.tokens, want.tokens);
        EXPECT_EQ(got.text, want.text);
        EXPECT_EQ(got.stop, want.stop);
        EXPECT_EQ(target.n_cached(), static_cast<int>(prompt.size() + got.tokens.size()) - 1);
        EXPECT_LE(got.stats.accepted_tokens, got.stats.drafted_tokens);
        if (!adaptive) {
            EXPECT_GT(got.stats.drafted_tokens, 0);
        }
        kept += got.stats.accepted_tokens;
        refused += got.stats.drafted_tokens - got.stats.accepted_tokens;

        // The drafter's cache stays consistent with what it evaluated: the answer's next turn
        // (the same sessions again, the cache reused) gives the target's answer too, and the
        // drafter's logits after a rewind are those of a fresh session on the same tokens.
        std::vector<int32_t> next(prompt);
        next.insert(next.end(), got.tokens.begin(), got.tokens.end());
        const auto more = model(tname)->tokenize(" And again");
        next.insert(next.end(), more.begin(), more.end());
        dfm::Session plain2(model(tname), {.ctx = 512});
        const auto want2 = dfm::generate(plain2, next, greedy(40));
        const auto got2 = dfm::generate(target, next, [&] { auto o2 = o; o2.max_tokens = 40; return o2; }());
        EXPECT_EQ(got2.tokens, want2.tokens);

        const std::vector<int32_t> back(next.begin(), next.begin() + static_cast<std::ptrdiff_t>(prompt.size() + 5));
        drafter.set_prompt(back);
        dfm::Session fresh(model(dname), {.ctx = 512});
        fresh.set_prompt(back);
        EXPECT_EQ(drafter.argmax(), fresh.argmax());
        const auto a = drafter.logits(), b = fresh.logits();
        double err = 0, ref = 0;
        for (size_t i = 0; i < a.size(); ++i) err += (a[i] - b[i]) * (a[i] - b[i]), ref += b[i] * b[i];
        EXPECT_LT(err / ref, 1e-8) << "a rewound drafter evaluates like a fresh one";
    }
    if (GetParam().drafter.ends_with("-3L")) {
        // A correlated drafter: some guesses kept, some refused (the hybrid one then resumes
        // from its checkpoint).
        EXPECT_GT(kept, 0);
        EXPECT_GT(refused, 0);
    }
}

TEST(DraftModel, ADrafterWhoseContextIsTooSmallSitsOut) {
    // Prompt lookup drafts instead; the drafter is left untouched.
    const auto prompt = prompt_of(kQwen3);
    dfm::Session plain(model(kQwen3), {.ctx = 256});
    const auto want = dfm::generate(plain, prompt, greedy(30));
    GenerateOptions o = greedy(30);
    o.draft = 4;
    o.draft_adaptive = false;
    dfm::Session target(model(kQwen3), {.ctx = 256});
    dfm::Session drafter(model(kQwen35), {.ctx = static_cast<int>(prompt.size())});
    o.drafter = &drafter;
    const auto got = dfm::generate(target, prompt, o);
    EXPECT_EQ(got.tokens, want.tokens);
    EXPECT_EQ(drafter.n_cached(), 0);
}

TEST(DraftModel, ADrafterMustShareTheTokenizer) {
    EXPECT_NO_THROW(dfm::check_drafter(*model(kQwen3), *model(kQwen35)));  // same tokens, other pre-tokenizer
    // One token spelled differently.
    const fs::path p = df::test::rewritten_model(
        kQwen3, "vocab",
        [](df::gguf::Writer& w, const df::gguf::File& f) {
            auto tokens = f.get<std::vector<std::string>>("tokenizer.ggml.tokens");
            tokens[300] = "Ġsomething";
            w.set("tokenizer.ggml.tokens", df::gguf::Value::strings(tokens));
        },
        [](const std::string&) { return false; });
    auto other = dfm::Model::load_beside(p.string(), *model(kQwen3));
    fs::remove(p);
    try {
        dfm::check_drafter(*model(kQwen3), *other);
        FAIL() << "a different token was accepted";
    } catch (const dfm::Error& e) {
        EXPECT_NE(std::string(e.what()).find("token 300"), std::string::npos) << e.what();
    }
    dfm::Session target(model(kQwen3), {.ctx = 128});
    dfm::Session drafter(other, {.ctx = 128});
    GenerateOptions o = greedy(4);
    o.draft = 3;
    o.drafter = &drafter;
    EXPECT_THROW(dfm::generate(target, prompt_of(kQwen3), o), dfm::Error);
    o.drafter = &target;
    EXPECT_THROW(dfm::generate(target, prompt_of(kQwen3), o), dfm::Error) << "a session cannot draft for itself";
}

// A DFlash block drafter (random weights: it guesses badly) attached to a qwen3 session: the
// answer is the target's; its context follows the target through prefill, verify passes and
// rewinds, so after any of them it drafts what a drafter that saw the same tokens at once drafts.
TEST(BlockDrafter, AnyDraftGivesTheTargetsAnswerAndTheContextFollows) {
    const df::test::DflashSpec spec;
    const fs::path dir = df::test::write_dflash_dir(spec, 11);
    const auto prompt = prompt_of(kQwen3);
    dfm::Session plain(model(kQwen3), {.ctx = 256});
    const auto want = dfm::generate(plain, prompt, greedy(60));
    dfm::Session target(model(kQwen3), {.ctx = 256});
    dfm::BlockDrafter drafter(dir.string(), target);
    EXPECT_EQ(drafter.block_size(), spec.K);
    EXPECT_GT(drafter.weight_bytes(), 0u);
    for (const auto& [d, adaptive] : std::vector<std::pair<int, bool>>{{7, false}, {3, false}, {7, true}}) {
        GenerateOptions o = greedy(60);
        o.draft = d;
        o.draft_adaptive = adaptive;
        o.block_drafter = &drafter;
        const auto got = dfm::generate(target, prompt, o);  // the 2nd and 3rd rewind to the prompt
        EXPECT_EQ(got.tokens, want.tokens);
        EXPECT_EQ(got.text, want.text);
        if (!adaptive) {
            EXPECT_GT(got.stats.drafted_tokens, 5);  // each refused draft backs off for a while
        }
    }
    {  // a sampled answer: the same seed, the same tokens with the drafter or without
        GenerateOptions s = greedy(60);
        s.temperature = 0.8f;
        s.top_k = 4;
        s.seed = 3;
        dfm::Session alone(model(kQwen3), {.ctx = 256});
        const auto sampled = dfm::generate(alone, prompt, s);
        s.draft = 7;
        s.draft_adaptive = false;
        s.block_drafter = &drafter;
        const auto got = dfm::generate(target, prompt, s);
        EXPECT_EQ(got.tokens, sampled.tokens);
        EXPECT_GT(got.stats.drafted_tokens, 5);
    }
    // The drafter's context after all that equals one fed the same tokens in one prompt pass
    // (the same guesses; its own rows come from chunks of other sizes, so compare choices).
    std::vector<int32_t> held = target.tokens();
    const int32_t last = held.back();
    held.pop_back();
    target.set_prompt(held);
    const auto after = drafter.draft(last, 7);
    dfm::Session fresh(model(kQwen3), {.ctx = 256});
    dfm::BlockDrafter fresh_drafter(dir.string(), fresh);
    fresh.set_prompt(held);
    EXPECT_EQ(after, fresh_drafter.draft(last, 7));
    EXPECT_EQ(after.size(), 7u);
    // Misuse: another session's drafter, a hybrid target, a missing checkpoint.
    GenerateOptions o = greedy(4);
    o.draft = 3;
    o.block_drafter = &fresh_drafter;
    EXPECT_THROW(dfm::generate(target, prompt, o), dfm::Error);
    dfm::Session hybrid(model(kQwen35), {.ctx = 128});
    EXPECT_THROW(dfm::BlockDrafter(dir.string(), hybrid), dfm::Error);
    EXPECT_THROW(dfm::BlockDrafter((dir / "nothing").string(), target), dfm::Error);
    fs::remove_all(dir);
}

}  // namespace
