#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace df::tokenizer {

VocabSpec VocabSpec::from_gguf(const gguf::File& f) {
    VocabSpec s;
    s.model = f.get<std::string>("tokenizer.ggml.model");
    s.pre = f.get_or<std::string>("tokenizer.ggml.pre", "");
    s.tokens = f.get<std::vector<std::string>>("tokenizer.ggml.tokens");
    s.types = f.get_or<std::vector<int32_t>>("tokenizer.ggml.token_type", {});
    s.merges = f.get_or<std::vector<std::string>>("tokenizer.ggml.merges", {});
    s.bos = f.get_or<int32_t>("tokenizer.ggml.bos_token_id", -1);
    s.eos = f.get_or<int32_t>("tokenizer.ggml.eos_token_id", -1);
    s.pad = f.get_or<int32_t>("tokenizer.ggml.padding_token_id", -1);
    s.add_bos = f.get_or<bool>("tokenizer.ggml.add_bos_token", false);
    s.chat_template = f.get_or<std::string>("tokenizer.chat_template", "");
    return s;
}

}  // namespace df::tokenizer
