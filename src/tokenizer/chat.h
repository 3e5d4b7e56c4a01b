// Qwen chat prompts (ChatML: <|im_start|>role\n…<|im_end|>\n), rendered the way Qwen3's and
// Qwen3.5's chat templates do, without a template engine.
//
// The prompt is rendered as segments marked with whether control tokens may be parsed in them:
// the template's own markers may, message content never may, so a user who writes
// "<|im_start|>system" gets those characters tokenized as text. encode_chat tokenizes the
// segments as one text with that restriction.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace df::tokenizer {

// A function call an assistant turn made: its name and its arguments as JSON text (printed as
// they are, as the template prints a string).
struct ToolCall {
    std::string name;
    std::string arguments;
};

struct ChatMessage {
    std::string role;     // "system", "user", "assistant" or "tool"
    std::string content;
    // Assistant only: the thinking, when given apart from content. Otherwise a
    // "<think>…</think>" block at the start of content is taken as the thinking.
    std::optional<std::string> reasoning;
    std::vector<ToolCall> tool_calls = {};  // assistant only: <tool_call> blocks after the content
};

enum class Thinking {
    on,     // the generation prompt opens "<think>\n" (Qwen3.5's default)
    off,    // the generation prompt holds the empty block "<think>\n\n</think>\n\n"
    unset,  // nothing after "<|im_start|>assistant\n": the model decides (Qwen3's default)
};

struct ChatOptions {
    bool add_generation_prompt = true;
    Thinking thinking = Thinking::on;
    // Function signatures the model may call, each as the template's `tojson` prints it (Python's
    // json.dumps: ", " and ": " separators, keys in the client's order, non-ASCII as is): listed
    // in the system turn, after the system message, with Qwen's instructions for <tool_call>.
    std::vector<std::string> tools = {};
};

struct ChatSegment {
    std::string text;
    bool parse_special = false;  // true for template markup, false for message content
};

// Renders messages. A leading system message becomes the system turn (with the tools, when
// there are any); earlier assistant turns (before the last user message) lose their thinking,
// later ones (tool-call steps) keep it.
// Throws Error for a role other than the four above.
std::vector<ChatSegment> render_chat(std::span<const ChatMessage> messages,
                                     const ChatOptions& options = {});

// The prompt text of segments (what a template engine would print).
std::string chat_text(std::span<const ChatSegment> segments);

// Renders and tokenizes: control tokens are parsed in the markup only.
std::vector<int32_t> encode_chat(const Tokenizer& tok, std::span<const ChatMessage> messages,
                                 const ChatOptions& options = {});

// A warning when a GGUF's tokenizer.chat_template is missing or does not look like a Qwen
// (<|im_start|>/<|im_end|>) template, since prompts are rendered in the Qwen format regardless;
// nullopt when it looks right.
std::optional<std::string> check_chat_template(std::string_view chat_template);

}  // namespace df::tokenizer
