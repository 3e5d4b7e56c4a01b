// UTF-8 as RFC 3629 has it (no overlongs, surrogates or values past U+10FFFF), a lead byte at a
// time: shared by the text a user sees (text_stream) and JSON mode's strings (json_prefix).
#pragma once

#include <string_view>

namespace diskformer {

inline constexpr std::string_view kUtf8Replacement = "\xEF\xBF\xBD";  // U+FFFD, for bytes that are not text

// Whether c may start a character; if so, how many continuation bytes follow it and the range
// the first of them must lie in (later ones: 0x80..0xBF). ASCII has none.
inline bool utf8_lead(unsigned c, unsigned& more, unsigned& lo, unsigned& hi) {
    lo = 0x80;
    hi = 0xBF;
    if (c < 0x80) more = 0;
    else if (c >= 0xC2 && c <= 0xDF) more = 1;
    else if (c >= 0xE0 && c <= 0xEF) more = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) more = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else return false;
    return true;
}

}  // namespace diskformer
