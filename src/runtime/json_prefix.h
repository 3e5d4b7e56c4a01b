// JSON mode: whether generated text can still become one JSON object (RFC 8259 syntax, the
// top-level value an object, whitespace around it), and one that a schema allows when given,
// checked a byte at a time so that the sampler can skip every token that would break it and end
// the answer when the object closes.
#pragma once

#include <array>
#include <climits>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/json_schema.h"

namespace diskformer {

class JsonPrefix {
public:
    // schema: must outlive this (and its copies); nullptr: any object.
    explicit JsonPrefix(const JsonSchema* schema = nullptr);

    // Feeds bytes; false when they cannot continue a valid document (the state is then
    // unspecified: check with allows() first).
    bool feed(std::string_view bytes);
    // Whether the bytes could follow what was fed, without feeding them.
    bool allows(std::string_view bytes) const;
    // The top-level object has closed: nothing but whitespace may follow.
    bool complete() const { return mode_ == Mode::done; }
    // Inside a string that whole plain characters (not '"', '\\' or controls) leave as it is, up
    // to the count of characters, which nothing here bounds: no pattern, key match or maximum
    // length, the minimum met (TokenTrie::walk's `plain`).
    bool free_string() const {
        return mode_ == Mode::string && utf8_left_ == 0 && !need_low_ && !re_ && match_ == Match::none &&
               str_max_ == INT_MAX && chars_ >= str_min_;
    }

    static constexpr size_t kMaxDepth = 128;  // nesting beyond this is refused
    // Whitespace between tokens comes in runs of at most this many bytes (a model that keeps
    // emitting blanks must write JSON instead; llama.cpp's JSON grammar bounds it too).
    static constexpr int kMaxWhitespace = 24;

private:
    enum class Mode : uint8_t {
        start,           // before the top-level '{'
        value,           // a value (after ':' or ',' in an array)
        obj_key_or_end,  // after '{'
        obj_key,         // after ',' in an object
        colon,           // after a key
        obj_next,        // after a value in an object: ',' or '}'
        arr_value_or_end,  // after '['
        arr_next,        // after a value in an array: ',' or ']'
        string,          // inside a string
        escape,          // after '\' in a string
        unicode,         // inside \uXXXX (sub_ hex digits left)
        number,          // inside a number (sub_: which part)
        literal,         // inside true / false / null (lit_ the rest to match)
        choice,          // inside a value an enum / const restricts (cand_: the texts it still matches)
        done,
    };
    bool step(unsigned char c);
    bool string_byte(unsigned char c);  // UTF-8 inside a string
    bool pattern_char(uint32_t cp);     // a string value's pattern (JsonSchema::Node::pattern)
    bool pattern_may(uint32_t lo, uint32_t hi) const;
    bool pattern_may_unit(uint32_t lo, uint32_t hi) const;
    bool begin_value(unsigned char c);
    void end_value();  // a value ended: what the enclosing container expects next
    void close_container();
    // Schema checks (true without a schema).
    bool may_open_key();    // '"' where a key begins: sets the key's candidates
    bool may_close_object() const;
    bool may_add_key() const;  // ',' after a value in an object
    bool match_byte(unsigned char c);  // a declared key's next byte
    bool match_end();                  // its closing quote
    bool choice_byte(unsigned char c);  // the next byte of an enum / const value (or what follows it)
    bool bound_reachable() const;  // a bounded integer: some value within bounds starts so
    bool bound_met() const;        // ... and the digits so far are one
    bool real_reachable() const;   // a bounded number: likewise, for the text so far
    bool real_met() const;

    struct Frame {
        int node;   // the container's schema
        int next;   // object: the next declared property that may come
        int count;  // array: items so far
    };
    enum class Match : uint8_t { none, key };
    // The open containers' frames. JSON mode's mask copies the whole state at every trie node it
    // visits, so the first kInline frames live in the object (a copy allocates nothing) and only
    // deeper ones in a vector.
    class Frames {
    public:
        Frame& back() { return n_ <= kInline ? in_[n_ - 1] : spill_.back(); }
        const Frame& back() const { return n_ <= kInline ? in_[n_ - 1] : spill_.back(); }
        void push_back(const Frame& f) {
            if (n_ < kInline)
                in_[n_] = f;
            else
                spill_.push_back(f);
            ++n_;
        }
        void pop_back() {
            if (n_ > kInline) spill_.pop_back();
            --n_;
        }

    private:
        static constexpr size_t kInline = 8;
        std::array<Frame, kInline> in_{};
        std::vector<Frame> spill_;  // frames kInline, kInline + 1, ...
        size_t n_ = 0;
    };

    Mode mode_ = Mode::start;
    uint8_t sub_ = 0;
    uint8_t utf8_left_ = 0, utf8_lo_ = 0x80, utf8_hi_ = 0xBF;  // continuation bytes due, the next one's range
    uint16_t uni_ = 0;        // the \uXXXX escape's hex digits so far
    bool need_low_ = false;   // a high surrogate was escaped: its low half comes next
    int ws_ = 0;              // whitespace bytes in a row outside strings
    bool key_ = false;        // the string being read is an object key
    const char* lit_ = "";    // literal bytes still to come
    std::string stack_;       // open containers, '{' or '['
    // With a schema: a frame per open container, the schema of the value to come, and the
    // candidates a key or enum string being read still matches (bits of the node's keys / enums).
    const JsonSchema* schema_ = nullptr;
    Frames frames_;
    int value_node_ = 0;
    bool int_only_ = false;
    Match match_ = Match::none;
    uint64_t cand_ = 0;
    uint32_t cand_pos_ = 0;
    int chars_ = 0, str_min_ = 0, str_max_ = INT_MAX;  // the string value's characters so far, its bounds
    // A string value with a pattern: the regex, the states its text may be in, the character
    // being read (UTF-8 bits so far), an escaped high surrogate waiting for its low half.
    const JsonRegex* re_ = nullptr;
    JsonRegex::Set re_at_{};
    uint32_t cp_ = 0;
    uint16_t high_ = 0;
    // A bounded integer (JsonSchema::Node::bounded): its sign, digits so far, their value, bounds.
    bool bounded_ = false, num_neg_ = false;
    int num_digits_ = 0;
    int64_t num_val_ = 0, lo_ = 0, hi_ = 0;
    // A bounded number (JsonSchema::Node::real_bounded, no exponent): its node and text so far.
    static constexpr int kMaxNumberText = 40;
    bool real_ = false;
    int real_node_ = 0;
    uint8_t num_len_ = 0;
    char num_[kMaxNumberText] = {};
};

// JSON mode's whole answer: literal text `before`, one JSON object (JsonPrefix), literal text
// `after` (e.g. "<tool_call>\n" … "\n</tool_call>" to force a function call). Special tokens
// (control, user-defined) may only spell the literals, never sit inside the object.
class JsonAnswer {
public:
    // The literals must outlive this (and its copies).
    JsonAnswer(const JsonSchema* schema, std::string_view before, std::string_view after);
    bool allows(std::string_view bytes, bool special) const;
    void feed(std::string_view bytes);
    bool complete() const;  // all written: only an end token may follow
    bool free_string() const { return stage_ == 1 && json_.free_string(); }  // JsonPrefix::free_string
    // One byte; in_object says whether the object (not a literal) took it, where special tokens
    // may not go (a byte at a time, for TokenTrie walks).
    bool advance(unsigned char c, bool& in_object);

private:
    JsonPrefix json_;
    std::string_view before_, after_;
    size_t pos_ = 0;  // into the literal of the stage
    uint8_t stage_ = 0;  // 0 before, 1 the object, 2 after
};

}  // namespace diskformer
