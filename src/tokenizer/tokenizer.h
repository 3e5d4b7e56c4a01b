// Byte-level BPE tokenizer loaded from a GGUF vocabulary (tokenizer.ggml.*), giving the same ids
// as llama.cpp's llama_tokenize (add_special = false) and the same bytes as llama_detokenize for
// the "gpt2" model with the "qwen2" and "qwen35" pre-tokenizers (llamacpp.md §3).
//
// encode: special tokens are cut out first (user-defined always, control only with
// parse_special), the rest is split by the pre-tokenizer regex, each word is BPE-merged.
// Invalid UTF-8 is handled as llama.cpp does (stray bytes become U+FFFD); a code point above
// U+10FFFF is an Error, as it is an exception there.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace df::gguf {
class File;
}

namespace df::tokenizer {

// A bad vocabulary, an unsupported tokenizer, an id out of range or text llama.cpp rejects.
struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// tokenizer.ggml.token_type values.
enum class TokenType : int32_t {
    undefined = 0,
    normal = 1,
    unknown = 2,
    control = 3,
    user_defined = 4,
    unused = 5,
    byte = 6,
};

enum class PreTokenizer { qwen2, qwen35 };

// What a GGUF says about its vocabulary, apart from the file so that tests can build one by hand.
struct VocabSpec {
    std::string model = "gpt2";        // tokenizer.ggml.model
    std::string pre;                   // tokenizer.ggml.pre
    std::vector<std::string> tokens;   // spellings, byte-encoded for normal tokens
    std::vector<int32_t> types;        // TokenType per token; empty means all normal
    std::vector<std::string> merges;   // "A B", in rank order
    int32_t bos = -1, eos = -1, pad = -1;  // -1: not set
    bool add_bos = false;
    std::string chat_template;

    // Reads the tokenizer.* keys; throws gguf::Error for a missing key or a wrong type.
    static VocabSpec from_gguf(const gguf::File& f);
};

// Text to encode together with whether control tokens may be recognised in it (see encode).
struct TextSegment {
    std::string_view text;
    bool parse_special = false;
};

class Tokenizer {
public:
    // Builds the tokenizer of a GGUF's vocabulary (a vocabulary-only file works too). Throws
    // Error when the vocabulary is malformed or not a supported byte-level BPE.
    static std::unique_ptr<Tokenizer> from_gguf(const gguf::File& f);
    static std::unique_ptr<Tokenizer> from_spec(VocabSpec spec);
    ~Tokenizer();
    Tokenizer(const Tokenizer&) = delete;
    Tokenizer& operator=(const Tokenizer&) = delete;

    // Token ids of text (no BOS is added; see add_bos()). With parse_special, control tokens
    // written in the text (<|im_start|>) become their ids; without, they are tokenized as plain
    // text. User-defined tokens (<think>, <tool_call>) always become their ids. Thread-safe.
    std::vector<int32_t> encode(std::string_view text, bool parse_special) const;

    // Encodes the concatenation of segments as one text (so words and merges may span segment
    // boundaries, exactly as if the joined string were encoded), but recognises a control token
    // only where it lies wholly inside a parse_special segment. Chat prompts use this so that
    // user content can never inject <|im_start|>.
    std::vector<int32_t> encode(std::span<const TextSegment> segments) const;

    // The bytes of ids. Control and unknown tokens render as their text only with
    // render_special, unused tokens render as nothing (as llama_detokenize with
    // unparse_special = render_special). Throws Error for an id out of range.
    std::string decode(std::span<const int32_t> ids, bool render_special = true) const;

    // The bytes token id renders to with render_special (empty for unused tokens).
    std::string_view piece(int32_t id) const;
    // The token's spelling as stored in the vocabulary (byte-encoded for normal tokens).
    std::string_view text(int32_t id) const;
    TokenType type(int32_t id) const;
    // True for control and unknown tokens: they render only on request.
    bool is_control(int32_t id) const;
    // The id whose vocabulary spelling is token_text (normal tokens byte-encoded: "Ġthe"), or -1.
    int32_t find(std::string_view token_text) const;
    size_t vocab_size() const;

    int32_t bos() const;  // -1 when the vocabulary has none
    int32_t eos() const;
    int32_t pad() const;
    bool add_bos() const;  // whether prompts should start with bos() (never for Qwen)
    // End of generation: eos plus the tokens llama.cpp recognises by text (<|im_end|>,
    // <|endoftext|>, <|fim_pad|>, <|repo_name|>, <|file_sep|>, …).
    bool is_eog(int32_t id) const;
    const std::vector<int32_t>& eog_ids() const;

    PreTokenizer pre_tokenizer() const;
    const std::string& chat_template() const;

private:
    Tokenizer();
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// Turns ids into text as they are generated, one at a time, never emitting part of a UTF-8
// character: bytes of an incomplete sequence wait for the next token. Not thread-safe.
class StreamDecoder {
public:
    // tok must outlive the decoder.
    explicit StreamDecoder(const Tokenizer& tok, bool render_special = false);

    // Adds one token; returns the text that became complete (possibly empty).
    std::string push(int32_t id);
    // Returns whatever is held back (an incomplete sequence, as raw bytes) and clears it.
    std::string flush();
    // Bytes held back now.
    size_t pending() const { return held_.size(); }

private:
    const Tokenizer* tok_;
    bool render_special_;
    std::string held_;
};

}  // namespace df::tokenizer
