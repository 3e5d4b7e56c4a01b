// JSON mode's syntax check: every valid document is accepted whatever its byte splits and ends
// complete; invalid ones are refused at the byte that breaks them; the top level is an object.
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

#include "common/golden.h"
#include "diskformer/diskformer.h"
#include "runtime/json_prefix.h"
#include "runtime/json_regex.h"
#include "runtime/json_schema.h"
#include "gguf/gguf.h"
#include "runtime/json_tokens.h"
#include "runtime/token_trie.h"

namespace {

using diskformer::JsonPrefix;
using diskformer::JsonSchema;

// The length of the longest prefix of s that JsonPrefix accepts.
size_t accepted(const std::string& s, const JsonSchema* schema = nullptr) {
    JsonPrefix j(schema);
    for (size_t i = 0; i < s.size(); ++i)
        if (!j.allows(s.substr(i, 1)) || !j.feed(s.substr(i, 1))) return i;
    return s.size();
}

// c with a '|' where the schema refuses the next byte: accepted up to there.
void expect_refused_at_bar(const std::string& c, const JsonSchema& schema) {
    const size_t at = c.find('|');
    std::string text = c;
    text.erase(at, 1);
    EXPECT_EQ(accepted(text, &schema), at) << c;
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
    // UTF-16 escapes pair: a high surrogate then a low one, never either alone.
    const std::string pairs = R"({"a": "\ud83d\ude00 \uD7FF\uE000"})";
    EXPECT_EQ(accepted(pairs), pairs.size());
    EXPECT_EQ(accepted(R"({"a": "\ud83d"})"), 13u);         // the closing quote after a high half
    EXPECT_EQ(accepted(R"({"a": "\ud83dx"})"), 13u);
    EXPECT_EQ(accepted(R"({"a": "\ud83d\n"})"), 14u);       // an escape, but not \u
    EXPECT_EQ(accepted(R"({"a": "\ud83d\u0041"})"), 15u);   // not a low half
    EXPECT_EQ(accepted(R"({"a": "\ude00"})"), 10u);          // a low half alone
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

// A schema's constraints, each refused at the byte that breaks it: required properties in their
// declared order (optional ones may be skipped), no other keys, types, integers, string enums
// (escapes included), item counts, nullable types.
TEST(JsonSchema, RefusesWhatTheSchemaForbidsAtItsFirstByte) {
    const JsonSchema schema = JsonSchema::compile(R"({
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "who"},
            "age": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b\"c"]}, "minItems": 1, "maxItems": 2},
            "nick": {"type": ["string", "null"]},
            "ok": {"type": "boolean"},
            "score": {"type": "number"}
        },
        "required": ["name", "age", "tags", "ok"],
        "additionalProperties": false
    })");
    const std::vector<std::string> valid = {
        R"({"name": "Ann", "age": 30, "tags": ["a"], "ok": true})",
        R"({"name":"B","age":-1,"tags":["a","b\"c"],"nick":null,"ok":false,"score":-2.5e3})",
        R"({"name": "C", "age": 0, "tags": ["b\"c", "a"], "nick": "cc", "ok": true, "score": 7})",
    };
    for (const auto& v : valid) {
        EXPECT_EQ(accepted(v, &schema), v.size()) << v;
        JsonPrefix j(&schema);
        j.feed(v);
        EXPECT_TRUE(j.complete()) << v;
    }
    struct Case {
        std::string text;
        size_t at;
    };
    const std::vector<Case> cases = {
        {R"({"age": 30})", 2},                                  // name comes first
        {R"({"name": 5})", 9},                                  // a string
        {R"({"name": "x", "age": 3.5})", 22},                   // an integer
        {R"({"name": "x", "age": 3e2})", 22},
        {R"({"name": "x", "age": 3, "tags": []})", 33},         // minItems
        {R"({"name": "x", "age": 3, "tags": ["a", "a", "a"]})", 41},  // maxItems
        {R"({"name": "x", "age": 3, "tags": ["c"]})", 34},      // the enum
        {R"({"name": "x", "age": 3, "tags": ["ab"]})", 35},
        {R"({"name": "x", "age": 3, "tags": ["b\c"]})", 36},   // the escape must be \"
        {R"({"name": "x", "age": 3, "tags": ["a"]})", 37},      // ok is required
        {R"({"name": "x", "extra": 1})", 15},                    // no other keys
        {R"({"name": "x", "age": 3, "tags": ["a"], "ok": true, "score": 1, "more": 1})", 61},  // nothing after the last
        {R"({"name": "x", "age": 3, "tags": ["a"], "ok": true, "nick": null})", 52},  // declared order
        {R"({"name": "x", "age": 3, "tags": ["a"], "nick": 1})", 47},  // string or null
    };
    for (const auto& c : cases) EXPECT_EQ(accepted(c.text, &schema), c.at) << c.text;

    // Keys of any name with typed values, nested objects and arrays of any items.
    const JsonSchema free = JsonSchema::compile(R"({"additionalProperties": {"type": "integer"}})");
    EXPECT_EQ(accepted(R"({"a": 1, "b": -20})", &free), 18u);
    EXPECT_EQ(accepted(R"({"a": "x"})", &free), 6u);
    const JsonSchema any = JsonSchema::compile(R"({"type": "object", "properties": {"x": {"type": "array"}, "y": {}}})");
    EXPECT_EQ(accepted(R"({"x": [1, "s", {"k": [null]}], "y": {"z": true}})", &any), 48u);
}

// What pydantic and OpenAI's strict mode send: $defs with $ref (a recursive model included),
// Optional fields as anyOf with null, enums of numbers / booleans / null, string lengths, allOf
// of one schema, nullable. Each invalid case marks with '|' the byte that must be refused.
TEST(JsonSchema, RefsBranchesEnumsOfAnyValueAndLengths) {
    const JsonSchema schema = JsonSchema::compile(R"({
        "$defs": {
            "Color": {"enum": ["red", "green"], "title": "Color", "type": "string"},
            "Node": {"type": "object", "title": "Node",
                     "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 3},
                                    "child": {"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}], "default": null}},
                     "required": ["name", "child"], "additionalProperties": false}
        },
        "type": "object",
        "properties": {
            "color": {"$ref": "#/$defs/Color", "description": "a colour"},
            "level": {"enum": [1, 2, 10, 2.5, true, null]},
            "tree": {"$ref": "#/$defs/Node"},
            "maybe": {"anyOf": [{"type": "integer"}, {"type": "string", "enum": ["x", "y\"z"]}, {"type": "null"}]},
            "nested": {"allOf": [{"$ref": "#/$defs/Color"}]},
            "opt": {"type": "string", "nullable": true, "maxLength": 2}
        },
        "required": ["color", "level", "tree", "maybe", "nested", "opt"],
        "additionalProperties": false
    })");
    const std::string tail = R"("maybe": -3, "nested": "green", "opt": null})";
    const std::vector<std::string> valid = {
        R"({"color": "red", "level": 10, "tree": {"name": "a", "child": {"name": "bcd", "child": null}}, )" + tail,
        R"({"color":"green","level":2.5,"tree":{"name":"\"\u00e9x","child":null},"maybe":"y\"z","nested":"red","opt":"s"})",
        R"({"color": "red", "level": true, "tree": {"name": "é", "child": null}, "maybe": null, "nested": "red", "opt": "ab"})",
        R"({"color": "red", "level": null, "tree": {"name": "x", "child": null}, )" + tail,
        R"({"color": "red", "level": 1, "tree": {"name": "x", "child": null}, )" + tail,
        R"({"color": "red", "level": 2 , "tree": {"name": "x", "child": null}, )" + tail,
    };
    for (const auto& v : valid) {
        EXPECT_EQ(accepted(v, &schema), v.size()) << v;
        JsonPrefix j(&schema);
        j.feed(v);
        EXPECT_TRUE(j.complete()) << v;
    }
    const std::string tree = R"("tree": {"name": "x", "child": null}, )";
    const std::vector<std::string> invalid = {
        R"({"color": "|blue")",
        R"({"color": "re|e")",
        R"({"color": "red", "level": |3)",
        R"({"color": "red", "level": 2|5)",
        R"({"color": "red", "level": 10|0)",
        R"({"color": "red", "level": 2.|0)",
        R"({"color": "red", "level": |false)",
        R"({"color": "red", "level": nul|)",  // incomplete is fine: nothing refused yet
        R"({"color": "red", "level": 1, "tree": {"name": "|", )",
        R"({"color": "red", "level": 1, "tree": {"name": "abc|d")",
        R"({"color": "red", "level": 1, "tree": {"name": "a", "child": |5)",
        R"({"color": "red", "level": 1, "tree": {"name": "a", "child": {"name": "a", "child": {"name": "|")",
        R"({"color": "red", "level": 1, )" + tree + R"("maybe": "|q")",
        R"({"color": "red", "level": 1, )" + tree + R"("maybe": 1|.5)",
        R"({"color": "red", "level": 1, )" + tree + R"("maybe": |true)",
        R"({"color": "red", "level": 1, )" + tree + R"("maybe": 1, "nested": "|blue")",
        R"({"color": "red", "level": 1, )" + tree + R"("maybe": 1, "nested": "red", "opt": |3)",
        R"({"color": "red", "level": 1, )" + tree + R"("maybe": 1, "nested": "red", "opt": "ab|c")",
    };
    for (const auto& c : invalid) {
        expect_refused_at_bar(c, schema);
    }
    // A recursive array schema through "#" (the whole document).
    const JsonSchema list = JsonSchema::compile(R"({"type": "object", "properties": {"v": {"type": "integer"},
        "next": {"type": "array", "items": {"$ref": "#"}, "maxItems": 1}}, "required": ["v"]})");
    const std::string chain = R"({"v": 1, "next": [{"v": 2, "next": [{"v": 3}]}]})";
    EXPECT_EQ(accepted(chain, &list), chain.size());
    EXPECT_EQ(accepted(R"({"v": 1, "next": [{"v": 2}, )", &list), 26u);  // maxItems 1 at every level
}

// Integer bounds: a digit is refused as soon as no integer that starts with the digits so far
// lies within them; the end of the number when its value does not.
TEST(JsonSchema, IntegerBoundsRefuseTheFirstDigitThatCannotMeetThem) {
    const JsonSchema schema = JsonSchema::compile(R"({"type": "object", "properties": {
        "age": {"type": "integer", "minimum": 18, "maximum": 120},
        "delta": {"type": "integer", "exclusiveMinimum": -5, "exclusiveMaximum": 5},
        "big": {"type": "integer", "minimum": 1000},
        "neg": {"minimum": -2.5, "maximum": -1.5}}, "required": ["age", "delta", "big", "neg"]})");
    for (const std::string& v : std::vector<std::string>{R"({"age": 18, "delta": -4, "big": 1000, "neg": -2})", R"({"age":120,"delta":4,"big":99999,"neg":-2})",
                                R"({"age": 45, "delta": -0, "big": 123456789012345678, "neg": -2})"}) {
        EXPECT_EQ(accepted(v, &schema), v.size()) << v;
        JsonPrefix j(&schema);
        j.feed(v);
        EXPECT_TRUE(j.complete()) << v;
    }
    const std::string pre = R"({"age": 18, "delta": 0, )";
    for (const std::string& c : std::vector<std::string>{R"({"age": 1|7)", R"({"age": 12|1)", R"({"age": 1|,)", R"({"age": |-1)", R"({"age": |0)", R"({"age": 18|.5)",
                                R"({"age": 18|e1)", R"({"age": 18, "delta": -|5)", R"({"age": 18, "delta": |5)", R"({"age": 18, "delta": 4|0)",
                                pre + R"("big": 999|,)", pre + R"("big": |-1)", pre + R"("big": 123456789012345678|9)",
                                pre + R"("big": 1000, "neg": |1)", pre + R"("big": 1000, "neg": -|3)", pre + R"("big": 1000, "neg": -2|0)"}) {
        expect_refused_at_bar(c, schema);
    }
    for (const char* bad : {R"({"type": "object", "properties": {"x": {"type": "integer", "minimum": 3, "maximum": 2}}})",
                            R"({"type": "object", "properties": {"x": {"type": "integer", "exclusiveMinimum": 1, "exclusiveMaximum": 2}}})",
                            R"({"type": "object", "properties": {"x": {"type": "integer", "minimum": "1"}}})"}) {
        EXPECT_THROW(JsonSchema::compile(bad), diskformer::Error) << bad;
    }
}

// Number bounds (fractions allowed): a byte is refused as soon as no number that the text so far
// can become lies within them (compared exactly with the bounds' doubles); exponents are not
// written; the end of the number when its value does not meet them.
TEST(JsonSchema, NumberBoundsRefuseTheFirstByteThatCannotMeetThem) {
    const JsonSchema schema = JsonSchema::compile(R"({"type": "object", "properties": {
        "p": {"type": "number", "minimum": 0, "maximum": 1},
        "t": {"type": "number", "exclusiveMinimum": -0.5, "exclusiveMaximum": 0.25},
        "big": {"type": "number", "minimum": 99.5},
        "neg": {"type": "number", "maximum": -0.001},
        "tenth": {"type": ["number", "null"], "maximum": 0.1, "minimum": 0.1}},
        "required": ["p", "t", "big", "neg", "tenth"]})");
    for (const std::string& v : std::vector<std::string>{
             R"({"p": 0, "t": 0.2, "big": 99.5, "neg": -0.001, "tenth": 0.1})",
             R"({"p":1,"t":-0.49,"big":100,"neg":-5,"tenth":null})",
             R"({"p": 0.999, "t": 0.2499, "big": 12345.678, "neg": -0.0011, "tenth": 0.1000000000000000055})",
             R"({"p": 1.000, "t": -0, "big": 99.50001, "neg": -0.00100, "tenth": 0.10})",
             R"({"p": -0, "t": 0.0, "big": 123456789012345678, "neg": -1000.5, "tenth": 0.100})"}) {
        EXPECT_EQ(accepted(v, &schema), v.size()) << v;
        JsonPrefix j(&schema);
        j.feed(v);
        EXPECT_TRUE(j.complete()) << v;
    }
    const std::string pre = R"({"p": 0.5, "t": 0, )";
    for (const std::string& c : std::vector<std::string>{
             R"({"p": 1.|1)", R"({"p": |2)", R"({"p": -|1)", R"({"p": 0.5|e)", R"({"p": 0.5|E2)", R"({"p": 1|0)", R"({"p": 0|1)",
             R"({"p": 0.|.)", R"({"p": -|.)", R"({"p": 0.5, "t": 0.2|5)", R"({"p": 0.5, "t": -0.|5)", R"({"p": 0.5, "t": 0.|3)",
             pre + R"("big": 99.|4)", pre + R"("big": 99|,)", pre + R"("big": 1|,)", pre + R"("big": |-)",
             pre + R"("big": 100, "neg": |0)", pre + R"("big": 100, "neg": -0.00|09)", pre + R"("big": 100, "neg": |1)",
             pre + R"("big": 100, "neg": -0.001, "tenth": 0.1000000000000000|1)", pre + R"("big": 100, "neg": -0.001, "tenth": |1)",
             pre + R"("big": 100, "neg": -0.001, "tenth": 0.|0)", pre + R"("big": 100, "neg": -0.001, "tenth": 0.1000000000000000055|6)"}) {
        expect_refused_at_bar(c, schema);
    }
    // "tenth" lies within 0.1 and 0.1 as doubles (0.1000000000000000055511...): the decimal 0.1
    // rounds to it, 0.10000000000000001 would too but lies above it (refused: the check is exact).
    for (const char* bad : {R"({"type": "object", "properties": {"x": {"type": "number", "minimum": 2, "maximum": 1}}})",
                            R"({"type": "object", "properties": {"x": {"type": "number", "exclusiveMinimum": 1, "maximum": 1}}})",
                            R"({"type": "object", "properties": {"x": {"type": "number", "minimum": 1, "exclusiveMaximum": 1}}})",
                            R"({"type": "object", "properties": {"x": {"type": "number", "maximum": "1"}}})"}) {
        EXPECT_THROW(JsonSchema::compile(bad), diskformer::Error) << bad;
    }
}

// The pattern NFA against std::regex (ECMAScript, regex_search: unanchored like JSON Schema)
// on every string of a small alphabet up to length 5, for patterns using every construct.
TEST(JsonRegex, MatchesWhatEcmaScriptRegexSearchMatches) {
    const std::vector<std::string> patterns = {
        "a", "^a", "a$", "^a$", "^$", "", "ab|ba", "^(ab|b)*$", "^a+b?$", "^a{2}$", "^a{2,}$", "^a{1,3}b$",
        "^[ab]{2,3}$", "^[^a]+$", "^.b", "c.", "^\\d+$", "^\\D", "\\w\\W", "\\s", "^\\S*$", "^(?:a|bc)+$",
        "^a*?b+?$", "[a-c]{3}", "^[\\d-]+$", "^-?\\d{1,2}(\\.\\d)?$", "^a{0,0}b$", "^\\$",
        "^\\.a", "[.]", "^[\\]a]+$", "^(a|)b$", "^((a|b)c)*$", "^\\x61", "^\\u0062+$", "a{1}b{0,}c?", "[-a]", "^[^]$", "^a|b", "a|b$", "^a$|^b$", "^a|b$|c", "a$|^b|^$"};
    const std::string alphabet = "ab1 .-c$\n";
    std::vector<std::string> texts{""};
    for (size_t len = 1, from = 0; len <= 4; ++len) {
        const size_t to = texts.size();
        for (size_t i = from; i < to; ++i)
            for (char c : alphabet) texts.push_back(texts[i] + c);
        from = to;
    }
    for (const auto& p : patterns) {
        SCOPED_TRACE(p);
        const auto re = diskformer::JsonRegex::compile(p);
        const std::regex oracle(p, std::regex::ECMAScript);
        for (const auto& t : texts) ASSERT_EQ(re.matches(t), std::regex_search(t, oracle)) << '"' << t << '"';
    }
}

TEST(JsonRegex, CodePointsBeyondAscii) {
    using diskformer::JsonRegex;
    const auto greek = JsonRegex::compile("^[α-ω]+$");
    EXPECT_TRUE(greek.matches("αβγω"));
    EXPECT_FALSE(greek.matches("αβa"));
    EXPECT_FALSE(greek.matches(""));
    const auto emoji = JsonRegex::compile("^\\uD83D\\uDE00.$");  // a pair written as escapes is one code point
    EXPECT_TRUE(emoji.matches("😀x"));
    EXPECT_TRUE(emoji.matches("😀😀"));  // '.' is one code point, not one UTF-16 unit
    EXPECT_FALSE(emoji.matches("😁x"));
    EXPECT_TRUE(JsonRegex::compile("^\\s$").matches("\u3000"));
    EXPECT_TRUE(JsonRegex::compile("^x{,2}$").matches("x{,2}")) << "not a quantifier: a literal '{' (Annex B)";
    EXPECT_TRUE(JsonRegex::compile("^(?<year>\\d{4})-(?:\\d\\d)$").matches("2026-12"));  // a named group
    EXPECT_FALSE(JsonRegex::compile("^.$").matches("\u2028"));
    const std::string deep(100000, '(');  // groups past the parser's depth
    for (const char* bad : {"(a)\\1", "a(?=b)", "a(?!b)", "(?<=a)b", "(?<!a)b", "\\bword", "\\p{L}", "a^b", "a$b", "*a",
                            "a**", "(ab", "ab)", "[ab", "(^a)", "(a$)", "a$b|c", "a|b^", "a{3,1}", "a{1001}", "\\", "\\q", "[z-a]", "\\cA", "(a{100}){100}",
                            "[]", "^[^\\s\\S]$", deep.c_str()}) {
        EXPECT_THROW(JsonRegex::compile(bad), diskformer::Error) << bad;
    }
}

// A string with a pattern is refused at its first byte that no matching string continues, in
// plain characters, UTF-8 and escapes alike; keys and other strings are left alone.
TEST(JsonSchema, PatternsRefuseTheFirstByteThatCannotMatch) {
    const JsonSchema schema = JsonSchema::compile(R"({"type": "object", "properties": {
        "id": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$"},
        "word": {"type": "string", "pattern": "cat"},
        "greek": {"pattern": "^[α-ω]{1,3}$"},
        "wide": {"type": "string", "pattern": "^[\u0100-\u0200]$"},
        "smile": {"type": "string", "pattern": "^\\uD83D\\uDE00$", "maxLength": 1},
        "any": {"type": "string"}}})");
    for (const std::string& v : std::vector<std::string>{
             R"({"id": "AB-123"})", R"({"id": "\u0041B-12\u0033"})", R"({"word": "a cat!"})", R"({"word": "cat"})",
             R"({"greek": "αβγ"})", R"({"greek": "\u03b1"})", R"({"wide": "Ā"})", R"({"smile": "😀"})",
             R"({"smile": "\ud83d\ude00"})", R"({"any": "AB-123 or anything"})", R"({"id": "ZZ-000", "word": "cats"})"}) {
        EXPECT_EQ(accepted(v, &schema), v.size()) << v;
        JsonPrefix j(&schema);
        j.feed(v);
        EXPECT_TRUE(j.complete()) << v;
    }
    for (const std::string& c : std::vector<std::string>{
             R"({"id": "A|b)", R"({"id": "AB|1)", R"({"id": "AB-12|")", R"({"id": "AB-123|4)", R"({"id": "\u00|61)",
             R"({"word": "ca|")", R"({"id": "A\|n)", R"({"greek": "|a)", R"({"greek": "αβγ|δ)", R"({"greek": "|")",
             "{\"wide\": \"|\xE0", "{\"wide\": \"\xC4\x80|\xC4", R"({"smile": "\ud83d\ude0|1)", R"({"smile": "\u|0)",
             "{\"smile\": \"\xF0\x9F\x98|\x81"}) {
        expect_refused_at_bar(c, schema);
    }
    // An enum value that does not match its pattern is a schema error, not a dead end.
    EXPECT_THROW(JsonSchema::compile(R"({"type": "object", "properties": {"a": {"enum": ["x", "yy"], "pattern": "^.$"}}})"),
                 diskformer::Error);
    EXPECT_NO_THROW(JsonSchema::compile(R"({"type": "object", "properties": {"a": {"enum": ["x", "y"], "pattern": "^.$"}}})"));
}

// A pattern beside minLength / maxLength: a character is refused once no matching string
// within the bounds continues the text (not only once the pattern or the length alone fails),
// so JSON mode never writes itself into a string it cannot close; a pattern no string within
// the bounds matches is a schema error.
TEST(JsonSchema, PatternsWithLengthBoundsNeverDeadEnd) {
    const JsonSchema schema = JsonSchema::compile(R"({"type": "object", "properties": {
        "pairs": {"type": "string", "pattern": "^(ab)+$", "maxLength": 3},
        "tail": {"type": "string", "pattern": "^[a-z]+-x$", "maxLength": 4},
        "long": {"type": "string", "pattern": "^(a|bbbb)$", "minLength": 2}}})");
    for (const std::string& v : std::vector<std::string>{R"({"pairs": "ab"})", R"({"tail": "ab-x"})", R"({"tail": "a-x"})",
                                                         R"({"long": "bbbb"})", R"({"tail": "a\u0062-x"})"}) {
        EXPECT_EQ(accepted(v, &schema), v.size()) << v;
    }
    for (const std::string& c : std::vector<std::string>{R"({"pairs": "ab|a)", R"({"tail": "ab|c)", R"({"tail": "ab\u00|6)",
                                                         R"({"long": "|a)", R"({"long": "bbbb|b)"}) {
        expect_refused_at_bar(c, schema);
    }
    for (const char* bad : {R"({"type": "string", "pattern": "^x{1,2}$", "minLength": 3})",
                            R"({"type": "string", "pattern": "^abc$", "maxLength": 2})",
                            R"({"type": "string", "pattern": "^(ab)+$", "maxLength": 1})"}) {
        EXPECT_THROW(JsonSchema::compile(std::string(R"({"type": "object", "properties": {"a": )") + bad + "}}"),
                     diskformer::Error)
            << bad;
    }
    EXPECT_NO_THROW(JsonSchema::compile(R"({"type": "object", "properties": {"a": {"pattern": "^x+$", "minLength": 9}}})"));
    try {
        (void)JsonSchema::compile(R"({"type": "object", "properties": {"a": {"type": "string", "pattern": "^x{1,2}$", "minLength": 3}}})");
        ADD_FAILURE() << "a pattern no string of 3 or more characters matches compiled";
    } catch (const diskformer::Error& e) {
        EXPECT_NE(std::string(e.what()).find("/properties/a/pattern: no string of at least 3 characters matches it"), std::string::npos) << e.what();
    }
}

// Formats JSON mode knows are enforced as their syntax (pydantic writes "format": "date-time"
// for a datetime); a pattern beside one wins; unknown formats stay annotations.
TEST(JsonSchema, KnownFormatsAreEnforced) {
    const JsonSchema schema = JsonSchema::compile(R"({"type": "object", "properties": {
        "d": {"type": "string", "format": "date"}, "t": {"type": "string", "format": "time"},
        "dt": {"type": "string", "format": "date-time"}, "u": {"type": "string", "format": "uuid"},
        "ip": {"type": "string", "format": "ipv4"}, "e": {"type": "string", "format": "email"},
        "any": {"format": "date"}, "own": {"type": "string", "format": "date", "pattern": "^x$"},
        "uri": {"type": "string", "format": "uri"}}})");
    for (const std::string& v : std::vector<std::string>{
             R"({"d": "2026-12-05"})", R"({"t": "23:59:60.5+01:00"})", R"({"t": "00:00:00Z"})",
             R"({"dt": "2026-12-05T10:41:05.123Z"})", R"({"dt": "1999-01-31t00:00:00-12:30"})",
             R"({"u": "123e4567-E89B-12d3-a456-426614174000"})", R"({"ip": "192.168.0.255"})", R"({"ip": "0.0.0.0"})",
             R"({"e": "a.b+c@example.co.uk"})", R"({"any": 5})", R"({"any": "2000-02-29"})", R"({"own": "x"})",
             R"({"uri": "not checked"})"}) {
        EXPECT_EQ(accepted(v, &schema), v.size()) << v;
    }
    for (const std::string& c : std::vector<std::string>{
             R"({"d": "2026-1|3)", R"({"d": "2026-12-3|2)", R"({"d": "26|-)", R"({"t": "2|4:)", R"({"t": "12:00:00|")",
             R"({"t": "12:00:00+2|5)", R"({"dt": "2026-12-05| )", R"({"dt": "2026-12-05T10:41|")", R"({"u": "123e4567-|)",
             R"({"u": "123e456|g)", R"({"ip": "25|6)", R"({"ip": "1.2.3|")", R"({"ip": "0|1)", R"({"e": "|@)", R"({"e": "a@b|")",
             R"({"any": "2000-1|3)", R"({"own": "|2)"}) {
        expect_refused_at_bar(c, schema);
    }
}

TEST(JsonSchema, RefusesWhatItCannotEnforce) {
    for (const char* bad : {R"j({"type": "object", "properties": {"a": {"type": "string", "pattern": "^x(?=y)"}}})j",
                            R"({"type": "object", "properties": {"a": {"enum": [[1], 2]}}})",
                            R"({"type": "object", "properties": {"a": {"type": "integer", "enum": [1, 2.5]}}})",
                            R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})",
                            R"({"type": "object", "properties": {"a": {}}, "additionalProperties": true})",
                            R"({"type": "string"})",
                            R"({"type": "object", "properties": {"a": {"type": "decimal"}}})",
                            R"({"type": "object", "properties": {"a": {"type": "string", "minLength": 3, "maxLength": 2}}})",
                            R"({"$ref": "#/$defs/x"})",
                            R"({"$ref": "#"})",
                            R"({"$ref": "https://example.com/schema.json"})",
                            R"({"$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A"}}, "type": "object",
                                "properties": {"a": {"$ref": "#/$defs/A"}}})",
                            R"({"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}, {"enum": ["x"]}]}}})",
                            R"({"type": "object", "properties": {"a": {"anyOf": [{"type": "integer"}, {"type": "number"}]}}})",
                            R"({"type": "object", "properties": {"a": {"allOf": [{"type": "string"}, {"maxLength": 2}]}}})",
                            R"({"type": "object", "properties": {"a": {"$ref": "#/$defs/A", "type": "string"}},
                                "$defs": {"A": {"type": "string"}}})",
                            R"(not json)"}) {
        EXPECT_THROW(JsonSchema::compile(bad), diskformer::Error) << bad;
    }
    // Nesting past the compiler's depth (a request must not exhaust the stack).
    std::string deep = "{\"type\": \"object\", \"properties\": {\"a\": ";
    for (int i = 0; i < 100000; ++i) deep += "{\"items\": ";
    deep += "{}";
    for (int i = 0; i < 100000; ++i) deep += "}";
    deep += "}}";
    EXPECT_THROW(JsonSchema::compile(deep), diskformer::Error);
    const auto message = [](const char* schema) {
        try {
            JsonSchema::compile(schema);
        } catch (const diskformer::Error& e) {
            return std::string(e.what());
        }
        return std::string("(accepted)");
    };
    const std::string pattern = message(R"j({"type": "object", "properties": {"a": {"type": "string", "pattern": "^x(?=y)"}}})j");
    EXPECT_NE(pattern.find("/properties/a/pattern"), std::string::npos) << pattern;
    EXPECT_NE(pattern.find("lookahead and lookbehind are not supported"), std::string::npos) << pattern;
    const std::string overlap = message(R"({"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}, {"enum": ["x"]}]}}})");
    EXPECT_NE(overlap.find("the same type"), std::string::npos) << overlap;
    const std::string beside = message(R"({"type": "object", "properties": {"a": {"$ref": "#/$defs/A", "type": "string"}},
                                          "$defs": {"A": {"type": "string"}}})");
    EXPECT_NE(beside.find("\"type\" beside \"$ref\""), std::string::npos) << beside;
}

// The whole answer around the object: the literals exactly, special tokens only in them, then
// nothing but an end.
TEST(JsonAnswer, LiteralsAroundTheObject) {
    diskformer::JsonAnswer a(nullptr, "<tool_call>\n", "\n</tool_call>");
    EXPECT_FALSE(a.allows("{", false)) << "the literal first";
    EXPECT_TRUE(a.allows("<tool_call>", true)) << "a special token may spell the literal";
    a.feed("<tool_call>");
    EXPECT_FALSE(a.allows(" x", false));
    a.feed("\n");
    EXPECT_TRUE(a.allows("{\"a\": \"", false));
    EXPECT_FALSE(a.allows("{\"a\": \"<tool_call>", true)) << "not inside the object";
    EXPECT_TRUE(a.allows("{\"a\": \"<tool_call>", false)) << "the same text as plain bytes is a string";
    a.feed("{\"a\": 1}");
    EXPECT_FALSE(a.complete()) << "the closing literal is due";
    EXPECT_FALSE(a.allows(" ", false));
    EXPECT_TRUE(a.allows("\n</tool_call>", false));
    a.feed("\n</tool_call>");
    EXPECT_TRUE(a.complete());
    EXPECT_FALSE(a.allows("\n", false));

    diskformer::JsonAnswer plain(nullptr, "", "");
    plain.feed(" {}");
    EXPECT_TRUE(plain.complete());
}

// A schema's frames past the ones JsonPrefix keeps in the object (Frames): 40 arrays deep and
// back, every level's item count kept, in the state and in a copy of it.
TEST(JsonPrefix, DeepNestingUnderASchemaKeepsEveryFrame) {
    const JsonSchema s = JsonSchema::compile(R"({"properties": {"a": {"type": "array", "minItems": 2}}})");
    JsonPrefix j(&s);
    ASSERT_TRUE(j.feed("{\"a\": " + std::string(40, '[') + "1" + std::string(39, ']')));
    EXPECT_FALSE(j.allows("]")) << "the outer array has one item of its two";
    JsonPrefix copy = j;
    EXPECT_TRUE(copy.feed(", [[[[[[[[[[[[[[[[[[[[2]]]]]]]]]]]]]]]]]]]]"));
    EXPECT_TRUE(copy.feed("]}"));
    EXPECT_TRUE(copy.complete());
    EXPECT_FALSE(j.complete());
    EXPECT_TRUE(j.feed(", 3]}"));
    EXPECT_TRUE(j.complete());
}

// JSON mode's mask over the vocabulary (a trie walk) refuses exactly the tokens allows()
// refuses one by one, on Qwen3.5's whole vocabulary: JSON states at a key, inside a string, at
// a number, after the object, in and around the literals, with and without a schema.
TEST(JsonTokens, TheMaskIsWhatAskingEachTokenGives) {
    const auto file = df::gguf::File::open((df::test::golden_dir() / "tokenizer" / "ggml-vocab-qwen35.gguf").string());
    const auto tokenizer = df::tokenizer::Tokenizer::from_gguf(*file);
    const auto& tok = *tokenizer;
    ASSERT_GT(tok.vocab_size(), 150000u);
    const diskformer::TokenTrie trie(tok);
    const JsonSchema schema = JsonSchema::compile(R"({"properties": {"colour": {"enum": ["red", "green"]}, "n": {"type": "integer"}}})");
    const JsonSchema lengths = JsonSchema::compile(R"({"properties": {"s": {"type": "string", "minLength": 3}, "m": {"type": "string", "maxLength": 4}}})");
    struct State {
        const JsonSchema* schema;
        const char* before;
        const char* text;  // fed as its tokens
    };
    for (const State st : {State{nullptr, "", ""}, State{nullptr, "", "{\"a"}, State{nullptr, "", "{\"a\": 1"},
                           State{nullptr, "", "{}"}, State{&schema, "", "{"}, State{&schema, "", "{\"colour\": \"gr"},
                           State{&schema, "<tool_call>\n", ""}, State{nullptr, "<tool_call>\n", "<tool_call>\n{}"},
                           // inside strings: free ones (TokenTrie's plain nodes) and bounded ones
                           State{nullptr, "", "{\"a\": \"hello wor"}, State{nullptr, "<tool_call>\n", "<tool_call>\n{\"k\": [\"x"},
                           State{&lengths, "", "{\"s\": \"a"}, State{&lengths, "", "{\"s\": \"abcd"}, State{&lengths, "", "{\"m\": \"ab"}}) {
        SCOPED_TRACE(std::string(st.before) + " | " + st.text);
        diskformer::JsonTokens jt(tok, trie, st.schema, st.before, *st.before ? "\n</tool_call>" : "");
        for (const int32_t t : tok.encode(st.text, false)) {
            ASSERT_TRUE(jt.allows(t)) << t;
            jt.accept(t);
        }
        std::vector<float> logits(tok.vocab_size(), 0.f);
        jt.mask(logits);
        size_t allowed = 0;
        for (size_t t = 0; t < logits.size(); ++t) {
            const bool want = jt.allows(static_cast<int32_t>(t));
            ASSERT_EQ(logits[t] == 0.f, want) << "token " << t << " '" << tok.piece(static_cast<int32_t>(t)) << "'";
            allowed += want;
        }
        EXPECT_GT(allowed, 0u);
    }
    // The free strings above are the ones whose plain text leaves the state as it is.
    auto free_after = [](const JsonSchema* sc, std::string_view text) {
        JsonPrefix j(sc);
        EXPECT_TRUE(j.feed(text)) << text;
        return j.free_string();
    };
    EXPECT_TRUE(free_after(nullptr, "{\"a\": \"hello wor"));
    EXPECT_TRUE(free_after(nullptr, "{\"a"));
    EXPECT_FALSE(free_after(nullptr, "{\"a\": \"x\\"));
    EXPECT_FALSE(free_after(nullptr, "{\"a\": \"\xC3"));
    EXPECT_FALSE(free_after(&lengths, "{\"s\": \"a"));
    EXPECT_TRUE(free_after(&lengths, "{\"s\": \"abc"));
    EXPECT_FALSE(free_after(&lengths, "{\"m\": \"ab"));
    EXPECT_FALSE(free_after(&schema, "{\"colour\": \"gr"));
}

}  // namespace
