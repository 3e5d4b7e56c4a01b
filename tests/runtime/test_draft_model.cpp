// Speculative decoding with a draft model (GenerateOptions::drafter): whatever the drafter
// guesses, the answer is the target's greedy answer token for token; a drafter equal to the
// target has every guess kept; a truncated copy of the target (a correlated drafter) has some
// kept and some refused, which exercises the hybrid drafter's way back through its checkpoint.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "common/golden.h"
#include "diskformer/generate.h"
#include "gguf/gguf.h"

namespace {

namespace dfm = diskformer;
namespace fs = std::filesystem;
using dfm::GenerateOptions;

constexpr const char* kQwen3 = "q3_4L_kmix";      // attention only
constexpr const char* kQwen35 = "q35_4L_iq2mix";  // hybrid: gated delta net + attention

fs::path golden_model(const std::string& name) { return df::test::golden_dir() / "models" / (name + ".gguf"); }

// A copy of a golden model, changed by `edit` (keys) and without the tensors `drop` names.
template <class Edit, class Drop>
fs::path rewritten(const std::string& name, const std::string& tag, Edit edit, Drop drop) {
    const fs::path out = fs::temp_directory_path() / ("df_draft_" + name + "_" + tag + "_" + std::to_string(::getpid()) + ".gguf");
    auto f = df::gguf::File::open(golden_model(name).string());
    df::gguf::Writer w(f->alignment());
    for (const auto& kv : f->kv()) w.set(kv.key, kv.value);
    edit(w, *f);
    for (const auto& t : f->tensors())
        if (!drop(t.name)) w.add_tensor(t.name, t.type, t.shape, std::vector<uint8_t>(t.data, t.data + t.bytes));
    w.write(out.string());
    return out;
}

// The model without its last layer: a drafter whose guesses are often the target's.
fs::path truncated(const std::string& name) {
    auto f = df::gguf::File::open(golden_model(name).string());
    const std::string arch = f->get<std::string>("general.architecture");
    const int n = f->get<int>(arch + ".block_count");
    const std::string last = "blk." + std::to_string(n - 1) + ".";
    return rewritten(
        name, "trunc", [&](df::gguf::Writer& w, const df::gguf::File&) { w.set(arch + ".block_count", df::gguf::Value::u32(n - 1)); },
        [&](const std::string& t) { return t.rfind(last, 0) == 0; });
}

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
            const fs::path p = truncated(base);
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
    const fs::path p = rewritten(
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

}  // namespace
