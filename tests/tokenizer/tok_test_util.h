// Shared helpers for the tokenizer tests: golden paths and tokenizers loaded once per process.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/golden.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace df::test {

inline std::filesystem::path tokenizer_golden(const std::string& name) {
    return golden_dir() / "tokenizer" / name;
}

// The tokenizer of a vocabulary file in golden/tokenizer, or nullptr when the file is absent
// (the compact copy lacks qwen3-vocab.gguf). Loaded once; shared by every test.
inline const tokenizer::Tokenizer* golden_tokenizer(const std::string& vocab_file) {
    static std::mutex mu;
    static std::map<std::string, std::unique_ptr<tokenizer::Tokenizer>> cache;
    std::lock_guard lock(mu);
    auto it = cache.find(vocab_file);
    if (it == cache.end()) {
        std::unique_ptr<tokenizer::Tokenizer> tok;
        const auto path = tokenizer_golden(vocab_file);
        if (std::filesystem::exists(path)) {
            auto file = gguf::File::open(path.string());
            tok = tokenizer::Tokenizer::from_gguf(*file);
        }
        it = cache.emplace(vocab_file, std::move(tok)).first;
    }
    return it->second.get();
}

inline std::string from_hex(const std::string& hex) {
    std::string out;
    for (size_t i = 0; i + 1 < hex.size(); i += 2)
        out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
    return out;
}

inline std::string to_hex(const std::string& bytes) {
    static const char* d = "0123456789abcdef";
    std::string out;
    for (unsigned char c : bytes) {
        out.push_back(d[c >> 4]);
        out.push_back(d[c & 15]);
    }
    return out;
}

}  // namespace df::test
