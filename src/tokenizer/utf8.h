// UTF-8 helpers with llama.cpp's exact leniency, so invalid input tokenizes as it does there.
//
// llama.cpp decodes a lead byte by its high bits only: it accepts overlong forms (C0 AF is '/')
// and surrogates (ED A0 80 is U+D800), turns every byte that does not start a complete sequence
// into U+FFFD and moves on by one byte, and fails on a code point above U+10FFFF (F4 90 80 80)
// when it re-encodes the text. The tokenizer works on that re-encoded ("canonical") text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace df::tokenizer {

// Appends the UTF-8 encoding of cpt (<= 0x10FFFF; surrogates are encoded like any other value).
void utf8_append(std::string& out, uint32_t cpt);

// True when text is UTF-8 that llama.cpp's decoder would re-encode unchanged: no overlong forms,
// no surrogates, nothing above U+10FFFF, no truncated or stray bytes.
bool utf8_is_canonical(std::string_view text);

struct Utf8Canonical {
    std::string text;     // what llama.cpp tokenizes: re-encoded code points
    std::string subject;  // text with surrogates replaced by U+FFFD (same length), for PCRE2
    bool has_surrogates = false;
};

// Decodes raw as llama.cpp does and re-encodes it into out. Throws tokenizer::Error naming the
// byte offset when a sequence decodes to a code point above U+10FFFF.
void utf8_canonicalize(std::string_view raw, Utf8Canonical& out);

// Number of bytes at the end of text that begin a multi-byte sequence still missing its last
// byte(s); 0 when text ends on a character boundary or on bytes that can never become valid.
size_t utf8_incomplete_tail(std::string_view text);

}  // namespace df::tokenizer
