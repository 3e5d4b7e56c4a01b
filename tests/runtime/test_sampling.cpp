// The sampler on hand-made logits, and the text stream (reasoning split, stop strings, UTF-8)
// on hand-picked tokens of the golden vocabulary.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "common/golden.h"
#include "gguf/gguf.h"
#include "backend/backend.h"
#include "backend/row_mass.h"
#include "runtime/sampling.h"
#include "runtime/text_stream.h"

namespace {

namespace dfm = diskformer;
using dfm::GenerateOptions;
using dfm::sampling::Sampler;

GenerateOptions opts(float temp, int top_k = 0, float top_p = 1, float min_p = 0) {
    GenerateOptions o;
    o.temperature = temp;
    o.top_k = top_k;
    o.top_p = top_p;
    o.min_p = min_p;
    o.seed = 42;
    return o;
}

// How often each token is drawn from `logits` in n draws.
std::vector<int> histogram(const GenerateOptions& o, const std::vector<float>& logits, int n = 4000) {
    Sampler s(o);
    std::vector<int> h(logits.size());
    for (int i = 0; i < n; ++i) {
        auto l = logits;
        ++h[s.sample(l, {})];
    }
    return h;
}

TEST(Rng, DeterministicAndUniform) {
    dfm::sampling::Rng a(1), b(1), c(2);
    bool differs = false;
    double sum = 0;
    for (int i = 0; i < 10000; ++i) {
        const double u = a.uniform();
        EXPECT_EQ(u, b.uniform());
        differs |= u != c.uniform();
        ASSERT_GE(u, 0.0);
        ASSERT_LT(u, 1.0);
        sum += u;
    }
    EXPECT_TRUE(differs);
    EXPECT_NEAR(sum / 10000, 0.5, 0.02);
}

TEST(Sampler, GreedyTakesTheLowestIdOnTies) {
    Sampler s(opts(0));
    EXPECT_TRUE(s.is_plain_greedy());
    std::vector<float> l{1, 3, 3, 2};
    EXPECT_EQ(s.sample(l, {}), 1);
}

TEST(Sampler, FollowsTheDistribution) {
    const std::vector<float> l{std::log(0.5f), std::log(0.3f), std::log(0.2f)};
    const auto h = histogram(opts(1), l);
    EXPECT_NEAR(h[0] / 4000.0, 0.5, 0.03);
    EXPECT_NEAR(h[1] / 4000.0, 0.3, 0.03);
    EXPECT_NEAR(h[2] / 4000.0, 0.2, 0.03);
}

TEST(Sampler, Truncations) {
    const std::vector<float> l{std::log(0.5f), std::log(0.3f), std::log(0.2f), std::log(1e-4f)};
    EXPECT_EQ(histogram(opts(1, 2), l)[2], 0) << "top-k 2";
    EXPECT_EQ(histogram(opts(1, 0, 0.45f), l)[0], 4000) << "top-p 0.45: the first token reaches it";
    const auto p7 = histogram(opts(1, 0, 0.7f), l);
    EXPECT_EQ(p7[2] + p7[3], 0) << "top-p 0.7: two tokens";
    EXPECT_NEAR(p7[0] / 4000.0, 0.625, 0.03);
    EXPECT_EQ(histogram(opts(1, 0, 1, 0.5f), l)[2], 0) << "min-p 0.5: 0.2 < 0.5 × 0.5";
    EXPECT_EQ(histogram(opts(5, 0, 1, 0.01f), l)[3], 0) << "min-p before temperature";
    // A low temperature sharpens the survivors.
    EXPECT_GT(histogram(opts(0.1f), l)[0], 3900);
}

TEST(Sampler, TopPOverALargeVocabulary) {
    // 150k near-equal logits: the incremental sort must go past its first rounds.
    std::vector<float> l(150000, 0.0f);
    l[77] = 0.5f;
    const auto h = histogram(opts(1, 0, 0.9f), l, 20);
    int drawn = 0;
    for (int x : h) drawn += x;
    EXPECT_EQ(drawn, 20);
}

// Top-k over a large vocabulary (one pass, not a selection among all candidates): the k best
// by logit, ties to the lower ids, whatever the order they come in.
TEST(Sampler, TopKOverALargeVocabularyKeepsTheBestAndLowerIdsOnTies) {
    std::vector<float> l(150000, 1.0f);
    l[140000] = 2.0f;
    l[100000] = 2.0f;
    l[7] = -1.0f;
    const auto h = histogram(opts(1e6f, 5), l, 2000);  // near-uniform over the survivors
    std::vector<int> drawn;
    for (size_t i = 0; i < h.size(); ++i)
        if (h[i]) drawn.push_back(static_cast<int>(i));
    EXPECT_EQ(drawn, (std::vector<int>{0, 1, 2, 100000, 140000}));

    // Random logits with ties: the drawn tokens are exactly the 40 best under (logit, lower id).
    std::vector<float> r(150000);
    uint64_t x = 12345;
    for (auto& v : r) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        v = static_cast<float>((x >> 40) % 3000) / 100.0f;  // 3,000 levels: many ties at the top
    }
    std::vector<int32_t> ids(r.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return r[a] > r[b]; });
    std::vector<int> want(ids.begin(), ids.begin() + 40);
    std::sort(want.begin(), want.end());
    const auto hr = histogram(opts(1e6f, 40), r, 4000);
    std::vector<int> got;
    for (size_t i = 0; i < hr.size(); ++i)
        if (hr[i]) got.push_back(static_cast<int>(i));
    EXPECT_EQ(got, want);
}

// The sampler's steps written plainly (sampling.cpp sorts long candidate lists by radix and
// short heads by heaps; both must give this order): all tokens as candidates, sorted by logit
// and then lower id; top-p's mass summed in token order, reached in sorted order; the min-p
// floor; temperature on the survivors; one uniform draw walked in sorted order.
int32_t plain_draw(const std::vector<float>& l, const GenerateOptions& o, dfm::sampling::Rng& rng) {
    std::vector<int32_t> ids(l.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
    const float lmax = l[ids[0]];
    size_t keep = ids.size();
    if (o.top_p < 1) {
        double z = 0;
        for (float x : l) z += std::exp(static_cast<double>(x - lmax));
        double cum = 0;
        for (size_t i = 0; i < ids.size(); ++i)
            if ((cum += std::exp(static_cast<double>(l[ids[i]] - lmax))) >= o.top_p * z) {
                keep = i + 1;
                break;
            }
    }
    ids.resize(keep);
    if (o.min_p > 0) {
        const float floor = lmax + std::log(o.min_p);
        ids.erase(std::find_if(ids.begin() + 1, ids.end(), [&](int32_t t) { return l[t] < floor; }), ids.end());
    }
    std::vector<double> w(ids.size());
    double total = 0;
    for (size_t i = 0; i < ids.size(); ++i) total += w[i] = std::exp((l[ids[i]] - lmax) / o.temperature);
    const double u = rng.uniform() * total;
    double cum = 0;
    for (size_t i = 0; i < ids.size(); ++i)
        if (u < (cum += w[i])) return ids[i];
    return ids.back();
}

TEST(Sampler, AWholeVocabularyDrawsWhatThePlainStepsDraw) {
    // Top-k off over 150k logits, flat and peaked, with ties, -0 beside +0 and -inf: the fast
    // sorts must give the plain order, so every draw is the plain one.
    uint64_t x = 99;
    auto next = [&] { return (x = x * 6364136223846793005ull + 1442695040888963407ull) >> 33; };
    for (float spread : {0.3f, 4.0f}) {
        std::vector<float> base(150000);
        for (auto& v : base) v = spread * static_cast<float>(static_cast<int>(next() % 2001) - 1000) / 1000.0f;
        for (int i = 0; i < 500; ++i) base[next() % base.size()] = (i % 3 == 0) ? -0.0f : (i % 3 == 1) ? 0.0f : -INFINITY;
        for (const auto& [p, minp] : std::vector<std::pair<float, float>>{{0.9f, 0}, {0.5f, 0.05f}, {1, 0.05f}, {1, 0}}) {
            SCOPED_TRACE("spread " + std::to_string(spread) + " top-p " + std::to_string(p) + " min-p " + std::to_string(minp));
            GenerateOptions o = opts(0.8f, 0, p, minp);
            Sampler s(o);
            dfm::sampling::Rng rng(o.seed);
            for (int d = 0; d < 12; ++d) {
                std::vector<float> l = base;
                l[next() % l.size()] += 1.5f;  // a different head each draw
                const int32_t want = plain_draw(l, o, rng);
                ASSERT_EQ(s.sample(l, {}), want) << "draw " << d;
            }
        }
    }
}

// A row's n likeliest (logit, then lower id; -0 as +0) and then `extra`'s own logits, found
// plainly: what Session::top_logits answers.
std::vector<std::pair<int32_t, float>> plain_top(const std::vector<float>& l, size_t n, const std::vector<int32_t>& extra) {
    std::vector<int32_t> ids(l.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
    std::vector<std::pair<int32_t, float>> out;
    for (size_t i = 0; i < n; ++i) out.push_back({ids[i], l[ids[i]]});
    for (int32_t id : extra) out.push_back({id, l[id]});
    return out;
}

TEST(Sampler, TheTopCandidatesDrawWhatTheWholeRowDraws) {
    // sample_top from the row's likeliest tokens and the penalised / biased ones picks what
    // sample() picks from the whole row, draw by draw with the same seed: with penalties that
    // lower the likeliest and a negative presence penalty that raises tokens from the bottom,
    // biases that ban the best and lift the worst, ties, -0 beside +0, -inf.
    uint64_t x = 7;
    auto next = [&] { return (x = x * 6364136223846793005ull + 1442695040888963407ull) >> 33; };
    const size_t V = 20000;
    std::vector<float> base(V);
    for (auto& v : base) v = static_cast<float>(static_cast<int>(next() % 801) - 400) / 50.0f;  // ties
    for (int i = 0; i < 60; ++i) base[next() % V] = (i % 3 == 0) ? -0.0f : (i % 3 == 1) ? 0.0f : -INFINITY;
    const int32_t best = static_cast<int32_t>(std::max_element(base.begin(), base.end()) - base.begin());
    const int32_t worst = static_cast<int32_t>(std::min_element(base.begin(), base.end()) - base.begin());
    int cases = 0;
    for (float temp : {0.0f, 0.7f, 1.5f})
        for (int k : {1, 7, 40, 300})
            for (int variant = 0; variant < 4; ++variant) {
                GenerateOptions o = opts(temp, k, variant == 1 ? 0.8f : 1.0f, variant == 2 ? 0.05f : 0.0f);
                o.seed = 1000 + cases;
                if (variant >= 1) o.repeat_penalty = 1.3f;
                if (variant == 2) o.presence_penalty = -3.0f;  // raises every recent token
                if (variant == 3) {
                    o.frequency_penalty = 0.4f;
                    o.penalty_window = 16;
                    o.logit_bias = {{best, -100.0f}, {worst, 30.0f}, {5, 2.0f}, {5, 1.0f}};
                }
                if (temp == 0 && variant == 0) o.presence_penalty = 0.5f;  // not plain greedy
                SCOPED_TRACE("temp " + std::to_string(temp) + " top-k " + std::to_string(k) + " variant " + std::to_string(variant));
                Sampler whole(o), top(o);
                std::vector<int32_t> recent;
                for (int i = 0; i < 20; ++i) recent.push_back(static_cast<int32_t>(next() % V));
                recent.push_back(best);
                for (int d = 0; d < 25; ++d) {
                    std::vector<float> l = base;
                    for (int j = 0; j < 5; ++j) l[next() % V] += 3.0f;  // a different head each draw
                    std::vector<int32_t> extra;
                    const size_t n_top = top.top_plan(V, recent, extra);
                    ASSERT_GT(n_top, 0u);
                    ASSERT_EQ(n_top, (temp == 0 ? 1u : static_cast<size_t>(k)) + extra.size());
                    const int32_t got = top.sample_top(plain_top(l, n_top, extra), n_top, recent);
                    std::vector<float> row = l;
                    ASSERT_EQ(got, whole.sample(row, recent)) << "draw " << d;
                    recent.push_back(got);
                    if (d % 3 == 0) recent.push_back(static_cast<int32_t>(next() % V));
                }
                ++cases;
            }
    EXPECT_EQ(cases, 48);
}

TEST(Sampler, WithTopKOffTheHeadDrawsWhatTheWholeRowDraws) {
    // Top-k off with top-p and / or min-p: sample_top from the row's 1024 likeliest and the row's
    // mass (Session::row_mass) picks what sample() picks from the whole row, or returns -1
    // without drawing when the cut falls past them; then sample() of the whole row keeps the
    // two samplers' generators in step. Peaked rows (the head decides) and flat ones (it cannot),
    // penalties that lower the best and raise the worst, biases.
    uint64_t x = 11;
    auto next = [&] { return (x = x * 6364136223846793005ull + 1442695040888963407ull) >> 33; };
    const size_t V = 30000;
    int decided = 0, whole_rows = 0, cases = 0;
    for (float temp : {0.6f, 1.2f})
        for (const auto& [top_p, min_p] : {std::pair{0.9f, 0.0f}, std::pair{0.5f, 0.05f}, std::pair{1.0f, 0.1f}, std::pair{0.97f, 0.01f}})
            for (int variant = 0; variant < 3; ++variant) {
                GenerateOptions o = opts(temp, 0, top_p, min_p);
                o.seed = 500 + cases;
                if (variant >= 1) o.repeat_penalty = 1.4f;
                if (variant == 2) {
                    o.presence_penalty = -2.0f;
                    o.logit_bias = {{0, 5.0f}, {17, -100.0f}};
                }
                SCOPED_TRACE("temp " + std::to_string(temp) + " top-p " + std::to_string(top_p) + " min-p " +
                             std::to_string(min_p) + " variant " + std::to_string(variant));
                Sampler whole(o), head(o);
                std::vector<int32_t> recent;
                for (int i = 0; i < 12; ++i) recent.push_back(static_cast<int32_t>(next() % V));
                for (int d = 0; d < 16; ++d) {
                    // Even draws: a few hundred likely tokens over a low floor; odd: nearly flat.
                    std::vector<float> l(V);
                    for (auto& v : l) v = static_cast<float>(static_cast<int>(next() % 400)) / 100.0f - (d % 2 ? 0.f : 12.f);
                    for (int j = 0; j < (d % 2 ? 3 : 300); ++j) l[next() % V] = static_cast<float>(next() % 600) / 100.0f;
                    std::vector<int32_t> extra;
                    const size_t n_top = head.top_plan(V, recent, extra);
                    ASSERT_EQ(n_top, size_t{df::Backend::kTopLogitsMax});
                    auto mass = [&](float lmax) {
                        uint64_t z = 0;
                        for (float v : l) z += df::mass_term(v, lmax);
                        return z;
                    };
                    int32_t got = head.sample_top(plain_top(l, n_top, extra), n_top, recent, mass);
                    std::vector<float> row = l;
                    if (got < 0) {
                        ++whole_rows;
                        got = head.sample(row, recent);
                        row = l;
                    } else {
                        ++decided;
                    }
                    ASSERT_EQ(got, whole.sample(row, recent)) << "draw " << d;
                    recent.push_back(got);
                }
                ++cases;
            }
    EXPECT_EQ(cases, 24);
    EXPECT_GT(decided, 100) << "the head decided too rarely to test it";
    EXPECT_GT(whole_rows, 20) << "the whole row was never needed: the fallback is untested";
}

TEST(Sampler, TopPlanAsksForTheWholeRowWhenItMust) {
    std::vector<int32_t> extra;
    const std::vector<int32_t> recent{3, 3, 9};
    EXPECT_EQ(Sampler(opts(0.8f, 0)).top_plan(1000, recent, extra), 0u) << "top-k, top-p and min-p off";
    EXPECT_EQ(Sampler(opts(0.8f, 0, 0.9f)).top_plan(5000, recent, extra), 1024u) << "top-k off, top-p on: the head";
    EXPECT_EQ(Sampler(opts(0.8f, 0, 1, 0.1f)).top_plan(700, recent, extra), 700u) << "min-p on: a small vocabulary whole";
    EXPECT_EQ(Sampler(opts(0.8f, 250)).top_plan(1000, recent, extra), 0u) << "a quarter of the vocabulary";
    EXPECT_EQ(Sampler(opts(0.8f, 40)).top_plan(1000, recent, extra), 40u);
    EXPECT_TRUE(extra.empty()) << "no penalties: the window is not needed";
    GenerateOptions o = opts(0.8f, 40);
    o.repeat_penalty = 1.1f;
    o.logit_bias = {{9, 1.0f}, {500, -2.0f}};
    EXPECT_EQ(Sampler(o).top_plan(1000, recent, extra), 43u);
    EXPECT_EQ(extra, (std::vector<int32_t>{3, 9, 500})) << "distinct, in id order";
    o.logit_bias = {{1000, 1.0f}};
    EXPECT_EQ(Sampler(o).top_plan(1000, recent, extra), 0u) << "sample() names the bad bias";
    o.logit_bias.clear();
    o.penalty_window = 4000;
    std::vector<int32_t> many(3000);
    for (size_t i = 0; i < many.size(); ++i) many[i] = static_cast<int32_t>(i);
    EXPECT_EQ(Sampler(o).top_plan(100000, many, extra), 0u) << "past 1024 candidates";
}

TEST(Sampler, Penalties) {
    GenerateOptions o = opts(0);
    o.repeat_penalty = 2;
    Sampler s(o);
    EXPECT_FALSE(s.is_plain_greedy());
    const std::vector<int32_t> recent{0, 0, 2};
    std::vector<float> l{1.0f, 0.6f, -0.1f};
    EXPECT_EQ(s.sample(l, recent), 1);  // 1.0 / 2 < 0.6
    EXPECT_FLOAT_EQ(l[2], -0.2f);      // negative logits are multiplied
    o.repeat_penalty = 1;
    o.presence_penalty = 0.5f;
    Sampler p(o);
    l = {1.0f, 0.6f, -0.1f};
    EXPECT_EQ(p.sample(l, recent), 1);
    EXPECT_FLOAT_EQ(l[0], 0.5f);  // once, however often it occurs
    o.penalty_window = 1;         // sees only the last token (2)
    Sampler w(o);
    l = {1.0f, 0.6f, -0.1f};
    EXPECT_EQ(w.sample(l, recent), 0);
    o.penalty_window = 64;
    o.presence_penalty = 0;
    o.frequency_penalty = 0.3f;  // per occurrence: token 0 twice, token 2 once
    Sampler f(o);
    EXPECT_FALSE(f.is_plain_greedy());
    l = {1.0f, 0.6f, -0.1f};
    EXPECT_EQ(f.sample(l, recent), 1);
    EXPECT_FLOAT_EQ(l[0], 0.4f);
    EXPECT_FLOAT_EQ(l[2], -0.4f);
}

TEST(Sampler, LogitBias) {
    GenerateOptions o = opts(0);
    o.logit_bias = {{2, 5.0f}, {0, -100.0f}};
    Sampler s(o);
    EXPECT_FALSE(s.is_plain_greedy()) << "the backend's argmax does not know the biases";
    std::vector<float> l{1.0f, 0.6f, -0.1f};
    EXPECT_EQ(s.sample(l, {}), 2);
    EXPECT_FLOAT_EQ(l[2], 4.9f);
    EXPECT_FLOAT_EQ(l[0], -99.0f);
    o.logit_bias = {{3, 1.0f}};
    Sampler past(o);
    l = {1.0f, 0.6f, -0.1f};
    EXPECT_THROW(past.sample(l, {}), dfm::Error);
    o.logit_bias = {{-1, 1.0f}};
    EXPECT_THROW(dfm::sampling::check_options(o), dfm::Error);
}

TEST(Sampler, RejectsBadOptions) {
    auto bad = [](auto edit) {
        GenerateOptions o;
        edit(o);
        EXPECT_THROW(dfm::sampling::check_options(o), dfm::Error);
    };
    bad([](GenerateOptions& o) { o.temperature = -1; });
    bad([](GenerateOptions& o) { o.top_p = 1.5f; });
    bad([](GenerateOptions& o) { o.min_p = 1; });
    bad([](GenerateOptions& o) { o.top_k = -2; });
    bad([](GenerateOptions& o) { o.repeat_penalty = 0; });
    bad([](GenerateOptions& o) { o.max_tokens = -5; });
    bad([](GenerateOptions& o) { o.stop = {""}; });
    EXPECT_NO_THROW(dfm::sampling::check_options(GenerateOptions{}));
}

class Stream : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        auto f = df::gguf::File::open((df::test::golden_dir() / "models" / "q3_4L_kmix.gguf").string());
        tok_ = df::tokenizer::Tokenizer::from_gguf(*f).release();
    }
    static void TearDownTestSuite() { delete tok_; }
    static int32_t id(const char* special) { return tok_->find(special); }
    static std::vector<int32_t> ids(const std::string& text) { return tok_->encode(text, false); }

    // Feeds tokens (the last one final) and collects the text of each part.
    struct Seen {
        std::string reasoning, answer;
        bool stopped = false;
    };
    static Seen run(dfm::TextStream& s, const std::vector<int32_t>& tokens) {
        Seen seen;
        for (size_t i = 0; i < tokens.size() && !seen.stopped; ++i) {
            const auto out = s.push(tokens[i], i + 1 == tokens.size());
            (out.part == dfm::Part::reasoning ? seen.reasoning : seen.answer) += out.text;
            seen.stopped = out.stopped;
        }
        return seen;
    }
    static df::tokenizer::Tokenizer* tok_;
};
df::tokenizer::Tokenizer* Stream::tok_ = nullptr;

TEST_F(Stream, SplitsReasoningFromAnswer) {
    std::vector<int32_t> t;
    auto add = [&](const std::vector<int32_t>& more) { t.insert(t.end(), more.begin(), more.end()); };
    add({id("<think>")});
    add(ids("\nLet me think.\nYes.\n\n"));
    add({id("</think>")});
    add(ids("\n\nThe answer.\n"));
    add({id("<|im_end|>")});
    dfm::TextStream s(*tok_, {}, dfm::Part::answer);
    const auto seen = run(s, t);
    EXPECT_EQ(seen.reasoning, "Let me think.\nYes.");
    EXPECT_EQ(seen.answer, "The answer.\n");
}

TEST_F(Stream, StartPartFollowsThePrompt) {
    auto prompt = tok_->encode("<|im_start|>assistant\n<think>\n", true);
    EXPECT_EQ(dfm::TextStream::start_part(*tok_, prompt), dfm::Part::reasoning);
    prompt = tok_->encode("<|im_start|>assistant\n<think>\n\n</think>\n\n", true);
    EXPECT_EQ(dfm::TextStream::start_part(*tok_, prompt), dfm::Part::answer);
    prompt = tok_->encode("<think>x</think><|im_start|>assistant\n", true);
    EXPECT_EQ(dfm::TextStream::start_part(*tok_, prompt), dfm::Part::answer);
}

TEST_F(Stream, StopStringAcrossTokensIsCutAndHeldBack) {
    dfm::TextStream s(*tok_, {"lo wor"}, dfm::Part::answer);
    const auto t = ids("Hello world again");
    std::string out;
    bool stopped = false;
    for (size_t i = 0; i < t.size() && !stopped; ++i) {
        const auto o = s.push(t[i], false);
        out += o.text;
        stopped = o.stopped;
        // Nothing that could begin the stop string is ever released early.
        EXPECT_EQ(out.find("lo"), std::string::npos) << out;
    }
    EXPECT_TRUE(stopped);
    EXPECT_EQ(out, "Hel");
}

TEST_F(Stream, Utf8IsNeverSplitAndInvalidBytesAreReplaced) {
    // "é" as its two byte tokens (byte-level BPE spells 0xC3 0xA9 as "Ã" "©").
    const int32_t c3 = tok_->find("Ã"), a9 = tok_->find("©");
    ASSERT_GE(c3, 0);
    ASSERT_GE(a9, 0);
    dfm::TextStream s(*tok_, {}, dfm::Part::answer);
    EXPECT_EQ(s.push(c3, false).text, "");
    EXPECT_EQ(s.push(a9, false).text, "é");
    EXPECT_EQ(s.push(a9, false).text, "\xEF\xBF\xBD");  // a stray continuation byte
    EXPECT_EQ(s.push(c3, true).text, "\xEF\xBF\xBD");   // cut short by the end
}

}  // namespace
