// valid_utf8 (diskformer/generate.h): alone in its file so that the server's request fuzzer can
// link it without the text stream's tokenizer.
#include <string>
#include <string_view>

#include "diskformer/generate.h"
#include "runtime/utf8_lead.h"

namespace diskformer {
namespace {

// Length of the valid UTF-8 character at s[i] (RFC 3629: no overlongs, surrogates or values
// past U+10FFFF), or 0.
size_t valid_char_len(std::string_view s, size_t i) {
    const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
    unsigned more = 0, lo = 0, hi = 0;
    if (!utf8_lead(b(0), more, lo, hi)) return 0;
    if (more == 0) return 1;
    const size_t n = more + 1;
    if (i + n > s.size() || b(1) < lo || b(1) > hi) return 0;
    for (size_t k = 2; k < n; ++k)
        if ((b(k) & 0xC0) != 0x80) return 0;
    return n;
}

}  // namespace

std::string valid_utf8(std::string_view bytes) {
    std::string out;
    for (size_t i = 0; i < bytes.size();) {
        if (const size_t n = valid_char_len(bytes, i)) {
            out.append(bytes, i, n);
            i += n;
        } else {
            out.append(kUtf8Replacement);
            ++i;
        }
    }
    return out;
}

}  // namespace diskformer
