#include "tokenizer/pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>
#include <string>

#include "tokenizer/tokenizer.h"

namespace df::tokenizer {

namespace {

// llama.cpp's whitespace set (unicode_set_whitespace), as a character-class body.
constexpr const char* kSpace =
    "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
    "\\x{202F}\\x{205F}\\x{3000}";

std::string pattern_for(PreTokenizer kind) {
    const std::string s = kSpace;
    // qwen35 lets letter runs absorb combining marks, and keeps marks out of punctuation runs.
    const std::string letters = kind == PreTokenizer::qwen35 ? "[\\p{L}\\p{M}]+" : "\\p{L}+";
    const std::string mark = kind == PreTokenizer::qwen35 ? "\\p{M}" : "";
    return "'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]"
           "|[^\\r\\n\\p{L}\\p{N}]?" + letters +
           "|\\p{N}"
           "| ?[^" + s + "\\p{L}" + mark + "\\p{N}]+[\\r\\n]*"
           "|[" + s + "]*[\\r\\n]+"
           "|[" + s + "]+(?![^" + s + "])"
           "|[" + s + "]+";
}

pcre2_code* as_code(void* p) { return static_cast<pcre2_code*>(p); }

}  // namespace

PreSplitter::PreSplitter(PreTokenizer kind) {
    const std::string pat = pattern_for(kind);
    int err = 0;
    PCRE2_SIZE err_off = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat.data()), pat.size(),
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &err_off,
                                     nullptr);
    if (!code) {
        PCRE2_UCHAR buf[256];
        pcre2_get_error_message(err, buf, sizeof buf);
        throw Error("pre-tokenizer regex failed to compile at offset " + std::to_string(err_off) +
                    ": " + reinterpret_cast<const char*>(buf));
    }
    code_ = code;
    // JIT is an optimisation only: without it (unsupported CPU, hardened kernel) the
    // interpreter gives the same matches.
    jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
}

PreSplitter::~PreSplitter() { pcre2_code_free(as_code(code_)); }

std::string PreSplitter::unicode_version() {
    char buf[64] = {};
    pcre2_config(PCRE2_CONFIG_UNICODE_VERSION, buf);
    return buf;
}

void PreSplitter::split(std::string_view subject, std::vector<size_t>& ends) const {
    if (subject.empty()) return;
    pcre2_code* code = as_code(code_);
    // Match data per call keeps split() thread-safe; it is a small allocation per fragment.
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
        pcre2_match_data_create_from_pattern(code, nullptr), &pcre2_match_data_free);
    if (!md) throw Error("out of memory creating PCRE2 match data");
    const auto* subj = reinterpret_cast<PCRE2_SPTR>(subject.data());
    const size_t n = subject.size();
    size_t pos = 0;
    while (pos < n) {
        int rc = jit_ ? pcre2_jit_match(code, subj, n, pos, 0, md.get(), nullptr)
                      : pcre2_match(code, subj, n, pos, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) {
            ends.push_back(n);  // cannot happen (every code point starts some alternative)
            return;
        }
        if (rc < 0) {
            PCRE2_UCHAR buf[256];
            pcre2_get_error_message(rc, buf, sizeof buf);
            throw Error(std::string("pre-tokenizer regex failed: ") +
                        reinterpret_cast<const char*>(buf));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
        size_t begin = ov[0], end = ov[1];
        if (begin > pos) ends.push_back(begin);  // unmatched gap: keep it as one word
        if (end == begin) {                      // empty match: step over one code point
            end = begin + 1;
            while (end < n && (static_cast<uint8_t>(subject[end]) & 0xC0) == 0x80) ++end;
        }
        ends.push_back(end);
        pos = end;
    }
}

}  // namespace df::tokenizer
