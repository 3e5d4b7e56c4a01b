#include "runtime/json_regex.h"

#include <algorithm>
#include <string>

#include "diskformer/diskformer.h"

namespace diskformer {
namespace {

using Ranges = JsonRegex::Ranges;
constexpr uint32_t kMaxCp = 0x10FFFF;

[[noreturn]] void fail(const std::string& why) { throw Error("pattern: " + why); }

Ranges normalized(Ranges r) {
    std::sort(r.begin(), r.end());
    Ranges out;
    for (const auto& [a, b] : r) {
        if (!out.empty() && a <= out.back().second + 1) out.back().second = std::max(out.back().second, b);
        else out.emplace_back(a, b);
    }
    return out;
}

Ranges complement(const Ranges& r) {
    Ranges out;
    uint32_t next = 0;
    for (const auto& [a, b] : normalized(r)) {
        if (a > next) out.emplace_back(next, a - 1);
        next = b + 1;
    }
    if (next <= kMaxCp) out.emplace_back(next, kMaxCp);
    return out;
}

const Ranges kDigit{{'0', '9'}};
const Ranges kWord{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
// ECMAScript's WhiteSpace and LineTerminator code points.
const Ranges kSpace{{0x09, 0x0D}, {0x20, 0x20}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                    {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
const Ranges kDot = complement({{0x0A, 0x0A}, {0x0D, 0x0D}, {0x2028, 0x2029}});

struct Ast {
    enum Kind { chars, concat, alt, repeat } kind = concat;  // an empty concat matches ""
    Ranges ranges;
    std::vector<Ast> kids;
    int min = 0, max = -1;  // repeat: max -1 unbounded
};

std::vector<uint32_t> decode_utf8(std::string_view s) {
    std::vector<uint32_t> out;
    for (size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        const int n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
        uint32_t cp = n == 1 ? c : c & (0x3F >> (n - 1));
        for (int k = 1; k < n && i + k < s.size(); ++k) cp = cp << 6 | (static_cast<unsigned char>(s[i + k]) & 0x3F);
        out.push_back(cp);
        i += static_cast<size_t>(n);
    }
    return out;
}

class Parser {
public:
    explicit Parser(std::vector<uint32_t> p) : p_(std::move(p)) {}

    // The whole pattern: each top-level alternative may begin with '^' and end with '$'; an
    // end without one gets an any-string loop (a match may lie anywhere, as in a search).
    Ast parse() {
        const Ast any{Ast::repeat, {}, {Ast{Ast::chars, {{0, kMaxCp}}, {}, 0, 0}}, 0, -1};
        Ast top{Ast::alt, {}, {}};
        for (;;) {
            const bool start = at('^');
            if (start) ++i_;
            Ast branch;
            if (!start) branch.kids.push_back(any);
            branch.kids.push_back(sequence());
            if (at('$')) {
                ++i_;
                if (i_ < p_.size() && !at('|')) fail("'$' is supported only at the end of the pattern or of an alternative");
            } else {
                branch.kids.push_back(any);
            }
            top.kids.push_back(std::move(branch));
            if (!at('|')) break;
            ++i_;
        }
        if (i_ != p_.size()) fail(p_[i_] == ')' ? "unbalanced ')'" : "cannot read the pattern here");
        return top.kids.size() == 1 ? std::move(top.kids[0]) : top;
    }

private:
    bool at(uint32_t c) const { return i_ < p_.size() && p_[i_] == c; }

    Ast alternation() {
        Ast first = sequence();
        if (!at('|')) return first;
        Ast a{Ast::alt, {}, {std::move(first)}};
        while (at('|')) {
            ++i_;
            a.kids.push_back(sequence());
        }
        return a;
    }

    Ast sequence() {
        Ast s;
        while (i_ < p_.size() && !at('|') && !at(')') && !(depth_ == 0 && at('$'))) s.kids.push_back(quantified());
        return s;
    }

    Ast quantified() {
        Ast a = atom();
        int lo = 0, hi = -1;
        if (at('*')) {
            ++i_;
        } else if (at('+')) {
            ++i_;
            lo = 1;
        } else if (at('?')) {
            ++i_;
            hi = 1;
        } else if (!braces(lo, hi)) {
            return a;
        }
        if (at('?')) ++i_;  // lazy: the same strings
        int l2 = 0, h2 = 0;
        if (at('*') || at('+') || at('?') || braces(l2, h2)) fail("a quantifier after a quantifier");
        return Ast{Ast::repeat, {}, {std::move(a)}, lo, hi};
    }

    // {n}, {n,}, {n,m}; anything else after '{' is a literal '{' (as ECMAScript reads it).
    bool braces(int& lo, int& hi) {
        if (!at('{')) return false;
        size_t k = i_ + 1;
        auto number = [&](int& v) {
            const size_t s = k;
            long long x = 0;
            while (k < p_.size() && p_[k] >= '0' && p_[k] <= '9') {
                x = std::min<long long>(x * 10 + (p_[k] - '0'), 100000);
                ++k;
            }
            v = static_cast<int>(x);
            return k > s;
        };
        if (!number(lo)) return false;
        hi = lo;
        if (k < p_.size() && p_[k] == ',') {
            ++k;
            hi = -1;
            if (k < p_.size() && p_[k] != '}' && !number(hi)) return false;
        }
        if (k >= p_.size() || p_[k] != '}') return false;
        if (hi >= 0 && hi < lo) fail("{n,m} with m below n");
        if (lo > 1000 || hi > 1000) fail("a repetition count above 1000");
        i_ = k + 1;
        return true;
    }

    Ast chars(Ranges r) { return Ast{Ast::chars, normalized(std::move(r)), {}, 0, 0}; }

    Ast atom() {
        const uint32_t c = p_[i_++];
        switch (c) {
            case '.': return chars(kDot);
            case '[': return chars(char_class());
            case '(': {
                if (at('?')) {
                    ++i_;
                    if (at(':')) {
                        ++i_;
                    } else if (at('<') && i_ + 1 < p_.size() && p_[i_ + 1] != '=' && p_[i_ + 1] != '!') {
                        while (i_ < p_.size() && p_[i_] != '>') ++i_;  // a named group: its name is not needed
                        if (i_++ >= p_.size()) fail("unterminated group name");
                    } else {
                        fail("lookahead and lookbehind are not supported");
                    }
                }
                if (++depth_ > kMaxDepth) fail("groups nested deeper than " + std::to_string(kMaxDepth));
                Ast inner = alternation();
                --depth_;
                if (!at(')')) fail("missing ')'");
                ++i_;
                return inner;
            }
            case ')': fail("unbalanced ')'");
            case '*':
            case '+':
            case '?': fail("nothing to repeat before '" + std::string(1, static_cast<char>(c)) + "'");
            case '^':
            case '$': fail("'^' and '$' are supported only at the start and the end of the pattern or of a top-level alternative");
            case '\\': return chars(escape(false));
            default: return chars({{c, c}});
        }
    }

    uint32_t hex(int digits) {
        uint32_t v = 0;
        for (int k = 0; k < digits; ++k) {
            if (i_ >= p_.size()) fail("a short hex escape");
            const uint32_t h = p_[i_++];
            const int d = h >= '0' && h <= '9' ? static_cast<int>(h - '0') : (h | 0x20) >= 'a' && (h | 0x20) <= 'f' ? static_cast<int>((h | 0x20) - 'a' + 10) : -1;
            if (d < 0) fail("a bad hex escape");
            v = v * 16 + static_cast<uint32_t>(d);
        }
        return v;
    }

    // After a backslash: the code points it stands for.
    Ranges escape(bool in_class) {
        if (i_ >= p_.size()) fail("a trailing backslash");
        const uint32_t c = p_[i_++];
        switch (c) {
            case 'd': return kDigit;
            case 'D': return complement(kDigit);
            case 'w': return kWord;
            case 'W': return complement(kWord);
            case 's': return kSpace;
            case 'S': return complement(kSpace);
            case 't': return {{9, 9}};
            case 'n': return {{10, 10}};
            case 'v': return {{11, 11}};
            case 'f': return {{12, 12}};
            case 'r': return {{13, 13}};
            case 'x': {
                const uint32_t v = hex(2);
                return {{v, v}};
            }
            case 'u': {
                uint32_t v = hex(4);
                // A surrogate pair written as two escapes is one code point.
                if (v >= 0xD800 && v <= 0xDBFF && i_ + 5 < p_.size() + 0 && p_[i_] == '\\' && p_[i_ + 1] == 'u') {
                    const size_t save = i_;
                    i_ += 2;
                    const uint32_t lo = hex(4);
                    if (lo >= 0xDC00 && lo <= 0xDFFF) v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
                    else i_ = save;
                }
                return {{v, v}};
            }
            case '0':
                if (i_ < p_.size() && p_[i_] >= '0' && p_[i_] <= '9') fail("octal escapes are not supported");
                return {{0, 0}};
            case 'b':
                if (in_class) return {{8, 8}};
                fail("word boundaries (\\b) are not supported");
            case 'B': fail("word boundaries (\\B) are not supported");
            case 'p':
            case 'P': fail("Unicode property escapes (\\p{...}) are not supported");
            case 'c': fail("control escapes (\\cX) are not supported");
            case 'k': fail("backreferences are not supported");
            default:
                if (c >= '1' && c <= '9') fail("backreferences are not supported");
                if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) fail("the escape \\" + std::string(1, static_cast<char>(c)) + " is not supported");
                return {{c, c}};  // escaped punctuation (and anything else) stands for itself
        }
    }

    Ranges char_class() {
        bool negate = false;
        if (at('^')) {
            negate = true;
            ++i_;
        }
        Ranges r;
        for (;;) {
            if (i_ >= p_.size()) fail("missing ']'");
            if (at(']')) break;  // "[]" matches nothing, "[^]" anything
            Ranges lo = class_atom();
            if (at('-') && i_ + 1 < p_.size() && p_[i_ + 1] != ']') {
                ++i_;
                Ranges hi = class_atom();
                if (lo.size() != 1 || hi.size() != 1 || lo[0].first != lo[0].second || hi[0].first != hi[0].second)
                    fail("a class range with a class at one end");
                if (hi[0].first < lo[0].first) fail("a class range out of order");
                r.emplace_back(lo[0].first, hi[0].first);
            } else {
                r.insert(r.end(), lo.begin(), lo.end());
            }
        }
        ++i_;  // ']'
        r = normalized(std::move(r));
        return negate ? complement(r) : r;
    }

    Ranges class_atom() {
        const uint32_t c = p_[i_++];
        if (c == '\\') return escape(true);
        return {{c, c}};
    }

    static constexpr int kMaxDepth = 64;  // a request's pattern must not recurse the parser off its stack
    std::vector<uint32_t> p_;
    size_t i_ = 0;
    int depth_ = 0;
};

}  // namespace

class RegexBuilder {
public:
    explicit RegexBuilder(JsonRegex& r) : r_(r) {}

    int state() {
        if (static_cast<int>(r_.states_.size()) >= JsonRegex::kMaxStates)
            fail("too large once its repetitions are written out (more than " + std::to_string(JsonRegex::kMaxStates) + " states)");
        r_.states_.emplace_back();
        return static_cast<int>(r_.states_.size()) - 1;
    }
    void eps(int from, int to) { r_.states_[static_cast<size_t>(from)].eps.push_back(to); }

    // Emits `a` between a fresh entry and exit state; returns {entry, exit}.
    std::pair<int, int> emit(const Ast& a) {
        switch (a.kind) {
            case Ast::chars: {
                const int s = state(), e = state();
                r_.states_[static_cast<size_t>(s)].ranges = a.ranges;
                r_.states_[static_cast<size_t>(s)].out = e;
                return {s, e};
            }
            case Ast::concat: {
                const int s = state();
                int cur = s;
                for (const Ast& k : a.kids) {
                    const auto [ks, ke] = emit(k);
                    eps(cur, ks);
                    cur = ke;
                }
                return {s, cur};
            }
            case Ast::alt: {
                const int s = state(), e = state();
                for (const Ast& k : a.kids) {
                    const auto [ks, ke] = emit(k);
                    eps(s, ks);
                    eps(ke, e);
                }
                return {s, e};
            }
            case Ast::repeat: {
                const int s = state();
                int cur = s;
                for (int i = 0; i < a.min; ++i) {
                    const auto [ks, ke] = emit(a.kids[0]);
                    eps(cur, ks);
                    cur = ke;
                }
                const int e = state();
                if (a.max < 0) {
                    const auto [ks, ke] = emit(a.kids[0]);  // a loop: again and again, or out
                    eps(cur, ks);
                    eps(ke, cur);
                    eps(cur, e);
                } else {
                    for (int i = a.min; i < a.max; ++i) {
                        const auto [ks, ke] = emit(a.kids[0]);
                        eps(cur, e);
                        eps(cur, ks);
                        cur = ke;
                    }
                    eps(cur, e);
                }
                return {s, e};
            }
        }
        return {0, 0};
    }

    void finish(int start, int accept) {
        const size_t n = r_.states_.size();
        r_.accept_ = accept;
        // Live states: those from which the accepting state can be reached.
        std::vector<std::vector<int>> back(n);
        for (size_t i = 0; i < n; ++i) {
            const auto& st = r_.states_[i];
            for (int t : st.eps) back[static_cast<size_t>(t)].push_back(static_cast<int>(i));
            if (st.out >= 0 && !st.ranges.empty()) back[static_cast<size_t>(st.out)].push_back(static_cast<int>(i));  // "[]" never moves
        }
        std::vector<char> live(n, 0);
        std::vector<int> todo{accept};
        live[static_cast<size_t>(accept)] = 1;
        while (!todo.empty()) {
            const int s = todo.back();
            todo.pop_back();
            for (int p : back[static_cast<size_t>(s)])
                if (!live[static_cast<size_t>(p)]) {
                    live[static_cast<size_t>(p)] = 1;
                    todo.push_back(p);
                }
        }
        // Epsilon closures, keeping the live consuming states and the accepting state.
        r_.closure_.assign(n, JsonRegex::Set{});
        for (size_t i = 0; i < n; ++i) {
            std::vector<char> seen(n, 0);
            std::vector<int> stack{static_cast<int>(i)};
            seen[i] = 1;
            while (!stack.empty()) {
                const int s = stack.back();
                stack.pop_back();
                const auto& st = r_.states_[static_cast<size_t>(s)];
                if (live[static_cast<size_t>(s)] && (!st.ranges.empty() || s == accept))
                    r_.closure_[i][static_cast<size_t>(s) / 64] |= uint64_t{1} << (s % 64);
                for (int t : st.eps)
                    if (!seen[static_cast<size_t>(t)]) {
                        seen[static_cast<size_t>(t)] = 1;
                        stack.push_back(t);
                    }
            }
        }
        r_.start_ = r_.closure_[static_cast<size_t>(start)];
        if (JsonRegex::empty(r_.start_)) fail("matches no string");
        lengths();
    }

    // shortest_ / longest_ over the graph of the sets' states: a consuming state moves to each
    // state of its target's closure by one code point; the accepting state ends.
    void lengths() {
        const size_t n = r_.states_.size();
        auto members = [&](size_t i, auto&& visit) {  // the successors of consuming state i
            const auto& st = r_.states_[i];
            if (st.out < 0 || st.ranges.empty()) return;
            const JsonRegex::Set& c = r_.closure_[static_cast<size_t>(st.out)];
            for (size_t w = 0; w < c.size(); ++w)
                for (uint64_t bits = c[w]; bits; bits &= bits - 1) visit(w * 64 + static_cast<size_t>(__builtin_ctzll(bits)));
        };
        constexpr int kUnb = JsonRegex::kUnbounded;
        // Shortest: breadth first from the end along the moves reversed.
        std::vector<std::vector<size_t>> into(n);
        for (size_t i = 0; i < n; ++i) members(i, [&](size_t t) { into[t].push_back(i); });
        r_.shortest_.assign(n, kUnb);
        r_.shortest_[static_cast<size_t>(r_.accept_)] = 0;
        std::vector<size_t> queue{static_cast<size_t>(r_.accept_)};
        for (size_t k = 0; k < queue.size(); ++k)
            for (const size_t p : into[queue[k]])
                if (r_.shortest_[p] == kUnb) {
                    r_.shortest_[p] = r_.shortest_[queue[k]] + 1;
                    queue.push_back(p);
                }
        // Longest: a depth-first walk; a state on a loop (every state here reaches the end)
        // and any that reaches one has no bound.
        r_.longest_.assign(n, -1);
        std::vector<char> mark(n, 0);  // 1 on the walk's path, 2 done
        auto longest = [&](auto&& self, size_t i) -> int {
            if (mark[i] == 2) return r_.longest_[i];
            if (mark[i] == 1) return kUnb;
            mark[i] = 1;
            int best = static_cast<int>(i) == r_.accept_ ? 0 : -1;
            members(i, [&](size_t t) {
                const int l = self(self, t);
                if (l >= 0) best = std::max(best, l >= kUnb ? kUnb : l + 1);
            });
            mark[i] = 2;
            return r_.longest_[i] = best;
        };
        for (size_t i = 0; i < n; ++i) longest(longest, i);
    }

private:
    JsonRegex& r_;
};

JsonRegex JsonRegex::compile(std::string_view pattern) {
    const Ast ast = Parser(decode_utf8(pattern)).parse();
    JsonRegex r;
    RegexBuilder b(r);
    const auto [s, e] = b.emit(ast);
    b.finish(s, e);
    return r;
}

bool JsonRegex::matches(std::string_view utf8) const {
    Set at = start_;
    for (const uint32_t cp : decode_utf8(utf8)) {
        at = next(at, cp);
        if (empty(at)) return false;
    }
    return accepts(at);
}

bool JsonRegex::empty(const Set& s) {
    return std::all_of(s.begin(), s.end(), [](uint64_t w) { return w == 0; });
}

namespace {
bool in_ranges(const Ranges& r, uint32_t lo, uint32_t hi) {
    // The first range ending at or after lo; it must start at or before hi.
    const auto it = std::lower_bound(r.begin(), r.end(), lo, [](const auto& range, uint32_t v) { return range.second < v; });
    return it != r.end() && it->first <= hi;
}
}  // namespace

JsonRegex::Set JsonRegex::next(const Set& s, uint32_t cp) const {
    Set out{};
    for (size_t w = 0; w < s.size(); ++w)
        for (uint64_t bits = s[w]; bits; bits &= bits - 1) {
            const size_t i = w * 64 + static_cast<size_t>(__builtin_ctzll(bits));
            const State& st = states_[i];
            if (st.out >= 0 && in_ranges(st.ranges, cp, cp)) {
                const Set& c = closure_[static_cast<size_t>(st.out)];
                for (size_t k = 0; k < out.size(); ++k) out[k] |= c[k];
            }
        }
    return out;
}

bool JsonRegex::any_in(const Set& s, uint32_t lo, uint32_t hi, int at_least, int at_most) const {
    for (size_t w = 0; w < s.size(); ++w)
        for (uint64_t bits = s[w]; bits; bits &= bits - 1) {
            const size_t i = w * 64 + static_cast<size_t>(__builtin_ctzll(bits));
            const State& st = states_[i];
            if (st.out >= 0 && in_ranges(st.ranges, lo, hi) && fits(closure_[static_cast<size_t>(st.out)], at_least, at_most))
                return true;
        }
    return false;
}

bool JsonRegex::fits(const Set& s, int at_least, int at_most) const {
    for (size_t w = 0; w < s.size(); ++w)
        for (uint64_t bits = s[w]; bits; bits &= bits - 1) {
            const size_t i = w * 64 + static_cast<size_t>(__builtin_ctzll(bits));
            if (shortest_[i] <= at_most && longest_[i] >= at_least) return true;
        }
    return false;
}

}  // namespace diskformer
