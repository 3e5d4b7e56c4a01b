// Continuous batching (runtime/engine.h, Model::forward_lanes): one-token steps of several
// sessions in one pass give each session the bits of a step alone, and generation from several
// threads at once gives every request the answer it gets alone.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>

#include "common/golden_models.h"
#include "diskformer/generate.h"
#include "runtime/model_impl.h"
#include "runtime/session_impl.h"

namespace {

namespace dfm = diskformer;
using dfm::GenerateOptions;

std::shared_ptr<dfm::Model> model(const std::string& name) { return df::test::cpu_golden_model(name); }

const char* const kTexts[] = {
    "The quick brown fox jumps over",
    "Once upon a time, in a land far away, there lived a",
    "1, 2, 3, 4,",
    "def main():\n    print(",
    "Le soleil se lève à l'est et",
    "Q: What is the capital of France?\nA:",
    "x",
    "In 1905 Einstein published four papers that",
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class Batching : public ::testing::TestWithParam<std::string> {};
// Attention only, a hybrid (recurrent state per lane), and the golden set's other quant mix.
INSTANTIATE_TEST_SUITE_P(Models, Batching, ::testing::Values("q3_4L_kmix", "q35_4L_iq2mix", "q3_4L_exotic"));

TEST_P(Batching, LanesEqualLoneSteps) {
    // Sessions at different positions (prompts of different lengths, one longer than a chunk of
    // this test) step together through Session::Impl::run_steps, in batches of 2 .. 8 that change
    // every step; twins step alone. Logits and argmax must be bitwise equal each step.
    auto m = model(GetParam());
    const dfm::SessionOptions so{.ctx = 256, .chunk = 16};
    constexpr int kN = 8;
    std::vector<std::unique_ptr<dfm::Session>> batched, alone;
    std::vector<int32_t> next(kN);
    for (int i = 0; i < kN; ++i) {
        const auto prompt = m->tokenize(kTexts[i]);
        for (auto* v : {&batched, &alone}) {
            v->push_back(std::make_unique<dfm::Session>(m, so));
            v->back()->append(prompt);
        }
        next[i] = alone.back()->argmax();
        ASSERT_EQ(batched.back()->argmax(), next[i]);
    }
    const auto before = m->batch_stats();
    for (int step = 0; step < 12; ++step) {
        const int n = 2 + step % (kN - 1);  // lanes this step
        const int first = step % kN;
        std::vector<dfm::Engine::Step> steps(n);
        std::vector<dfm::Engine::Step*> batch;
        for (int k = 0; k < n; ++k) {
            const int i = (first + k) % kN;
            steps[k].session = &batched[i]->impl();
            steps[k].token = next[i];
            batch.push_back(&steps[k]);
        }
        dfm::Session::Impl::run_steps(batch);
        for (int k = 0; k < n; ++k) {
            const int i = (first + k) % kN;
            const int32_t want = alone[i]->step(next[i]);
            ASSERT_EQ(batched[i]->argmax(), want) << "step " << step << " session " << i;
            ASSERT_TRUE(same_bits(batched[i]->logits(), alone[i]->logits())) << "step " << step << " session " << i;
            ASSERT_EQ(batched[i]->tokens(), alone[i]->tokens());
            next[i] = want;
        }
    }
    // Run directly, the passes above are not the engine's to count; the twins' steps are.
    EXPECT_EQ(m->batch_stats().passes, before.passes);
    EXPECT_GT(m->batch_stats().lone_steps, before.lone_steps);
    // A session goes on alone after batched steps (uploading its token: no argmax feed).
    for (int i = 0; i < kN; ++i) {
        const int32_t a = batched[i]->step(next[i]), b = alone[i]->step(next[i]);
        EXPECT_EQ(a, b);
        EXPECT_TRUE(same_bits(batched[i]->logits(), alone[i]->logits())) << "session " << i;
    }
}

TEST_P(Batching, ConcurrentGenerationGivesEachRequestItsOwnAnswer) {
    // Eight requests with different options, generated from eight threads at once on sessions of
    // one model, against the same requests one after another on fresh sessions.
    auto m = model(GetParam());
    constexpr int kN = 8;
    std::vector<GenerateOptions> opts(kN);
    for (int i = 0; i < kN; ++i) {
        GenerateOptions& o = opts[i];
        o.max_tokens = 24 + 3 * i;  // loops end at different times
        if (i % 4 == 1) {           // sampled
            o.temperature = 0.9f;
            o.seed = 7 + i;
        }
        if (i == 2) o.repeat_penalty = 1.3f;
        if (i == 3) o.draft = 4;  // speculative: its passes take turns with the batches
        if (i == 5) o.logprobs = 3;
        if (i == 6) o.stop = {"e"};
    }
    std::vector<std::vector<int32_t>> prompts;
    for (const char* t : kTexts) prompts.push_back(m->tokenize(t));
    std::vector<dfm::GenerateResult> want(kN);
    for (int i = 0; i < kN; ++i) {
        dfm::Session s(m, {.ctx = 256});
        want[i] = dfm::generate(s, prompts[i], opts[i]);
    }
    const auto before = m->batch_stats();
    std::vector<std::unique_ptr<dfm::Session>> sessions;
    for (int i = 0; i < kN; ++i) sessions.push_back(std::make_unique<dfm::Session>(m, dfm::SessionOptions{.ctx = 256}));
    std::vector<dfm::GenerateResult> got(kN);
    std::vector<std::string> errors(kN);
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < kN; ++i)
        threads.emplace_back([&, i] {
            ++ready;
            while (ready < kN) std::this_thread::yield();
            try {
                got[i] = dfm::generate(*sessions[i], prompts[i], opts[i]);
            } catch (const std::exception& e) {
                errors[i] = e.what();
            }
        });
    for (auto& t : threads) t.join();
    for (int i = 0; i < kN; ++i) {
        ASSERT_EQ(errors[i], "") << "request " << i;
        EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
        EXPECT_EQ(got[i].text, want[i].text) << "request " << i;
        EXPECT_EQ(got[i].stop, want[i].stop) << "request " << i;
        ASSERT_EQ(got[i].logprobs.size(), want[i].logprobs.size());
        for (size_t k = 0; k < got[i].logprobs.size(); ++k) {
            EXPECT_EQ(got[i].logprobs[k].chosen.logprob, want[i].logprobs[k].chosen.logprob);
            ASSERT_EQ(got[i].logprobs[k].top.size(), want[i].logprobs[k].top.size());
            for (size_t j = 0; j < got[i].logprobs[k].top.size(); ++j)
                EXPECT_EQ(got[i].logprobs[k].top[j].token, want[i].logprobs[k].top[j].token);
        }
        // The session holds what it holds after a lone request.
        EXPECT_EQ(sessions[i]->n_cached(), static_cast<int>(prompts[i].size() + want[i].tokens.size() - 1));
    }
    const auto after = m->batch_stats();
    std::printf("[%s] %llu batched passes of %llu steps, %llu steps alone\n", GetParam().c_str(),
                static_cast<unsigned long long>(after.passes - before.passes),
                static_cast<unsigned long long>(after.batched_steps - before.batched_steps),
                static_cast<unsigned long long>(after.lone_steps - before.lone_steps));
    EXPECT_GT(after.passes, before.passes);  // the loops did share passes
}

TEST(BatchingSpeculation, ALoopDraftsOnlyWhileItIsTheModelsOnlyLoop) {
    // Beside other generation loops of its model a speculating one takes plain steps, which
    // share their passes, and drafts again once it is alone; the answer is the same either way.
    // The other loop is a registration (Engine::Decoding) held by the test, so nothing depends
    // on timing; ConcurrentGenerationGivesEachRequestItsOwnAnswer runs real ones.
    for (const char* name : {"q3_4L_kmix", "q35_4L_iq2mix"}) {
        SCOPED_TRACE(name);
        auto m = model(name);
        const auto prompt = m->tokenize("one two three, one two three, one two three, one two");
        GenerateOptions o;
        o.max_tokens = 40;
        dfm::Session plain(m, {.ctx = 256});
        const auto want = dfm::generate(plain, prompt, o);
        o.draft = 4;
        o.draft_adaptive = false;
        dfm::Session drafter(m, {.ctx = 256});  // the target as its own drafter: every guess kept
        o.drafter = &drafter;
        dfm::Session s(m, {.ctx = 256});
        dfm::GenerateResult crowded;
        {
            dfm::Session other(m, {.ctx = 256});
            const dfm::Engine::Decoding loop(*other.impl().engine, other.impl().step_group());
            crowded = dfm::generate(s, prompt, o);
        }
        EXPECT_EQ(crowded.tokens, want.tokens);
        EXPECT_EQ(crowded.stats.drafted_tokens, 0);
        const auto alone = dfm::generate(s, prompt, o);
        EXPECT_EQ(alone.tokens, want.tokens);
        EXPECT_GT(alone.stats.drafted_tokens, static_cast<int64_t>(alone.tokens.size()) / 2);
        EXPECT_EQ(alone.stats.accepted_tokens, alone.stats.drafted_tokens);
    }
}

TEST(BatchingErrors, AFullSessionFailsAloneAndTheOthersGoOn) {
    auto m = model("q35_4L_iq2mix");
    dfm::Session full(m, {.ctx = 8});
    const auto prompt = m->tokenize("one two three four five six seven eight nine");
    full.append(std::span(prompt).first(8));
    std::atomic<bool> go{false};
    std::string error;
    std::vector<int32_t> other;
    std::thread a([&] {
        while (!go) std::this_thread::yield();
        try {
            full.step(1);
        } catch (const dfm::Error& e) {
            error = e.what();
        }
    });
    std::thread b([&] {
        dfm::Session s(m, {.ctx = 64});
        s.append(prompt);
        go = true;
        int32_t t = s.argmax();
        for (int i = 0; i < 10; ++i) other.push_back(t = s.step(t));
    });
    a.join();
    b.join();
    EXPECT_NE(error.find("context full"), std::string::npos) << error;
    EXPECT_EQ(other.size(), 10u);
    EXPECT_EQ(full.n_cached(), 8);
}

TEST(BatchingGraphs, RecordedOnlyForASetThatComesTogetherAgainAndDroppedWithItsStates) {
    // The engine's bookkeeping of batched passes' graphs (the CPU backend records none, so the
    // passes themselves run unrecorded here; CudaModel.BatchedStepsEqualLoneSteps replays them).
    auto be = df::make_cpu_backend(1);
    int a = 0, b = 0, c = 0;  // stand-ins for three sessions' states
    using Sig = std::vector<dfm::Engine::LaneSig>;
    const Sig ab{{&a, 0}, {&b, 0}}, abc{{&a, 0}, {&b, 0}, {&c, 0}}, ab_long{{&a, 0}, {&b, 1}};
    {
        setenv("DF_BATCH_GRAPHS", "0", 1);
        dfm::Engine off(*be);
        unsetenv("DF_BATCH_GRAPHS");
        EXPECT_EQ(off.lane_graph(ab), 0u);
        EXPECT_EQ(off.lane_graph(ab), 0u) << "DF_BATCH_GRAPHS=0: never recorded";
    }
    dfm::Engine e(*be);  // recorded by default
    EXPECT_EQ(e.lane_graph(ab), 0u) << "first time together: not recorded";
    const uint64_t k = e.lane_graph(ab);
    EXPECT_EQ(k >> 56, 0xFEu) << "above every session's own keys";
    EXPECT_EQ(e.lane_graph(ab), k);
    EXPECT_EQ(e.lane_graph(abc), 0u);
    EXPECT_EQ(e.lane_graph(ab), k) << "a kept graph is found again after another set";
    EXPECT_EQ(e.lane_graph(ab_long), 0u) << "another length band is another graph";
    const uint64_t k2 = e.lane_graph(ab_long);
    EXPECT_NE(k2, 0u);
    EXPECT_NE(k2, k);
    e.drop_lane_graphs(&c);  // in no kept graph: nothing changes
    EXPECT_EQ(e.lane_graph(ab), k);
    e.drop_lane_graphs(&b);
    EXPECT_EQ(e.lane_graph(ab), 0u) << "dropped with its state";
    const uint64_t k3 = e.lane_graph(ab);
    EXPECT_NE(k3, 0u);
    EXPECT_NE(k3, k) << "a new key, never a dropped one";
    // At most kLaneGraphs kept: the least recently used goes.
    std::vector<int> states(2 * dfm::Engine::kLaneGraphs);
    for (size_t i = 0; i < dfm::Engine::kLaneGraphs; ++i) {
        const Sig s{{&states[2 * i], 0}, {&states[2 * i + 1], 0}};
        e.lane_graph(s);
        EXPECT_NE(e.lane_graph(s), 0u);
    }
    EXPECT_EQ(e.lane_graph(ab), 0u) << "evicted";
}

}  // namespace
