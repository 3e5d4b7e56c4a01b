#include "runtime/json_prefix.h"

namespace diskformer {
namespace {

bool is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
bool is_hex(unsigned char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// Number parts (JsonPrefix::sub_ in Mode::number): what has been read last.
enum Num : uint8_t { kMinus, kZero, kInt, kDot, kFrac, kExp, kExpSign, kExpDigits };
// Whether a number may end after that part.
bool num_can_end(uint8_t s) { return s == kZero || s == kInt || s == kFrac || s == kExpDigits; }

}  // namespace

bool JsonPrefix::allows(std::string_view bytes) const {
    JsonPrefix copy = *this;
    return copy.feed(bytes);
}

bool JsonPrefix::feed(std::string_view bytes) {
    for (const char ch : bytes) {
        const auto c = static_cast<unsigned char>(ch);
        const bool outside = mode_ != Mode::string && mode_ != Mode::escape && mode_ != Mode::unicode;
        if (outside && is_ws(c) && ++ws_ > kMaxWhitespace) return false;
        if (!is_ws(c) || !outside) ws_ = 0;
        if (!step(c)) return false;
    }
    return true;
}

bool JsonPrefix::string_byte(unsigned char c) {
    if (utf8_left_ > 0) {
        if (c < utf8_lo_ || c > utf8_hi_) return false;
        --utf8_left_;
        utf8_lo_ = 0x80;
        utf8_hi_ = 0xBF;
        return true;
    }
    if (c < 0x80) return c >= 0x20;  // control characters must be escaped
    // A lead byte (RFC 3629: no overlongs, surrogates or values past U+10FFFF).
    if (c >= 0xC2 && c <= 0xDF) utf8_left_ = 1;
    else if (c >= 0xE0 && c <= 0xEF) utf8_left_ = 2, utf8_lo_ = c == 0xE0 ? 0xA0 : 0x80, utf8_hi_ = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) utf8_left_ = 3, utf8_lo_ = c == 0xF0 ? 0x90 : 0x80, utf8_hi_ = c == 0xF4 ? 0x8F : 0xBF;
    else return false;
    return true;
}

void JsonPrefix::end_value() {
    if (stack_.empty()) mode_ = Mode::done;
    else mode_ = stack_.back() == '{' ? Mode::obj_next : Mode::arr_next;
}

bool JsonPrefix::begin_value(unsigned char c) {
    switch (c) {
        case '{':
        case '[':
            if (stack_.size() >= kMaxDepth) return false;
            stack_.push_back(static_cast<char>(c));
            mode_ = c == '{' ? Mode::obj_key_or_end : Mode::arr_value_or_end;
            return true;
        case '"':
            mode_ = Mode::string;
            key_ = false;
            return true;
        case 't': lit_ = "rue"; mode_ = Mode::literal; return true;
        case 'f': lit_ = "alse"; mode_ = Mode::literal; return true;
        case 'n': lit_ = "ull"; mode_ = Mode::literal; return true;
        case '-': mode_ = Mode::number; sub_ = kMinus; return true;
        default:
            if (!is_digit(c)) return false;
            mode_ = Mode::number;
            sub_ = c == '0' ? kZero : kInt;
            return true;
    }
}

bool JsonPrefix::step(unsigned char c) {
    switch (mode_) {
        case Mode::start:
            if (is_ws(c)) return true;
            return c == '{' && begin_value(c);
        case Mode::value:
            return is_ws(c) || begin_value(c);
        case Mode::obj_key_or_end:
        case Mode::obj_key:
            if (is_ws(c)) return true;
            if (c == '"') {
                mode_ = Mode::string;
                key_ = true;
                return true;
            }
            if (c == '}' && mode_ == Mode::obj_key_or_end) {
                stack_.pop_back();
                end_value();
                return true;
            }
            return false;
        case Mode::colon:
            if (is_ws(c)) return true;
            if (c != ':') return false;
            mode_ = Mode::value;
            return true;
        case Mode::obj_next:
        case Mode::arr_next: {
            if (is_ws(c)) return true;
            const char close = mode_ == Mode::obj_next ? '}' : ']';
            if (c == ',') {
                mode_ = mode_ == Mode::obj_next ? Mode::obj_key : Mode::value;
                return true;
            }
            if (c != static_cast<unsigned char>(close)) return false;
            stack_.pop_back();
            end_value();
            return true;
        }
        case Mode::arr_value_or_end:
            if (is_ws(c)) return true;
            if (c == ']') {
                stack_.pop_back();
                end_value();
                return true;
            }
            return begin_value(c);
        case Mode::string:
            if (utf8_left_ > 0) return string_byte(c);  // a character's continuation bytes
            if (c == '"') {
                if (key_) mode_ = Mode::colon;
                else end_value();
                return true;
            }
            if (c == '\\') {
                mode_ = Mode::escape;
                return true;
            }
            return string_byte(c);
        case Mode::escape:
            if (c == 'u') {
                mode_ = Mode::unicode;
                sub_ = 4;
                return true;
            }
            if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
                mode_ = Mode::string;
                return true;
            }
            return false;
        case Mode::unicode:
            if (!is_hex(c)) return false;
            if (--sub_ == 0) mode_ = Mode::string;
            return true;
        case Mode::number:
            switch (sub_) {
                case kMinus:
                    if (!is_digit(c)) return false;
                    sub_ = c == '0' ? kZero : kInt;
                    return true;
                case kDot:
                    if (!is_digit(c)) return false;
                    sub_ = kFrac;
                    return true;
                case kExp:
                    if (c == '+' || c == '-') {
                        sub_ = kExpSign;
                        return true;
                    }
                    [[fallthrough]];
                case kExpSign:
                    if (!is_digit(c)) return false;
                    sub_ = kExpDigits;
                    return true;
                default:
                    break;
            }
            if (is_digit(c) && sub_ != kZero) return true;  // more of the same part
            if (c == '.' && (sub_ == kZero || sub_ == kInt)) {
                sub_ = kDot;
                return true;
            }
            if ((c == 'e' || c == 'E') && (sub_ == kZero || sub_ == kInt || sub_ == kFrac)) {
                sub_ = kExp;
                return true;
            }
            if (!num_can_end(sub_)) return false;
            end_value();  // the number ended; c belongs to what follows it
            return step(c);
        case Mode::literal:
            if (c != static_cast<unsigned char>(*lit_)) return false;
            if (*++lit_ == '\0') end_value();
            return true;
        case Mode::done:
            return is_ws(c);
    }
    return false;
}

}  // namespace diskformer
