// Loading a vocabulary and the Tokenizer's accessors.
#include <algorithm>
#include <array>

#include "gguf/gguf.h"
#include "tokenizer/byte_map.h"
#include "tokenizer/tokenizer_impl.h"

namespace df::tokenizer {

namespace {

// Texts llama.cpp treats as end of generation whatever their type (llama_vocab::load: the
// EOT/EOG lists and the FIM pad/repo/separator tokens), and forces to control.
constexpr std::array<std::string_view, 16> kEogTexts = {
    "<|eot_id|>",    "<|im_end|>",      "<|end|>",          "<end_of_turn>",
    "<|endoftext|>", "<|eom_id|>",      "<EOT>",            "_<EOT>",
    "<|end_of_text|>", "<end_of_utterance>", "<|fim_pad|>", "<fim-pad>",
    "<fim_pad>",     "<|repo_name|>",   "<|file_sep|>",     "<|fim_repo|>",
};

PreTokenizer parse_pre(const std::string& pre) {
    if (pre == "qwen2") return PreTokenizer::qwen2;
    if (pre == "qwen35") return PreTokenizer::qwen35;
    throw Error("tokenizer.ggml.pre is \"" + pre + "\"; supported pre-tokenizers are \"qwen2\" " +
                "(Qwen2/2.5/3) and \"qwen35\" (Qwen3.5)");
}

void check_special_id(const char* key, int32_t id, size_t n) {
    if (id < -1 || id >= static_cast<int64_t>(n))
        throw Error(std::string("tokenizer.ggml.") + key + " = " + std::to_string(id) +
                    " is outside the vocabulary of " + std::to_string(n) + " tokens");
}

}  // namespace

Tokenizer::Tokenizer() : impl_(std::make_unique<Impl>()) {}
Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const gguf::File& f) {
    return from_spec(VocabSpec::from_gguf(f));
}

std::unique_ptr<Tokenizer> Tokenizer::from_spec(VocabSpec spec) {
    if (spec.model != "gpt2")
        throw Error("tokenizer.ggml.model is \"" + spec.model +
                    "\"; only byte-level BPE (\"gpt2\") is supported");
    const size_t n = spec.tokens.size();
    if (n == 0) throw Error("tokenizer.ggml.tokens is empty");
    if (n > static_cast<size_t>(INT32_MAX / 2)) throw Error("tokenizer.ggml.tokens is too large");
    if (!spec.types.empty() && spec.types.size() != n)
        throw Error("tokenizer.ggml.token_type has " + std::to_string(spec.types.size()) +
                    " entries for " + std::to_string(n) + " tokens");
    check_special_id("bos_token_id", spec.bos, n);
    check_special_id("eos_token_id", spec.eos, n);
    check_special_id("padding_token_id", spec.pad, n);

    std::unique_ptr<Tokenizer> tok(new Tokenizer());
    Impl& m = *tok->impl_;
    m.pre = parse_pre(spec.pre);
    m.spec = std::move(spec);
    const auto& tokens = m.spec.tokens;

    m.types.resize(n, TokenType::normal);
    for (size_t i = 0; i < m.spec.types.size(); ++i) {
        const int32_t t = m.spec.types[i];
        m.types[i] = t >= 0 && t <= 6 ? static_cast<TokenType>(t) : TokenType::undefined;
    }
    m.by_text = TokenIndex(tokens);

    m.eog_flag.assign(n, 0);
    for (std::string_view t : kEogTexts) {
        const int32_t id = m.by_text.find(t);
        if (id < 0) continue;
        m.eog_flag[id] = 1;
        m.types[id] = TokenType::control;
    }
    if (m.spec.eos >= 0) m.eog_flag[m.spec.eos] = 1;
    for (size_t i = 0; i < n; ++i)
        if (m.eog_flag[i]) m.eog.push_back(static_cast<int32_t>(i));

    m.pieces.resize(n);
    std::vector<SpecialSplitter::Token> specials;
    for (size_t i = 0; i < n; ++i) {
        const auto id = static_cast<int32_t>(i);
        switch (m.types[i]) {
            case TokenType::normal: m.pieces[i] = byte_decode(tokens[i]); break;
            case TokenType::control:
            case TokenType::unknown:
                m.pieces[i] = tokens[i];
                specials.push_back({id, tokens[i], true});
                break;
            case TokenType::user_defined:
                m.pieces[i] = tokens[i];
                specials.push_back({id, tokens[i], false});
                break;
            default: break;  // unused, byte, undefined: llama.cpp's BPE renders nothing
        }
    }
    m.special = SpecialSplitter(std::move(specials));
    m.splitter = std::make_unique<PreSplitter>(m.pre);
    m.bpe = Bpe(
        [&m](std::string_view t) { return m.by_text.find(t); },
        static_cast<int32_t>(n), m.spec.merges);
    return tok;
}

void Tokenizer::Impl::check_id(int32_t id) const {
    if (id < 0 || static_cast<size_t>(id) >= types.size())
        throw Error("token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                    std::to_string(types.size() - 1) + ")");
}

std::string_view Tokenizer::piece(int32_t id) const {
    impl_->check_id(id);
    return impl_->pieces[id];
}

std::string_view Tokenizer::text(int32_t id) const {
    impl_->check_id(id);
    return impl_->spec.tokens[id];
}

TokenType Tokenizer::type(int32_t id) const {
    impl_->check_id(id);
    return impl_->types[id];
}

bool Tokenizer::is_control(int32_t id) const {
    impl_->check_id(id);
    return impl_->control(id);
}

int32_t Tokenizer::find(std::string_view token_text) const {
    return impl_->by_text.find(token_text);
}

size_t Tokenizer::vocab_size() const { return impl_->types.size(); }
int32_t Tokenizer::bos() const { return impl_->spec.bos; }
int32_t Tokenizer::eos() const { return impl_->spec.eos; }
int32_t Tokenizer::pad() const { return impl_->spec.pad; }
bool Tokenizer::add_bos() const { return impl_->spec.add_bos; }

bool Tokenizer::is_eog(int32_t id) const {
    return id >= 0 && static_cast<size_t>(id) < impl_->eog_flag.size() && impl_->eog_flag[id];
}

const std::vector<int32_t>& Tokenizer::eog_ids() const { return impl_->eog; }
PreTokenizer Tokenizer::pre_tokenizer() const { return impl_->pre; }
const std::string& Tokenizer::chat_template() const { return impl_->spec.chat_template; }

}  // namespace df::tokenizer
