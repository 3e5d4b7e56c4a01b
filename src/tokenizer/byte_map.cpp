#include "tokenizer/byte_map.h"

#include <array>

#include "tokenizer/utf8.h"

namespace df::tokenizer {

namespace {

struct Tables {
    std::array<uint32_t, 256> to_cpt{};
    std::array<int16_t, 512> to_byte{};  // every alphabet code point is below 0x144

    Tables() {
        to_byte.fill(-1);
        // Printable Latin-1 bytes stand for themselves; the other 68 bytes (controls, space,
        // DEL, NBSP, soft hyphen) are given U+0100, U+0101, … in byte order.
        auto printable = [](int b) {
            return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        };
        uint32_t next = 0x100;
        for (int b = 0; b < 256; ++b) {
            to_cpt[b] = printable(b) ? static_cast<uint32_t>(b) : next++;
            to_byte[to_cpt[b]] = static_cast<int16_t>(b);
        }
    }
};

const Tables& tables() {
    static const Tables t;
    return t;
}

}  // namespace

uint32_t byte_to_cpt(uint8_t b) { return tables().to_cpt[b]; }

int cpt_to_byte(uint32_t cpt) { return cpt < 512 ? tables().to_byte[cpt] : -1; }

std::string byte_encode(std::string_view bytes) {
    std::string out;
    out.reserve(bytes.size() * 2);
    for (char c : bytes) utf8_append(out, byte_to_cpt(static_cast<uint8_t>(c)));
    return out;
}

std::string byte_decode(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    const auto* s = reinterpret_cast<const uint8_t*>(text.data());
    size_t i = 0;
    while (i < text.size()) {
        // Vocabulary text is valid UTF-8 of at most 2-byte characters for alphabet code points.
        size_t len = s[i] < 0x80 ? 1 : s[i] < 0xE0 ? 2 : s[i] < 0xF0 ? 3 : 4;
        if (i + len > text.size()) len = text.size() - i;
        uint32_t cpt = s[i];
        if (len == 2) cpt = ((s[i] & 0x1Fu) << 6) | (s[i + 1] & 0x3Fu);
        int b = len <= 2 ? cpt_to_byte(cpt) : -1;
        if (b >= 0) {
            out.push_back(static_cast<char>(b));
        } else {
            out.append(text.substr(i, len));
        }
        i += len;
    }
    return out;
}

}  // namespace df::tokenizer
