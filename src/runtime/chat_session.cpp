// Chat: Qwen chat prompts over one Session, keeping the cache a prefix of the next prompt.
#include <optional>
#include <string>

#include "diskformer/generate.h"
#include "runtime/model_impl.h"
#include "tokenizer/chat.h"

namespace diskformer {
namespace {

namespace tk = df::tokenizer;

const tk::Tokenizer& tokenizer_of(const Session& s) {
    const auto& mi = s.model().impl();
    if (!mi.tokenizer) throw Error("this model has no usable tokenizer: " + mi.tokenizer_error);
    return *mi.tokenizer;
}

tk::ChatOptions render_options(const Model& m, Thinking t) {
    tk::ChatOptions o;
    switch (t) {
        case Thinking::on: o.thinking = tk::Thinking::on; break;
        case Thinking::off: o.thinking = tk::Thinking::off; break;
        case Thinking::automatic:
            // Qwen3.5's template opens the think block; Qwen3's leaves it to the model.
            o.thinking = m.info().arch == "qwen35" ? tk::Thinking::on : tk::Thinking::unset;
            break;
    }
    return o;
}

std::vector<int32_t> encode(const tk::Tokenizer& tok, std::vector<tk::ChatMessage> msgs, const tk::ChatOptions& o) {
    try {
        return tk::encode_chat(tok, msgs, o);
    } catch (const std::exception& e) {
        throw Error(std::string("chat: ") + e.what());
    }
}

void require_chat_tokens(const tk::Tokenizer& tok) {
    if (tok.find("<|im_start|>") < 0 || tok.find("<|im_end|>") < 0)
        throw Error("the model's vocabulary has no <|im_start|>/<|im_end|> tokens: chat needs Qwen's chat format");
}

}  // namespace

std::vector<int32_t> chat_prompt(const Model& model, std::span<const ChatMessage> messages, Thinking thinking,
                                 bool add_generation_prompt, std::span<const std::string> tools) {
    const auto& mi = model.impl();
    if (!mi.tokenizer) throw Error("this model has no usable tokenizer: " + mi.tokenizer_error);
    require_chat_tokens(*mi.tokenizer);
    tk::ChatOptions o = render_options(model, thinking);
    o.add_generation_prompt = add_generation_prompt;
    o.tools.assign(tools.begin(), tools.end());
    std::vector<tk::ChatMessage> msgs;
    msgs.reserve(messages.size());
    for (const auto& m : messages) {
        msgs.push_back({m.role, m.content, m.reasoning.empty() ? std::nullopt : std::optional<std::string>(m.reasoning)});
        for (const auto& c : m.tool_calls) msgs.back().tool_calls.push_back({c.name, c.arguments});
    }
    return encode(*mi.tokenizer, std::move(msgs), o);
}

Chat::Chat(Session& session, ChatOptions options) : session_(&session), options_(std::move(options)) {
    const auto& tok = tokenizer_of(session);
    require_chat_tokens(tok);
    if (auto w = tk::check_chat_template(tok.chat_template())) template_warning_ = *w;
    reset();
}

void Chat::reset() {
    messages_.clear();
    history_.clear();
    turn_ = 0;
    if (!options_.system.empty()) {
        tk::ChatOptions o;
        o.add_generation_prompt = false;
        history_ = encode(tokenizer_of(*session_), {{"system", options_.system, std::nullopt}}, o);
    }
}

void Chat::set_thinking(Thinking thinking) { options_.thinking = thinking; }

std::vector<int32_t> Chat::prompt_for(std::string_view user_text) const {
    const auto& tok = tokenizer_of(*session_);
    const tk::ChatOptions o = render_options(session_->model(), options_.thinking);
    tk::ChatMessage user{"user", std::string(user_text), std::nullopt};
    if (options_.keep_reasoning) {
        // The conversation's exact tokens, then this turn. Turns meet at "<|im_end|>\n" before
        // "<|im_start|>", where the tokenizer splits anyway, so this equals encoding it whole.
        std::vector<int32_t> prompt = history_;
        const auto turn = encode(tok, {user}, o);
        prompt.insert(prompt.end(), turn.begin(), turn.end());
        return prompt;
    }
    std::vector<tk::ChatMessage> msgs;
    if (!options_.system.empty()) msgs.push_back({"system", options_.system, std::nullopt});
    for (const auto& m : messages_) msgs.push_back({m.role, m.content, m.reasoning});
    msgs.push_back(std::move(user));
    return encode(tok, std::move(msgs), o);
}

GenerateResult Chat::send(std::string_view user_text, const GenerateOptions& options, const StreamCallback& on_piece) {
    const auto& tok = tokenizer_of(*session_);
    const std::vector<int32_t> prompt = prompt_for(user_text);
    GenerateOptions o = options;
    o.seed = options.seed ^ (turn_ * 0x9e3779b97f4a7c15ull);  // turns draw different streams; turn 0 = seed
    GenerateResult r = generate(*session_, prompt, o, on_piece);
    if (r.tokens.empty()) return r;
    ++turn_;
    messages_.push_back({"user", std::string(user_text), {}});
    messages_.push_back({"assistant", r.text, r.reasoning});
    if (options_.keep_reasoning) {
        // Exactly what the cache holds (plus the last token), closed as the template closes a
        // turn, so that the next prompt extends the cache.
        history_ = prompt;
        history_.insert(history_.end(), r.tokens.begin(), r.tokens.end());
        const int32_t im_end = tok.find("<|im_end|>");
        if (history_.back() != im_end) history_.push_back(im_end);
        const auto nl = tok.encode("\n", false);
        history_.insert(history_.end(), nl.begin(), nl.end());
    }
    return r;
}

}  // namespace diskformer
