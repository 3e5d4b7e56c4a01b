#include "runtime/json_prefix.h"

#include <bit>
#include <cstdlib>
#include <string>
#include <string_view>

#include "runtime/utf8_lead.h"

namespace diskformer {
namespace {

bool is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
bool is_hex(unsigned char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// Number parts (JsonPrefix::sub_ in Mode::number): what has been read last.
enum Num : uint8_t { kMinus, kZero, kInt, kDot, kFrac, kExp, kExpSign, kExpDigits };
// Whether a number may end after that part.
bool num_can_end(uint8_t s) { return s == kZero || s == kInt || s == kFrac || s == kExpDigits; }

// A decimal (a bounded number's text, or a bound): sign and magnitude as digit strings, the
// integer part without leading zeros, the fraction without trailing zeros (zero: both empty,
// not negative).
struct Dec {
    bool neg = false;
    std::string i, f;
};

Dec parse_dec(std::string_view t) {
    Dec d;
    if (!t.empty() && t[0] == '-') {
        d.neg = true;
        t.remove_prefix(1);
    }
    const size_t dot = t.find('.');
    const std::string_view ip = t.substr(0, dot), fp = dot == std::string_view::npos ? std::string_view() : t.substr(dot + 1);
    const size_t first = ip.find_first_not_of('0'), last = fp.find_last_not_of('0');
    if (first != std::string_view::npos) d.i = ip.substr(first);
    if (last != std::string_view::npos) d.f = fp.substr(0, last + 1);
    if (d.i.empty() && d.f.empty()) d.neg = false;
    return d;
}

int cmp_dec(const Dec& a, const Dec& b) {
    if (a.neg != b.neg) return a.neg ? -1 : 1;
    int m = a.i.size() != b.i.size() ? (a.i.size() < b.i.size() ? -1 : 1) : a.i.compare(b.i);
    if (m == 0) m = a.f.compare(b.f);  // no trailing zeros: a proper prefix is the smaller
    m = m < 0 ? -1 : m > 0 ? 1 : 0;
    return a.neg ? -m : m;
}

// Digit string + 1.
std::string plus_one(std::string d) {
    for (size_t k = d.size(); k-- > 0;) {
        if (d[k] != '9') {
            ++d[k];
            return d;
        }
        d[k] = '0';
    }
    return "1" + d;
}

// An end of an interval: a decimal or an infinity, closed or open.
struct End {
    Dec v;
    int inf = 0;  // -1, +1: minus / plus infinity
    bool closed = false;
};

int cmp_end(const End& a, const End& b) {
    if (a.inf || b.inf) return a.inf == b.inf ? 0 : a.inf < b.inf ? -1 : 1;
    return cmp_dec(a.v, b.v);
}

// Whether two intervals share a decimal (decimals are dense: a non-empty real interval holds one).
bool meet(const End& lo1, const End& hi1, const End& lo2, const End& hi2) {
    const int l = cmp_end(lo1, lo2), h = cmp_end(hi1, hi2);
    End lo = l > 0 ? lo1 : lo2, hi = h < 0 ? hi1 : hi2;
    if (l == 0) lo.closed = lo1.closed && lo2.closed;
    if (h == 0) hi.closed = hi1.closed && hi2.closed;
    const int c = cmp_end(lo, hi);
    return c < 0 || (c == 0 && lo.closed && hi.closed && !lo.inf);
}

// The schema type a value starting with c has.
uint8_t type_of(unsigned char c) {
    switch (c) {
        case '{': return JsonSchema::kObject;
        case '[': return JsonSchema::kArray;
        case '"': return JsonSchema::kString;
        case 't':
        case 'f': return JsonSchema::kBoolean;
        case 'n': return JsonSchema::kNull;
        default: return JsonSchema::kNumber | JsonSchema::kInteger;
    }
}

}  // namespace

JsonPrefix::JsonPrefix(const JsonSchema* schema) : schema_(schema), value_node_(schema ? schema->root() : 0) {}

bool JsonPrefix::allows(std::string_view bytes) const {
    JsonPrefix copy = *this;
    return copy.feed(bytes);
}

bool JsonPrefix::feed(std::string_view bytes) {
    for (const char ch : bytes) {
        const auto c = static_cast<unsigned char>(ch);
        const bool outside = mode_ != Mode::string && mode_ != Mode::escape && mode_ != Mode::unicode && mode_ != Mode::choice;
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
        cp_ = cp_ << 6 | (c & 0x3Fu);
        return utf8_left_ == 0 ? pattern_char(cp_) : pattern_may(cp_ << (6 * utf8_left_), ((cp_ + 1) << (6 * utf8_left_)) - 1);
    }
    if (c < 0x80) return c >= 0x20 && pattern_char(c);  // control characters must be escaped
    unsigned more = 0, lo = 0, hi = 0;
    if (!utf8_lead(c, more, lo, hi)) return false;
    utf8_left_ = static_cast<uint8_t>(more);
    utf8_lo_ = static_cast<uint8_t>(lo);
    utf8_hi_ = static_cast<uint8_t>(hi);
    cp_ = c & (0x3Fu >> more);
    // Exact: the next byte's range [lo, hi] (overlong forms and surrogates excluded), any after.
    const unsigned rest = 6 * (more - 1);
    return pattern_may((cp_ << 6 | (lo & 0x3Fu)) << rest, (((cp_ << 6 | (hi & 0x3Fu)) + 1) << rest) - 1);
}

// A string value's pattern (no-ops without one): a whole character steps its states, a part of
// one (UTF-8 lead or continuation bytes, \u digits) must leave some code point it can take.
// With length bounds, the text must also be able to end matched within them (chars_ counts the
// character being read).
bool JsonPrefix::pattern_char(uint32_t cp) {
    if (!re_) return true;
    re_at_ = re_->next(re_at_, cp);
    return re_->fits(re_at_, str_min_ - chars_, str_max_ - chars_);
}

bool JsonPrefix::pattern_may(uint32_t lo, uint32_t hi) const {
    return !re_ || re_->any_in(re_at_, lo, hi, str_min_ - chars_, str_max_ - chars_);
}

// The code points the \u escape being read can still become: [lo, hi] is its code unit's range;
// a high surrogate stands for the 1024 code points its pair can make.
bool JsonPrefix::pattern_may_unit(uint32_t lo, uint32_t hi) const {
    if (!re_) return true;
    auto pair = [](uint32_t h, uint32_t l) { return 0x10000 + ((h - 0xD800) << 10) + (l - 0xDC00); };
    if (need_low_) return pattern_may(pair(high_, std::max(lo, 0xDC00u)), pair(high_, std::min(hi, 0xDFFFu)));
    if (lo <= 0xD7FF && pattern_may(lo, std::min(hi, 0xD7FFu))) return true;
    if (hi >= 0xE000 && pattern_may(std::max(lo, 0xE000u), hi)) return true;
    return lo <= 0xDBFF && hi >= 0xD800 && pattern_may(pair(std::max(lo, 0xD800u), 0xDC00), pair(std::min(hi, 0xDBFFu), 0xDFFF));
}

// ---- schema checks ----------------------------------------------------------------------------

bool JsonPrefix::may_open_key() {
    if (!schema_) return true;
    Frame& f = frames_.back();
    const auto& n = schema_->node(f.node);
    if (!n.props) {  // any key; its value by the node's schema for all keys
        match_ = Match::none;
        value_node_ = n.extra;
        return true;
    }
    // The next declared property, or any later one if those between are optional.
    cand_ = 0;
    for (int i = f.next; i < static_cast<int>(n.keys.size()); ++i) {
        cand_ |= uint64_t{1} << i;
        if (n.required[static_cast<size_t>(i)]) break;
    }
    cand_pos_ = 0;
    match_ = Match::key;
    return cand_ != 0;
}

bool JsonPrefix::may_close_object() const {
    if (!schema_) return true;
    const Frame& f = frames_.back();
    const auto& n = schema_->node(f.node);
    for (size_t i = static_cast<size_t>(f.next); i < n.required.size(); ++i)
        if (n.required[i]) return false;
    return true;
}

bool JsonPrefix::may_add_key() const {
    if (!schema_) return true;
    const Frame& f = frames_.back();
    const auto& n = schema_->node(f.node);
    return !n.props || f.next < static_cast<int>(n.keys.size());
}

bool JsonPrefix::match_byte(unsigned char c) {
    const auto& texts = schema_->node(frames_.back().node).keys;
    for (uint64_t bits = cand_; bits; bits &= bits - 1) {
        const int i = std::countr_zero(bits);
        const std::string& t = texts[static_cast<size_t>(i)];
        if (cand_pos_ >= t.size() || static_cast<unsigned char>(t[cand_pos_]) != c) cand_ &= ~(uint64_t{1} << i);
    }
    ++cand_pos_;
    return cand_ != 0;
}

bool JsonPrefix::match_end() {
    const auto& n = schema_->node(frames_.back().node);
    for (uint64_t bits = cand_; bits; bits &= bits - 1) {
        const int i = std::countr_zero(bits);
        if (n.keys[static_cast<size_t>(i)].size() != cand_pos_) continue;
        frames_.back().next = i + 1;
        value_node_ = n.values[static_cast<size_t>(i)];
        match_ = Match::none;
        return true;
    }
    return false;
}

bool JsonPrefix::choice_byte(unsigned char c) {
    const auto& texts = schema_->node(value_node_).choices;
    uint64_t next = 0;
    bool whole = false;  // a candidate ends here
    for (uint64_t bits = cand_; bits; bits &= bits - 1) {
        const int i = std::countr_zero(bits);
        const std::string& t = texts[static_cast<size_t>(i)];
        if (cand_pos_ < t.size() && static_cast<unsigned char>(t[cand_pos_]) == c) next |= uint64_t{1} << i;
        else if (cand_pos_ == t.size()) whole = true;
    }
    if (next) {
        cand_ = next;
        ++cand_pos_;
        return true;
    }
    if (!whole) return false;
    end_value();  // the value was one of the texts; c belongs to what follows it
    return step(c);
}

bool JsonPrefix::bound_reachable() const {
    if (num_digits_ == 0) return lo_ <= 0;  // "-": minus zero or any negative integer
    // The integers that start with these digits: [v * 10^k, (v + 1) * 10^k - 1] for k >= 0 (only
    // k = 0 after a leading zero), within 18 digits; negated after a minus.
    __int128 a = num_val_, b = num_val_;
    for (int d = num_digits_; d <= 18; ++d) {
        const __int128 lo = num_neg_ ? -b : a, hi = num_neg_ ? -a : b;
        if (lo <= hi_ && hi >= lo_) return true;
        if (num_val_ == 0) break;
        a *= 10;
        b = b * 10 + 9;
    }
    return false;
}

// The numbers a bounded number's text can still become (no exponent: a fraction, or more integer
// digits up to 18): magnitudes [a, b), each negated after a minus; one must meet the bounds.
bool JsonPrefix::real_reachable() const {
    const auto& n = schema_->node(real_node_);
    End lo{{}, n.real_lo.empty() ? -1 : 0, !n.lo_open}, hi{{}, n.real_hi.empty() ? 1 : 0, !n.hi_open};
    if (!lo.inf) lo.v = parse_dec(n.real_lo);
    if (!hi.inf) hi.v = parse_dec(n.real_hi);
    std::string_view t(num_, num_len_);
    const bool neg = !t.empty() && t[0] == '-';
    if (neg) t.remove_prefix(1);
    auto reaches = [&](const Dec& a, const End& b) {  // magnitudes [a, b)
        End x{a, 0, true}, y = b;
        y.closed = false;
        if (!neg) return meet(x, y, lo, hi);
        End nx = y, ny = x;  // (-b, -a]
        nx.inf = -y.inf;
        nx.v.neg = !nx.v.i.empty() || !nx.v.f.empty();
        ny.v.neg = !ny.v.i.empty() || !ny.v.f.empty();
        ny.closed = true;
        nx.closed = false;
        return meet(nx, ny, lo, hi);
    };
    if (t.empty()) return reaches(Dec{}, End{{}, 1, false});
    const size_t dot = t.find('.');
    if (dot == std::string_view::npos) {
        const Dec a = parse_dec(t);
        if (a.i.empty()) return reaches(a, End{parse_dec("1"), 0, false});  // "0": 0.x only
        std::string lo_digits = a.i, hi_digits = plus_one(a.i);
        for (size_t k = a.i.size(); k <= 18; ++k, lo_digits += '0', hi_digits += '0')
            if (reaches(parse_dec(lo_digits), End{parse_dec(hi_digits), 0, false})) return true;
        return false;
    }
    // I.F: [I.F, I.F + 10^-|F|)
    const std::string_view ip = t.substr(0, dot), fp = t.substr(dot + 1);
    std::string digits = std::string(ip) + std::string(fp);
    const std::string up = plus_one(digits);
    const size_t k = fp.size();
    const std::string upper = up.substr(0, up.size() - k) + "." + up.substr(up.size() - k);
    return reaches(parse_dec(t), End{parse_dec(upper), 0, false});
}

// The number as a reader parses it (the nearest double) against the bounds' doubles, as a
// validator compares them: writing the bound itself meets an inclusive one.
bool JsonPrefix::real_met() const {
    const auto& n = schema_->node(real_node_);
    const double v = std::strtod(std::string(num_, num_len_).c_str(), nullptr);
    if (!n.real_lo.empty()) {
        const double lo = std::strtod(n.real_lo.c_str(), nullptr);
        if (v < lo || (v == lo && n.lo_open)) return false;
    }
    if (!n.real_hi.empty()) {
        const double hi = std::strtod(n.real_hi.c_str(), nullptr);
        if (v > hi || (v == hi && n.hi_open)) return false;
    }
    return true;
}

bool JsonPrefix::bound_met() const {
    const int64_t v = num_neg_ ? -num_val_ : num_val_;
    return v >= lo_ && v <= hi_;
}

// ---- syntax ------------------------------------------------------------------------------------

void JsonPrefix::end_value() {
    if (stack_.empty()) {
        mode_ = Mode::done;
        return;
    }
    if (stack_.back() == '{') {
        mode_ = Mode::obj_next;
    } else {
        mode_ = Mode::arr_next;
        if (schema_) ++frames_.back().count;
    }
}

void JsonPrefix::close_container() {
    stack_.pop_back();
    if (schema_) frames_.pop_back();
    end_value();
}

bool JsonPrefix::begin_value(unsigned char c) {
    str_min_ = 0;
    str_max_ = INT_MAX;
    re_ = nullptr;
    if (schema_) {
        // Through refs and anyOf branches to the schema a value starting with c must meet.
        const int at = schema_->resolve(value_node_, type_of(c));
        if (at < 0) return false;
        value_node_ = at;
        const auto& n = schema_->node(at);
        if (!(n.types & type_of(c))) return false;
        int_only_ = !(n.types & JsonSchema::kNumber);
        if (n.choice_types & type_of(c)) {
            const size_t k = n.choices.size();
            cand_ = k == 64 ? ~uint64_t{0} : (uint64_t{1} << k) - 1;
            cand_pos_ = 0;
            mode_ = Mode::choice;
            return choice_byte(c);
        }
        str_min_ = n.min_length;
        str_max_ = n.max_length;
        if (n.pattern >= 0 && c == '"') {
            re_ = &schema_->regex(n.pattern);
            re_at_ = re_->start();
            if (!re_->fits(re_at_, str_min_, str_max_)) return false;  // JsonSchema::compile refuses such nodes
        }
        bounded_ = n.bounded && int_only_;
        lo_ = n.min_value;
        hi_ = n.max_value;
        real_ = n.real_bounded && !int_only_;
        real_node_ = at;
    } else {
        bounded_ = real_ = false;
    }
    switch (c) {
        case '{':
        case '[':
            if (stack_.size() >= kMaxDepth) return false;
            stack_.push_back(static_cast<char>(c));
            if (schema_) frames_.push_back({value_node_, 0, 0});
            mode_ = c == '{' ? Mode::obj_key_or_end : Mode::arr_value_or_end;
            return true;
        case '"':
            mode_ = Mode::string;
            key_ = false;
            match_ = Match::none;
            chars_ = 0;
            return true;
        case 't': lit_ = "rue"; mode_ = Mode::literal; return true;
        case 'f': lit_ = "alse"; mode_ = Mode::literal; return true;
        case 'n': lit_ = "ull"; mode_ = Mode::literal; return true;
        case '-':
            mode_ = Mode::number;
            sub_ = kMinus;
            num_neg_ = true;
            num_val_ = num_digits_ = 0;
            num_[0] = '-';
            num_len_ = 1;
            if (real_) return real_reachable();
            return !bounded_ || bound_reachable();
        default:
            if (!is_digit(c)) return false;
            mode_ = Mode::number;
            sub_ = c == '0' ? kZero : kInt;
            num_neg_ = false;
            num_val_ = c - '0';
            num_digits_ = 1;
            num_[0] = static_cast<char>(c);
            num_len_ = 1;
            if (real_) return real_reachable();
            return !bounded_ || bound_reachable();
    }
}

bool JsonPrefix::step(unsigned char c) {
    // A declared key is matched against its candidates byte by byte, escapes included.
    const bool in_string = mode_ == Mode::string || mode_ == Mode::escape || mode_ == Mode::unicode;
    if (in_string && match_ != Match::none && !(mode_ == Mode::string && c == '"') && !match_byte(c)) return false;
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
                if (!may_open_key()) return false;
                mode_ = Mode::string;
                key_ = true;
                chars_ = str_min_ = 0;
                str_max_ = INT_MAX;
                re_ = nullptr;  // keys match declared names, never a pattern
                return true;
            }
            if (c == '}' && mode_ == Mode::obj_key_or_end && may_close_object()) {
                close_container();
                return true;
            }
            return false;
        case Mode::colon:
            if (is_ws(c)) return true;
            if (c != ':') return false;
            mode_ = Mode::value;
            return true;
        case Mode::obj_next:
            if (is_ws(c)) return true;
            if (c == ',' && may_add_key()) {
                mode_ = Mode::obj_key;
                return true;
            }
            if (c == '}' && may_close_object()) {
                close_container();
                return true;
            }
            return false;
        case Mode::arr_next:
            if (is_ws(c)) return true;
            if (c == ',') {
                if (schema_) {
                    const Frame& f = frames_.back();
                    if (f.count >= schema_->node(f.node).max_items) return false;
                    value_node_ = schema_->node(f.node).items;
                }
                mode_ = Mode::value;
                return true;
            }
            if (c == ']' && (!schema_ || frames_.back().count >= schema_->node(frames_.back().node).min_items)) {
                close_container();
                return true;
            }
            return false;
        case Mode::arr_value_or_end:
            if (is_ws(c)) return true;
            if (c == ']') {
                if (schema_ && schema_->node(frames_.back().node).min_items > 0) return false;
                close_container();
                return true;
            }
            if (schema_) {
                const auto& n = schema_->node(frames_.back().node);
                if (n.max_items == 0) return false;
                value_node_ = n.items;
            }
            return begin_value(c);
        case Mode::string:
            if (utf8_left_ > 0) return string_byte(c);  // a character's continuation bytes
            if (need_low_ && c != '\\') return false;  // a high surrogate's low half must follow
            if (c == '"') {
                if (match_ != Match::none && !match_end()) return false;
                if (chars_ < str_min_) return false;
                if (re_ && !re_->accepts(re_at_)) return false;
                if (key_) mode_ = Mode::colon;
                else end_value();
                return true;
            }
            // A character starts (a byte, a lead byte or an escape; not a low surrogate's escape:
            // with its high half it is one code point, as a reader counts).
            if (!need_low_ && ++chars_ > str_max_) return false;
            if (c == '\\') {
                mode_ = Mode::escape;
                return pattern_may(0, 0x10FFFF);  // \uXXXX can write any code point
            }
            return string_byte(c);
        case Mode::escape:
            if (c == 'u') {
                mode_ = Mode::unicode;
                sub_ = 4;
                uni_ = 0;
                return true;
            }
            if (need_low_) return false;  // a high surrogate's \u escape must follow
            if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
                mode_ = Mode::string;
                return pattern_char(c == 'b' ? 8u : c == 'f' ? 12u : c == 'n' ? 10u : c == 'r' ? 13u : c == 't' ? 9u : c);
            }
            return false;
        case Mode::unicode: {
            if (!is_hex(c)) return false;
            uni_ = static_cast<uint16_t>(uni_ * 16 + (is_digit(c) ? c - '0' : (c | 0x20) - 'a' + 10));
            --sub_;
            // UTF-16 escapes must pair: a high surrogate (D800-DBFF) is followed by a low one
            // (DC00-DFFF), which never stands alone (parsers refuse either half alone). Refused
            // at the first hex digit that cannot lead to an allowed code unit.
            const uint32_t lo = static_cast<uint32_t>(uni_) << (4 * sub_), hi = lo + (1u << (4 * sub_)) - 1;
            const bool low_ok = lo <= 0xDFFF && hi >= 0xDC00;
            const bool other_ok = lo < 0xDC00 || hi > 0xDFFF;
            if (need_low_ ? !low_ok : !other_ok) return false;
            if (!pattern_may_unit(lo, hi)) return false;
            if (sub_ == 0) {
                mode_ = Mode::string;
                const bool low = need_low_;
                need_low_ = !need_low_ && uni_ >= 0xD800 && uni_ <= 0xDBFF;
                if (need_low_) high_ = uni_;  // the character is whole with its low half
                else if (!pattern_char(low ? 0x10000 + ((high_ - 0xD800u) << 10) + (uni_ - 0xDC00u) : uni_)) return false;
            }
            return true;
        }
        case Mode::number:
            if (real_) {  // a bounded number: no exponent, each byte checked against the bounds
                if (is_digit(c) || c == '.') {
                    if (num_len_ >= kMaxNumberText) return false;
                    const bool dot = c == '.';
                    switch (sub_) {
                        case kMinus:
                            if (dot) return false;
                            sub_ = c == '0' ? kZero : kInt;
                            break;
                        case kZero:  // no digit after a leading zero
                            if (!dot) return false;
                            sub_ = kDot;
                            break;
                        case kInt: sub_ = dot ? kDot : kInt; break;
                        case kDot:
                        case kFrac:
                            if (dot) return false;
                            sub_ = kFrac;
                            break;
                        default: return false;
                    }
                    num_[num_len_++] = static_cast<char>(c);
                    return real_reachable();
                }
                if (!num_can_end(sub_) || c == 'e' || c == 'E' || !real_met()) return false;
                end_value();  // the number ended; c belongs to what follows it
                return step(c);
            }
            switch (sub_) {
                case kMinus:
                    if (!is_digit(c)) return false;
                    sub_ = c == '0' ? kZero : kInt;
                    num_val_ = c - '0';
                    num_digits_ = 1;
                    return !bounded_ || bound_reachable();
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
            if (is_digit(c) && sub_ != kZero) {  // more of the same part
                if (!bounded_) return true;
                if (num_digits_ >= 18) return false;
                num_val_ = num_val_ * 10 + (c - '0');
                ++num_digits_;
                return bound_reachable();
            }
            if (c == '.' && !int_only_ && (sub_ == kZero || sub_ == kInt)) {
                sub_ = kDot;
                return true;
            }
            if ((c == 'e' || c == 'E') && !int_only_ && (sub_ == kZero || sub_ == kInt || sub_ == kFrac)) {
                sub_ = kExp;
                return true;
            }
            if (!num_can_end(sub_) || (bounded_ && !bound_met())) return false;
            end_value();  // the number ended; c belongs to what follows it
            return step(c);
        case Mode::literal:
            if (c != static_cast<unsigned char>(*lit_)) return false;
            if (*++lit_ == '\0') end_value();
            return true;
        case Mode::choice:
            return choice_byte(c);
        case Mode::done:
            return is_ws(c);
    }
    return false;
}

// ---- the whole answer ---------------------------------------------------------------------------

JsonAnswer::JsonAnswer(const JsonSchema* schema, std::string_view before, std::string_view after)
    : json_(schema), before_(before), after_(after), stage_(before_.empty() ? 1 : 0) {}

bool JsonAnswer::advance(unsigned char c, bool& in_object) {
    if (stage_ == 1 && json_.complete()) {
        stage_ = 2;
        pos_ = 0;
    }
    in_object = stage_ == 1;
    if (stage_ == 1) return json_.feed(std::string_view(reinterpret_cast<const char*>(&c), 1));
    const std::string_view lit = stage_ == 0 ? before_ : after_;
    if (pos_ >= lit.size() || static_cast<unsigned char>(lit[pos_]) != c) return false;
    if (++pos_ == lit.size() && stage_ == 0) {
        stage_ = 1;
        pos_ = 0;
    }
    return true;
}

bool JsonAnswer::allows(std::string_view bytes, bool special) const {
    JsonAnswer copy = *this;
    for (const char c : bytes) {
        bool in_object = false;
        if (!copy.advance(static_cast<unsigned char>(c), in_object) || (special && in_object)) return false;
    }
    return true;
}

void JsonAnswer::feed(std::string_view bytes) {
    for (const char c : bytes) {
        bool in_object = false;
        (void)advance(static_cast<unsigned char>(c), in_object);
    }
}

bool JsonAnswer::complete() const {
    if (stage_ == 2) return pos_ == after_.size();
    return stage_ == 1 && json_.complete() && after_.empty();
}

}  // namespace diskformer
