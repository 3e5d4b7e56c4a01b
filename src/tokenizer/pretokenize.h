// The Qwen pre-tokenizers: split text into the words BPE merges within, by the regexes of
// llamacpp.md §3 run on PCRE2 (UTF + UCP, JIT-compiled when the library supports it).
//
// llama.cpp runs hand-written matchers for these regexes over its own Unicode tables; the regex
// here is the same language with one change: \s is spelled out as llama.cpp's whitespace set
// (U+0009–000D, 0020, 0085, 00A0, 1680, 2000–200A, 2028, 2029, 202F, 205F, 3000), so the splits
// agree wherever PCRE2's Unicode tables agree with llama.cpp's. They differ only by version:
// PCRE2 10.42 (Debian 12) knows Unicode 14, llama.cpp's tables are 15.1, so letters added since
// (CJK extensions H and I, Kawi, Nag Mundari, …) are "other" here and letters there.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace df::tokenizer {

class PreSplitter {
public:
    explicit PreSplitter(PreTokenizer kind);
    ~PreSplitter();
    PreSplitter(const PreSplitter&) = delete;
    PreSplitter& operator=(const PreSplitter&) = delete;

    // Appends to ends the end offset of each word of subject, in order; the words cover subject
    // exactly. subject must be valid UTF-8 (not checked again). Thread-safe.
    void split(std::string_view subject, std::vector<size_t>& ends) const;

    bool jit() const { return jit_; }
    // The Unicode version of the linked PCRE2's character tables ("14.0.0").
    static std::string unicode_version();

private:
    void* code_ = nullptr;  // pcre2_code_8*, kept out of the header so PCRE2 stays private
    bool jit_ = false;
};

}  // namespace df::tokenizer
