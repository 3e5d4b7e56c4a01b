// The Qwen pre-tokenizers: split text into the words BPE merges within, by the regexes of
// llamacpp.md §3 run on PCRE2 (UTF + UCP, JIT-compiled when the library supports it).
//
// llama.cpp runs hand-written matchers for these regexes over its own Unicode tables; the regex
// here is the same language with one change: \s is spelled out as llama.cpp's whitespace set
// (which includes U+0085 and, unlike PCRE2's \s, nothing else), so the splits agree wherever
// PCRE2's Unicode tables agree with llama.cpp's.
#pragma once

#include <cstddef>
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

private:
    void* code_ = nullptr;  // pcre2_code_8*, kept out of the header so PCRE2 stays private
    bool jit_ = false;
};

}  // namespace df::tokenizer
