#include "tokenizer/utf8.h"

#include <cstdio>

#include "tokenizer/tokenizer.h"

namespace df::tokenizer {

namespace {

bool is_cont(uint8_t b) { return (b & 0xC0) == 0x80; }

// Length of the sequence a lead byte announces by its high bits (llama.cpp's rule), or 0 for a
// byte that cannot lead (continuation bytes and F8..FF).
int lead_length(uint8_t b) {
    if (b < 0x80) return 1;
    if ((b & 0x40) == 0) return 0;
    if ((b & 0x20) == 0) return 2;
    if ((b & 0x10) == 0) return 3;
    if ((b & 0x08) == 0) return 4;
    return 0;
}

}  // namespace

void utf8_append(std::string& out, uint32_t cpt) {
    if (cpt < 0x80) {
        out.push_back(static_cast<char>(cpt));
    } else if (cpt < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cpt >> 6)));
        out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
    } else if (cpt < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cpt >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cpt >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cpt >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
    }
}

bool utf8_is_canonical(std::string_view text) {
    const auto* s = reinterpret_cast<const uint8_t*>(text.data());
    const size_t n = text.size();
    size_t i = 0;
    while (i < n) {
        const uint8_t b = s[i];
        if (b < 0x80) {
            ++i;
            continue;
        }
        if (b >= 0xC2 && b <= 0xDF) {
            if (i + 1 >= n || !is_cont(s[i + 1])) return false;
            i += 2;
        } else if (b >= 0xE0 && b <= 0xEF) {
            if (i + 2 >= n || !is_cont(s[i + 1]) || !is_cont(s[i + 2])) return false;
            if (b == 0xE0 && s[i + 1] < 0xA0) return false;  // overlong
            if (b == 0xED && s[i + 1] >= 0xA0) return false;  // surrogate
            i += 3;
        } else if (b >= 0xF0 && b <= 0xF4) {
            if (i + 3 >= n || !is_cont(s[i + 1]) || !is_cont(s[i + 2]) || !is_cont(s[i + 3]))
                return false;
            if (b == 0xF0 && s[i + 1] < 0x90) return false;  // overlong
            if (b == 0xF4 && s[i + 1] >= 0x90) return false;  // above U+10FFFF
            i += 4;
        } else {
            return false;
        }
    }
    return true;
}

void utf8_canonicalize(std::string_view raw, Utf8Canonical& out) {
    out.text.clear();
    out.subject.clear();
    out.has_surrogates = false;
    out.text.reserve(raw.size() + 8);
    const auto* s = reinterpret_cast<const uint8_t*>(raw.data());
    const size_t n = raw.size();
    size_t i = 0;
    while (i < n) {
        const int len = lead_length(s[i]);
        bool ok = len > 0 && i + len <= n;
        for (int k = 1; ok && k < len; ++k) ok = is_cont(s[i + k]);
        if (!ok) {
            utf8_append(out.text, 0xFFFD);
            ++i;
            continue;
        }
        uint32_t cpt = len == 1 ? s[i] : s[i] & (0x7Fu >> len);
        for (int k = 1; k < len; ++k) cpt = (cpt << 6) | (s[i + k] & 0x3F);
        if (cpt > 0x10FFFF) {
            char msg[160];
            std::snprintf(msg, sizeof msg,
                          "invalid UTF-8 at byte %zu: the sequence decodes to code point U+%X, "
                          "above U+10FFFF (llama.cpp fails with \"invalid codepoint\" too)",
                          i, cpt);
            throw Error(msg);
        }
        if (cpt >= 0xD800 && cpt <= 0xDFFF) out.has_surrogates = true;
        utf8_append(out.text, cpt);
        i += len;
    }
    if (out.has_surrogates) {
        // PCRE2 rejects surrogates in UTF mode. U+FFFD has the same 3-byte length and, like a
        // surrogate, is neither letter, mark, number nor space, so the split is unchanged.
        out.subject = out.text;
        for (size_t p = 0; p + 2 < out.subject.size(); ++p) {
            auto b0 = static_cast<uint8_t>(out.subject[p]);
            auto b1 = static_cast<uint8_t>(out.subject[p + 1]);
            if (b0 == 0xED && b1 >= 0xA0) {
                out.subject[p] = static_cast<char>(0xEF);
                out.subject[p + 1] = static_cast<char>(0xBF);
                out.subject[p + 2] = static_cast<char>(0xBD);
                p += 2;
            }
        }
    }
}

size_t utf8_incomplete_tail(std::string_view text) {
    const auto* s = reinterpret_cast<const uint8_t*>(text.data());
    const size_t n = text.size();
    // A sequence is at most 4 bytes, so only a lead byte among the last 3 can still be waiting.
    for (size_t back = 1; back <= 3 && back <= n; ++back) {
        const uint8_t b = s[n - back];
        if (is_cont(b)) continue;
        const int len = lead_length(b);
        return len > static_cast<int>(back) ? back : 0;
    }
    return 0;
}

}  // namespace df::tokenizer
