// Ids to bytes, whole or streamed.
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace df::tokenizer {

std::string Tokenizer::decode(std::span<const int32_t> ids, bool render_special) const {
    std::string out;
    for (int32_t id : ids) {
        impl_->check_id(id);
        if (!render_special && impl_->control(id)) continue;
        out.append(impl_->pieces[id]);
    }
    return out;
}

StreamDecoder::StreamDecoder(const Tokenizer& tok, bool render_special)
    : tok_(&tok), render_special_(render_special) {}

std::string StreamDecoder::push(int32_t id) {
    if (!render_special_ && tok_->is_control(id)) return {};
    held_.append(tok_->piece(id));
    const size_t keep = utf8_incomplete_tail(held_);
    std::string out = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return out;
}

std::string StreamDecoder::flush() {
    std::string out;
    out.swap(held_);
    return out;
}

}  // namespace df::tokenizer
