// Tokenizer internals shared by its .cpp files (load, encode, decode).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/special_split.h"
#include "tokenizer/token_index.h"
#include "tokenizer/tokenizer.h"

namespace df::tokenizer {

struct Tokenizer::Impl {
    VocabSpec spec;                   // owns the spellings every string_view below points into
    PreTokenizer pre = PreTokenizer::qwen2;
    std::vector<TokenType> types;     // after llama.cpp's fix-ups (EOG texts become control)
    std::vector<std::string> pieces;  // rendered bytes per id
    TokenIndex by_text;
    std::vector<int32_t> eog;
    std::vector<uint8_t> eog_flag;
    std::unique_ptr<PreSplitter> splitter;
    SpecialSplitter special;
    Bpe bpe;

    void check_id(int32_t id) const;
    bool control(int32_t id) const {
        return types[id] == TokenType::control || types[id] == TokenType::unknown;
    }
    std::vector<int32_t> encode(std::string_view text,
                                const SpecialSplitter::ControlAllowed& allowed) const;

    struct Scratch;  // per-call buffers and word cache (encode.cpp)
    void encode_raw(std::string_view raw, Scratch& sc, std::vector<int32_t>& out) const;
};

}  // namespace df::tokenizer
