// GPT-2's byte-level alphabet: every byte value has a printable code point, so a BPE vocabulary
// stores arbitrary bytes as ordinary text ("Ġ" is the space byte, U+0120).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace df::tokenizer {

// The code point that stands for byte b.
uint32_t byte_to_cpt(uint8_t b);

// The byte a code point stands for, or -1 when it is not in the alphabet.
int cpt_to_byte(uint32_t cpt);

// The vocabulary spelling of raw bytes (each byte as its code point, UTF-8 encoded).
std::string byte_encode(std::string_view bytes);

// The bytes a vocabulary spelling stands for. A code point outside the alphabet (never seen in
// a well-formed vocabulary) is kept as its own UTF-8 bytes rather than dropped.
std::string byte_decode(std::string_view text);

}  // namespace df::tokenizer
