// diskformer text generation over a Session: sampling, streamed UTF-8 text with the reasoning
// (<think>…</think>) reported apart from the answer, stop conditions and timing; and Chat, a
// multi-turn conversation in Qwen's chat format that reuses the cached prefix between turns.
//
//   diskformer::Session s(model);
//   diskformer::Chat chat(s, {.system = "Be brief."});
//   auto r = chat.send("Why is the sky blue?", {.max_tokens = 256},
//                      [](const diskformer::Piece& p) { std::fputs(std::string(p.text).c_str(), stdout); });
//   // r.text, r.reasoning, r.stats.decode_tok_s()
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "diskformer/diskformer.h"

namespace diskformer {

struct GenerateOptions {
    int max_tokens = -1;             // new tokens at most; -1: until an end token or a full context
    std::vector<std::string> stop;   // generation ends before the first of these (never emitted)
    float temperature = 0;           // 0: greedy (argmax), the default
    int top_k = 40;                  // sample among the k most likely tokens (0: all)
    float top_p = 0.95f;             // … then the fewest whose probability reaches p (1: all)
    float min_p = 0.05f;             // … then those at least min_p × the likeliest (0: all)
    float repeat_penalty = 1;        // recent tokens: positive logits ÷ r, negative × r (1: off)
    float presence_penalty = 0;      // recent tokens: logit − this (0: off)
    float frequency_penalty = 0;     // recent tokens: logit − this × how often each occurs (0: off)
    // Added to these tokens' logits before every choice (OpenAI's logit_bias: -100 all but bans a
    // token, +100 all but forces it); each id must be in the vocabulary.
    std::vector<std::pair<int32_t, float>> logit_bias;
    int penalty_window = 64;         // how many recent tokens (prompt included) the penalties see
    uint64_t seed = 0;               // same seed, options and prompt: same tokens
    // Speculative decoding by prompt lookup: when the last tokens occurred earlier in the prompt
    // or the answer, up to this many of the tokens that followed them are verified in one pass
    // (Session::verify). The answer is the same token for token, greedy or sampled (a sampled
    // one with the same seed: each token is drawn from the same logits with the same draw, and
    // a draft token is kept when the draw picks it; in JSON mode the rows are checked as the
    // steps would be); only the time changes. 0: off. While other answers of the same model are
    // being generated (threads, the server's slots) it takes plain steps, which share their
    // passes (continuous batching), and drafts again once it is the only one.
    int draft = 0;
    // Drafting pauses while a verify pass yields fewer tokens per ms than a plain step (timed as
    // generation goes, with probes); false drafts whenever the context offers a guess.
    bool draft_adaptive = true;
    // Speculative decoding with a draft model: a session over a smaller model of the same
    // vocabulary (Qwen3-0.6B beside Qwen3-4B, Qwen3.5-0.8B beside a Qwen3.5-27B; check_drafter
    // says whether one fits) guesses the `draft` tokens by its own greedy decoding instead of
    // prompt lookup, and keeps its cache between calls like any session (a hybrid drafter
    // rewinds through its checkpoints: keep SessionOptions::checkpoints above 0). The answer is
    // still the target's own, token for token. Null, or a drafter whose context cannot
    // hold the prompt: prompt lookup.
    Session* drafter = nullptr;
    // Speculative decoding with a DFlash block drafter attached to this session (it takes
    // precedence over `drafter` and prompt lookup): one drafter pass guesses up to `draft`
    // tokens from the target's hidden states.
    BlockDrafter* block_drafter = nullptr;
    // JSON mode: the answer (after any thinking) is one JSON object and nothing else. Tokens that
    // would break JSON syntax are never chosen (a choice that would is redrawn from the tokens
    // that keep it valid, as llama.cpp's grammars do), control tokens are refused inside it, and
    // generation ends with an end token once the object closes (unless max_tokens or a stop
    // string comes first). Costs the logits on the host each answer token.
    bool json = false;
    // With json: a JSON Schema the object must follow (empty: any object). The subset structured
    // output asks for (pydantic, OpenAI's strict mode): type, nullable, enum / const of any
    // scalar, properties (written in their declared order, optional ones may be left out),
    // required, additionalProperties false, items, minItems, maxItems, minLength, maxLength,
    // minimum / maximum on integers and numbers (exclusive too; a bounded number is written
    // without an exponent), $ref into the schema ($defs, recursion), anyOf /
    // oneOf whose branches allow different types, allOf of one; annotations (title, description,
    // format, …) have no effect. A keyword outside it is an Error, never ignored
    // (check_json_schema says so up front).
    std::string json_schema;
    // With json: literal text the answer starts with before the object and ends with after it
    // (the server forces a function call with "<tool_call>\n" and "\n</tool_call>"). Special
    // tokens count by their text and may appear only in these.
    std::string json_before, json_after;
    // Log-probabilities: at 0 or more, each generated token's log-probability under the model and
    // this many of the most likely tokens with theirs (at most kMaxTopLogprobs); -1: off. They
    // are the log-softmax of the raw logits, before penalties, temperature and truncation, so the
    // same for every sampling option. Costs a copy of the logits per token (from a GPU; with
    // drafts, of every verify row offered).
    int logprobs = -1;
    // Checked between tokens and between prompt chunks; set it from any thread or a signal
    // handler to end generation early (StopReason::aborted). Not cleared by generate().
    const std::atomic<bool>* abort = nullptr;
};

// Throws Error unless `drafter` can draft for `target` (GenerateOptions::drafter): both have a
// tokenizer with the same tokens in the same order and the same end token.
void check_drafter(const Model& target, const Model& drafter);

// Throws Error naming what a JSON Schema uses that GenerateOptions::json_schema cannot enforce.
void check_json_schema(std::string_view schema_json);

// Bytes as valid UTF-8 (RFC 3629): each byte that does not belong to a valid character becomes
// U+FFFD. A token can hold part of a character (and a random or confused model can emit bytes
// that form none); a terminal, JSON and the next prompt need text.
std::string valid_utf8(std::string_view bytes);

inline constexpr int kMaxTopLogprobs = 20;

struct TokenLogprob {
    int32_t token = 0;
    float logprob = 0;  // natural log; -inf for a token the model rules out
};
// A generated token's log-probability and, when asked for, the likeliest tokens at its position
// (best first; ties by lower id), which may or may not include it.
struct TokenLogprobs {
    TokenLogprob chosen;
    std::vector<TokenLogprob> top;
};

// Which part of an answer a piece of text belongs to: the model's thinking, or the answer.
enum class Part { reasoning, answer };

enum class StopReason { end_token, stop_string, max_tokens, context_full, aborted };
const char* to_string(StopReason reason);

struct Piece {
    std::string_view text;  // whole UTF-8 characters; may be empty (held back, or a tag/control token)
    Part part;              // the part `text` belongs to
    int32_t token;          // the token generated just now (each is reported once, in order)
    bool last;              // generation ends with this piece
    const TokenLogprobs* logprobs = nullptr;  // the token's when GenerateOptions::logprobs >= 0; valid during the call
};
// Called once per generated token, on the generating thread; `text` is valid during the call.
using StreamCallback = std::function<void(const Piece&)>;

struct GenerateStats {
    int64_t prompt_tokens = 0;     // tokens in the prompt
    int64_t reused_tokens = 0;     // of those, taken from the session's cache (not evaluated)
    int64_t generated_tokens = 0;  // new tokens, an end token included
    double prefill_ms = 0;         // evaluating the prompt tokens that were not reused
    double ttft_ms = 0;            // time to first token: from the call until it was chosen
    double decode_ms = 0;          // from the first new token to the last
    int64_t drafted_tokens = 0;    // speculative decoding: tokens proposed
    int64_t accepted_tokens = 0;   // ... and kept (each saved a forward pass)
    // Prompt tokens evaluated per second (0 when all were reused).
    double prefill_tok_s() const {
        return prefill_ms > 0 ? (prompt_tokens - reused_tokens) * 1e3 / prefill_ms : 0;
    }
    // Tokens per second after the first (each needs one forward pass).
    double decode_tok_s() const {
        return decode_ms > 0 && generated_tokens > 1 ? (generated_tokens - 1) * 1e3 / decode_ms : 0;
    }
};

struct GenerateResult {
    std::string text;             // the answer: what was streamed as Part::answer
    std::string reasoning;        // the thinking (Part::reasoning), without the tags
    std::vector<int32_t> tokens;  // every generated token in order, an end token included
    std::vector<TokenLogprobs> logprobs;  // one per token when GenerateOptions::logprobs >= 0
    StopReason stop = StopReason::end_token;
    GenerateStats stats;
};

// Makes the session hold `prompt` (Session::set_prompt: the cached prefix is reused; a hybrid
// model keeps checkpoints before the prompt's last token and after its last <|im_start|>), then
// generates until an end-of-generation token, a stop string, max_tokens, a full context or
// abort, streaming each token to on_piece. The prompt is in reasoning when it ends inside an
// open <think> (as a thinking chat prompt does); <think>/</think> tokens switch parts and are
// not emitted, nor are the newlines next to them. The session holds the prompt and every
// generated token but the last afterwards. Throws Error for bad options, a model without a
// tokenizer, or a prompt longer than the context.
GenerateResult generate(Session& session, std::span<const int32_t> prompt,
                        const GenerateOptions& options = {}, const StreamCallback& on_piece = {});

enum class Thinking {
    automatic,  // the model's template default: qwen35 opens <think>, qwen3 lets the model decide
    on,         // the answer starts with the model thinking
    off,        // an empty <think></think> block: answer directly
};

struct ChatOptions {
    std::string system;  // system prompt; empty: none
    Thinking thinking = Thinking::automatic;
    // true: earlier turns stay in the context exactly as generated (thinking included), so each
    // turn extends the cache and nothing is evaluated twice, on every model. false: the history
    // is re-rendered as Qwen's template does, without earlier thinking; the prompt then departs
    // from the cache at the last answer, where attention-only models rewind and hybrid (qwen35)
    // models resume from the checkpoint generate() kept there (Session::checkpoint).
    bool keep_reasoning = true;
};

// A function call an assistant turn made (OpenAI's tool_calls): the function's name and its
// arguments as JSON text.
struct ToolCall {
    std::string name;
    std::string arguments;
};

struct ChatMessage {
    std::string role;       // "system", "user", "assistant" or "tool" (a function's result)
    std::string content;
    std::string reasoning;  // assistant thinking, when there was any
    std::vector<ToolCall> tool_calls = {};  // assistant: the calls it made, after its content
};

// The tokens of a whole conversation in Qwen's chat format (as the model's own template renders
// it), ending with the assistant's turn opened (add_generation_prompt) in the given thinking
// mode. Roles: "system" (first message only), "user", "assistant", "tool". An assistant
// message's reasoning (or a "<think>…</think>" block at the start of its content) is dropped
// before the last user message, as Qwen's template does. Message text is never parsed for
// control tokens. Tools: function signatures the model may call, each as JSON text the way the
// template's `tojson` prints it (", " and ": " separators), listed in the system turn with
// Qwen's instructions; the model then answers calls as <tool_call>{"name": …, "arguments": …}
// </tool_call> blocks in its text. Throws Error for an unknown role or a model without Qwen's
// chat tokens.
std::vector<int32_t> chat_prompt(const Model& model, std::span<const ChatMessage> messages,
                                 Thinking thinking = Thinking::automatic, bool add_generation_prompt = true,
                                 std::span<const std::string> tools = {});

class Chat {
public:
    // The session must outlive the chat; the chat owns what it caches from then on.
    explicit Chat(Session& session, ChatOptions options = {});

    // Adds a user turn, generates the assistant's answer and records both. User text is never
    // parsed for control tokens. A turn aborted before its first token leaves no trace.
    // Throws Error when the conversation no longer fits the context (reset() to go on).
    GenerateResult send(std::string_view user_text, const GenerateOptions& options = {},
                        const StreamCallback& on_piece = {});

    // Forgets the conversation (the system prompt stays; its cached tokens are reused).
    void reset();
    void set_thinking(Thinking thinking);
    Thinking thinking() const { return options_.thinking; }
    const std::vector<ChatMessage>& messages() const { return messages_; }
    // Why the model's own chat template may not match the Qwen format used here; empty if fine.
    const std::string& template_warning() const { return template_warning_; }
    // The tokens the next send(user_text) would feed (for inspection and tests).
    std::vector<int32_t> prompt_for(std::string_view user_text) const;

private:
    Session* session_;
    ChatOptions options_;
    std::vector<ChatMessage> messages_;
    std::vector<int32_t> history_;  // keep_reasoning: the conversation's exact tokens so far
    uint64_t turn_ = 0;
    std::string template_warning_;
};

}  // namespace diskformer
