// JSON mode's syntax check: every valid document is accepted whatever its byte splits and ends
// complete; invalid ones are refused at the byte that breaks them; the top level is an object.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/json_prefix.h"

namespace {

using diskformer::JsonPrefix;

// The length of the longest prefix of s that JsonPrefix accepts.
size_t accepted(const std::string& s) {
    JsonPrefix j;
    for (size_t i = 0; i < s.size(); ++i)
        if (!j.allows(s.substr(i, 1)) || !j.feed(s.substr(i, 1))) return i;
    return s.size();
}

TEST(JsonPrefix, ValidDocumentsInAnySplitEndComplete) {
    const std::vector<std::string> docs = {
        "{}",
        " \n{ } \t",
        R"({"a": 1, "b": [true, false, null, -0.5e+3, 0, 10.25, 3E-2, {}], "c": {"d": "x\"y\\z\/\u00e9\n"}})",
        R"({"emoji": "héllo 🙂", "nested": [[[[]]], [{"k": [1, 2, {"q": []}]}]], "num": -0})",
        "{\"k\":\"\xe4\xbd\xa0\xe5\xa5\xbd\"}",
    };
    for (const auto& d : docs) {
        SCOPED_TRACE(d);
        for (size_t step : {1, 2, 3, 5, 1000}) {
            JsonPrefix j;
            for (size_t i = 0; i < d.size(); i += step) {
                ASSERT_TRUE(j.allows(d.substr(i, step))) << "at " << i;
                ASSERT_TRUE(j.feed(d.substr(i, step))) << "at " << i;
            }
            EXPECT_TRUE(j.complete());
        }
        JsonPrefix j;
        j.feed(d);
        EXPECT_FALSE(j.allows("x")) << "nothing but whitespace after the object";
        EXPECT_TRUE(j.allows(" \n"));
    }
    JsonPrefix open;
    ASSERT_TRUE(open.feed(R"({"a": [1, "unfinished)"));
    EXPECT_FALSE(open.complete());
}

TEST(JsonPrefix, RefusesTheByteThatBreaksTheSyntax) {
    struct Case {
        std::string text;
        size_t at;  // the first refused byte
    };
    const std::vector<Case> cases = {
        {"[1]", 0},              // the top level is an object
        {"\"s\"", 0},
        {"x{}", 0},
        {"{a: 1}", 1},           // keys are strings
        {"{\"a\" 1}", 5},        // the colon
        {"{\"a\": 01}", 7},      // no leading zeros
        {"{\"a\": 1.}", 8},      // a digit after the dot
        {"{\"a\": -}", 7},
        {"{\"a\": 1e}", 8},
        {"{\"a\": tru}", 9},
        {"{\"a\": trux}", 9},
        {"{\"a\": 1,}", 8},      // no trailing comma
        {"{\"a\": [1,]}", 9},
        {"{\"a\": [1 2]}", 9},
        {"{\"a\": \"\\x\"}", 8},  // no such escape
        {"{\"a\": \"\\u12g4\"}", 11},
        {"{\"a\": \"tab\there\"}", 10},  // control characters must be escaped
        {"{\"a\": 1}}", 8},
        {"{\"a\": 1]", 7},
        {"{\"a\": {\"b\": 2]}", 13},
    };
    for (const auto& c : cases) EXPECT_EQ(accepted(c.text), c.at) << c.text;
    // Strings hold valid UTF-8 only (a character may arrive in pieces).
    EXPECT_EQ(accepted("{\"a\": \"\xe4\xbd\xa0\"}"), 12u);
    EXPECT_EQ(accepted("{\"a\": \"\xe4\"}"), 8u);      // a lead byte, then no continuation
    EXPECT_EQ(accepted("{\"a\": \"\xbd\"}"), 7u);      // a stray continuation byte
    EXPECT_EQ(accepted("{\"a\": \"\xc0\xaf\"}"), 7u);  // an overlong form
    EXPECT_EQ(accepted("{\"a\": \"\xed\xa0\x80\"}"), 8u);  // a surrogate
    // Whitespace runs are bounded outside strings, not inside them.
    const std::string blanks(JsonPrefix::kMaxWhitespace, ' ');
    EXPECT_EQ(accepted(blanks + " {}"), blanks.size());
    EXPECT_EQ(accepted("{\"a\":" + blanks + "1" + blanks + "}" + blanks), 4 + 3 * blanks.size() + 3);
    EXPECT_EQ(accepted("{\"a\": \"" + blanks + blanks + "\"}"), 7 + 2 * blanks.size() + 2);
    // Nesting has a bound.
    std::string deep = "{\"a\": ";
    for (size_t i = 0; i < JsonPrefix::kMaxDepth; ++i) deep += "[";
    EXPECT_EQ(accepted(deep), deep.size() - 1);
}

}  // namespace
