#include "tokenizer/chat.h"

namespace df::tokenizer {

namespace {

std::string_view lstrip_nl(std::string_view s) {
    while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
    return s;
}

std::string_view rstrip_nl(std::string_view s) {
    while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
    return s;
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) {
    return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

class Builder {
public:
    void markup(std::string_view s) { add(s, true); }
    void content(std::string_view s) { add(s, false); }
    std::vector<ChatSegment> take() { return std::move(segs_); }

private:
    void add(std::string_view s, bool special) {
        if (s.empty()) return;
        if (!segs_.empty() && segs_.back().parse_special == special) {
            segs_.back().text.append(s);
        } else {
            segs_.push_back({std::string(s), special});
        }
    }
    std::vector<ChatSegment> segs_;
};

// The index of the last user message that is a real query (not a wrapped tool response);
// thinking is kept only for assistant turns after it, as in Qwen3's template.
size_t last_query_index(std::span<const ChatMessage> msgs) {
    for (size_t i = msgs.size(); i-- > 0;) {
        const auto& m = msgs[i];
        const bool tool_result = starts_with(m.content, "<tool_response>") &&
                                 ends_with(m.content, "</tool_response>");
        if (m.role == "user" && !tool_result) return i;
    }
    return msgs.empty() ? 0 : msgs.size() - 1;
}

void render_assistant(Builder& b, const ChatMessage& m, bool keep_thinking, bool is_last) {
    std::string_view content = m.content;
    std::string_view reasoning;
    if (m.reasoning) {
        reasoning = *m.reasoning;
    } else if (const size_t close = content.find("</think>"); close != std::string_view::npos) {
        // Thinking is what precedes the first </think> (after any <think>); the answer is
        // what follows the last one.
        std::string_view before = rstrip_nl(content.substr(0, close));
        if (const size_t open = before.rfind("<think>"); open != std::string_view::npos)
            before.remove_prefix(open + 7);
        reasoning = lstrip_nl(before);
        content = lstrip_nl(content.substr(content.rfind("</think>") + 8));
    }
    if (keep_thinking && (is_last || !reasoning.empty())) {
        b.markup("<|im_start|>assistant\n<think>\n");
        b.content(lstrip_nl(rstrip_nl(reasoning)));
        b.markup("\n</think>\n\n");
        b.content(lstrip_nl(content));
    } else {
        b.markup("<|im_start|>assistant\n");
        b.content(content);
    }
    for (size_t k = 0; k < m.tool_calls.size(); ++k) {
        if (k > 0 || !content.empty()) b.markup("\n");
        b.markup("<tool_call>\n{\"name\": \"");
        b.content(m.tool_calls[k].name);
        b.markup("\", \"arguments\": ");
        b.content(m.tool_calls[k].arguments);
        b.markup("}\n</tool_call>");
    }
    b.markup("<|im_end|>\n");
}

// Qwen3's system turn with tools: the system message, the signatures, how to call.
void render_tools(Builder& b, const std::vector<std::string>& tools, const ChatMessage* system) {
    b.markup("<|im_start|>system\n");
    if (system) {
        b.content(system->content);
        b.markup("\n\n");
    }
    b.markup("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
             "You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
    for (const auto& t : tools) {
        b.markup("\n");
        b.content(t);
    }
    b.markup("\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
             "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
             "<args-json-object>}\n</tool_call><|im_end|>\n");
}

}  // namespace

std::vector<ChatSegment> render_chat(std::span<const ChatMessage> msgs, const ChatOptions& opt) {
    Builder b;
    const size_t last_query = last_query_index(msgs);
    size_t first = 0;  // with tools, a leading system message is part of the tools' turn
    if (!opt.tools.empty()) {
        const bool system = !msgs.empty() && msgs[0].role == "system";
        render_tools(b, opt.tools, system ? &msgs[0] : nullptr);
        first = system ? 1 : 0;
    }
    for (size_t i = first; i < msgs.size(); ++i) {
        const ChatMessage& m = msgs[i];
        if (m.role == "system" || m.role == "user") {
            b.markup("<|im_start|>" + m.role + "\n");
            b.content(m.content);
            b.markup("<|im_end|>\n");
        } else if (m.role == "assistant") {
            render_assistant(b, m, i > last_query, i + 1 == msgs.size());
        } else if (m.role == "tool") {
            // Consecutive tool results share one user turn.
            if (i == 0 || msgs[i - 1].role != "tool") b.markup("<|im_start|>user");
            b.markup("\n<tool_response>\n");
            b.content(m.content);
            b.markup("\n</tool_response>");
            if (i + 1 == msgs.size() || msgs[i + 1].role != "tool") b.markup("<|im_end|>\n");
        } else {
            throw Error("chat message " + std::to_string(i) + " has role \"" + m.role +
                        "\"; expected system, user, assistant or tool");
        }
    }
    if (opt.add_generation_prompt) {
        b.markup("<|im_start|>assistant\n");
        if (opt.thinking == Thinking::on) b.markup("<think>\n");
        if (opt.thinking == Thinking::off) b.markup("<think>\n\n</think>\n\n");
    }
    return b.take();
}

std::string chat_text(std::span<const ChatSegment> segments) {
    std::string out;
    for (const auto& s : segments) out.append(s.text);
    return out;
}

std::vector<int32_t> encode_chat(const Tokenizer& tok, std::span<const ChatMessage> messages,
                                 const ChatOptions& options) {
    const auto segs = render_chat(messages, options);
    std::vector<TextSegment> parts;
    parts.reserve(segs.size());
    for (const auto& s : segs) parts.push_back({s.text, s.parse_special});
    return tok.encode(parts);
}

std::optional<std::string> check_chat_template(std::string_view tmpl) {
    if (tmpl.empty())
        return "the model has no tokenizer.chat_template; prompts use the Qwen (ChatML) format";
    if (tmpl.find("<|im_start|>") == std::string_view::npos ||
        tmpl.find("<|im_end|>") == std::string_view::npos)
        return "tokenizer.chat_template does not look like a Qwen template (no <|im_start|> / "
               "<|im_end|>); prompts use the Qwen (ChatML) format anyway and may not be what "
               "this model was trained on";
    return std::nullopt;
}

}  // namespace df::tokenizer
