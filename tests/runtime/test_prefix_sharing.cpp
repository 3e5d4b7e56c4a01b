// Prefix sharing between sessions (Session::borrow): a session takes the start of its prompt
// from another session's cache (KV rows; a hybrid model's recurrent state at a checkpoint), and
// generation goes on with the bits of a session that had evaluated that prefix itself.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "common/golden_models.h"
#include "diskformer/generate.h"

namespace {

namespace dfm = diskformer;

std::shared_ptr<dfm::Model> model(const std::string& name) { return df::test::cpu_golden_model(name); }

const std::string kSystem =
    "You are a careful assistant. Answer in one short sentence, name your sources, and never invent a number. "
    "Tools: search(query), calculator(expression), calendar(date).";

std::vector<int32_t> chat(const dfm::Model& m, const std::string& user) {
    return dfm::chat_prompt(m, std::vector<dfm::ChatMessage>{{"system", kSystem, {}}, {"user", user, {}}});
}

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
    size_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
    return n;
}

class PrefixSharing : public ::testing::TestWithParam<std::string> {};
INSTANTIATE_TEST_SUITE_P(Models, PrefixSharing, ::testing::Values("q3_4L_kmix", "q35_4L_iq2mix"));

TEST_P(PrefixSharing, ABorrowedPrefixGivesTheAnswerOfAnEvaluatedOne) {
    auto m = model(GetParam());
    const bool hybrid = GetParam() == "q35_4L_iq2mix";
    const auto p1 = chat(*m, "What is the boiling point of water?");
    const auto p2 = chat(*m, "Who wrote Hamlet?");
    const size_t shared = common_prefix(p1, p2);
    ASSERT_GT(shared, 20u);
    dfm::GenerateOptions o;
    o.max_tokens = 12;
    const dfm::SessionOptions so{.ctx = 512};

    dfm::Session donor(m, so), ref(m, so), b(m, so);
    (void)dfm::generate(donor, p1, o);
    (void)dfm::generate(ref, p1, o);  // the reference goes on from its own cache
    const auto want = dfm::generate(ref, p2, o);
    const auto want_logits = ref.logits();

    const int n = b.borrowable(donor, p2);
    if (hybrid) {
        // Where the donor kept a checkpoint: after the system turn (its state goes no further).
        ASSERT_GT(n, 0);
        EXPECT_LT(static_cast<size_t>(n), shared);
        EXPECT_EQ(p2[static_cast<size_t>(n)], m->tokenize("<|im_start|>", true).at(0)) << "the next turn starts there";
    } else {
        EXPECT_EQ(static_cast<size_t>(n), shared);
    }
    EXPECT_EQ(b.borrow(donor, p2), n);
    EXPECT_EQ(b.n_cached(), n);
    EXPECT_EQ(b.borrowable(donor, p2), 0) << "nothing more to take";
    const auto got = dfm::generate(b, p2, o);
    EXPECT_EQ(got.stats.reused_tokens, n);
    EXPECT_EQ(got.tokens, want.tokens);
    const auto got_logits = b.logits();
    ASSERT_EQ(got_logits.size(), want_logits.size());
    EXPECT_EQ(std::memcmp(got_logits.data(), want_logits.data(), got_logits.size() * sizeof(float)), 0);
    // The donor lent without changing: its own conversation goes on as before.
    dfm::Session again(m, so);
    (void)dfm::generate(again, p1, o);
    EXPECT_EQ(donor.tokens(), again.tokens());
}

TEST_P(PrefixSharing, NothingToBorrowLeavesTheSessionAlone) {
    auto m = model(GetParam());
    const auto p1 = chat(*m, "What is the boiling point of water?");
    dfm::GenerateOptions o;
    o.max_tokens = 6;
    dfm::Session donor(m, {.ctx = 512}), b(m, {.ctx = 512});
    (void)dfm::generate(donor, p1, o);
    EXPECT_EQ(b.borrowable(donor, m->tokenize("Something else entirely", false)), 0);
    EXPECT_EQ(b.borrowable(b, p1), 0) << "not from itself";
    (void)dfm::generate(b, p1, o);
    EXPECT_EQ(b.borrowable(donor, p1), 0) << "its own cache gives as much";
    dfm::Session f32(m, {.ctx = 512, .kv_type = dfm::KvType::f32});
    EXPECT_EQ(f32.borrowable(donor, p1), 0) << "another KV type";
    const auto other = model(GetParam() == "q3_4L_kmix" ? "q3_4L_exotic" : "q35_4L_lowmix");
    dfm::Session stranger(other, {.ctx = 512});
    EXPECT_EQ(stranger.borrowable(donor, p1), 0) << "another model";
    const std::vector<int32_t> before = b.tokens();
    EXPECT_EQ(b.borrow(donor, m->tokenize("Something else entirely", false)), 0);
    EXPECT_EQ(b.tokens(), before);
}

}  // namespace
