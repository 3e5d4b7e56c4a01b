// The OpenAI API's shapes for `diskformer serve`: request bodies in, validated options out, and
// the JSON of answers, stream chunks and errors. No sockets here, so every rule is testable alone.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "diskformer/generate.h"

namespace df::server {

using Json = nlohmann::json;

// A request that cannot be served: the HTTP status and the body OpenAI's clients parse,
// {"error": {"message", "type", "param", "code"}}.
struct ApiError : std::runtime_error {
    int status;
    std::string param, code;
    ApiError(int status, const std::string& message, std::string param = {}, std::string code = {});
    std::string type() const;  // invalid_request_error, authentication_error, ... from the status
    Json body() const;
};

// What a completion request asks for, validated.
struct Request {
    bool chat = true;                               // /v1/chat/completions; false: /v1/completions
    std::vector<diskformer::ChatMessage> messages;  // chat
    std::string prompt;                             // completions: raw text (control tokens parsed)
    diskformer::Thinking thinking = diskformer::Thinking::automatic;
    diskformer::GenerateOptions gen;                // `abort` is the server's to set
    bool stream = false;
    bool include_usage = false;                     // stream_options.include_usage
    // Chat: the functions the model may call (`tools`, unless tool_choice is "none"), each as the
    // chat template's tojson prints it; the answer's <tool_call> blocks become tool_calls.
    std::vector<std::string> tools;
    int n = 1;  // choices: each its own generation (a sampled one with seed + its index)
    // Candidates generated (seed + index) of which the n with the highest log-probability per
    // token are returned, best first; n: no choosing. Not streamed.
    int best_of = 1;
};

// A body that is not a JSON object is an ApiError (400).
Json parse_body(std::string_view text);

// Fields a request leaves out take `defaults` (the server's sampling options); a sampled request
// without a seed gets a fresh one. Unsupported features that would change the answer (schema
// keywords JSON mode cannot enforce) are refused rather than ignored. A
// tool_choice of "required" or a named function forces the call through JSON mode
// (json_before / json_after). Log-probabilities (chat: logprobs +
// top_logprobs, completions: logprobs) set gen.logprobs, up to 20 alternatives;
// response_format json_object / json_schema sets gen.json (and gen.json_schema). `ordered`: the
// same body parsed with its keys in the client's order, from which the tools' JSON and the
// schema are printed (else from body, keys sorted).
Request parse_chat_request(const Json& body, const diskformer::GenerateOptions& defaults,
                           const nlohmann::ordered_json* ordered = nullptr);
Request parse_completion_request(const Json& body, const diskformer::GenerateOptions& defaults);

// "stop" for an end token or stop string, "length" for max_tokens or a full context.
const char* finish_reason(diskformer::StopReason reason);

// JSON text as Python's json.dumps prints it (", " and ": " separators, non-ASCII as is), which
// is what a chat template's tojson gives: the form the model saw in training.
std::string python_json(const nlohmann::ordered_json& v);

// An answer's function calls: Qwen writes each as <tool_call>{"name": …, "arguments": …}
// </tool_call> in its text. Blocks whose JSON does not parse (or has no string "name") stay in
// the content; a last block cut off by the end of the text is parsed too.
struct ParsedToolCall {
    std::string name;
    std::string arguments;  // JSON text (compact), "{}" when the model gave none
};
struct ToolCallText {
    std::string content;  // the text outside the parsed blocks, whitespace trimmed at both ends
    std::vector<ParsedToolCall> calls;
};
ToolCallText parse_tool_calls(std::string_view text);

// The same for a stream: push() returns the answer text that can go out now (everything before
// a "<tool_call>", holding back a tail that may still become one); finish() parses what was held.
class ToolCallStream {
public:
    std::string push(std::string_view text);
    ToolCallText finish();

private:
    std::string held_;
    bool in_call_ = false;
};

// What every answer and chunk of one request repeats.
struct Meta {
    std::string id;     // chatcmpl-… or cmpl-…
    std::string model;  // the served model's name
    int64_t created = 0;
};

Json usage_json(const diskformer::GenerateStats& stats);
// llama.cpp's timing fields (prompt_n, prompt_ms, predicted_n, predicted_per_second, ...).
Json timings_json(const diskformer::GenerateStats& stats);

// A generated token as a choice's log-probabilities report it, with the part of the answer it
// fell in. An end token is not reported (OpenAI's are not).
struct LogprobToken {
    diskformer::TokenLogprobs lp;
    diskformer::Part part;
};
// The bytes a token renders to alone (Model::detokenize of it).
using TokenText = std::function<std::string(int32_t)>;
// OpenAI's "logprobs" of a choice or chunk. Chat: {"content": [{token, logprob, bytes,
// top_logprobs: [{token, logprob, bytes}]}]}, the thinking's tokens under "reasoning_content"
// (an extension, as the message's reasoning_content is). Completions: {tokens, token_logprobs,
// top_logprobs: [{token: logprob}], text_offset}, offsets in bytes from `offset` (advanced past
// these tokens). A token's text is made valid UTF-8 (U+FFFD for bytes of a split character;
// "bytes" keeps them); a ruled-out token's logprob is -9999, as OpenAI writes it.
Json logprobs_json(const Request& req, std::span<const LogprobToken> tokens, const TokenText& text, size_t& offset);

// The whole answer of a request that did not stream; `logprobs` goes into its choice as it is.
Json response_json(const Request& req, const Meta& meta, const diskformer::GenerateResult& result,
                   const Json& logprobs = nullptr);
// n choices (logprobs: one per result, or empty); usage adds up their tokens.
Json response_json(const Request& req, const Meta& meta, std::span<const diskformer::GenerateResult> results,
                   std::span<const Json> logprobs);
// The statistics of n choices of one prompt: the prompt counted once, the answers added up.
diskformer::GenerateStats combined_stats(std::span<const diskformer::GenerateResult> results);

// Stream chunks of choice `index`: the opening one (chat: the assistant role), one per piece of
// text, and the closing one with the finish reason; the usage chunk when asked for (empty
// choices). Choices stream one after another.
Json open_chunk(const Request& req, const Meta& meta, int index = 0);
Json piece_chunk(const Request& req, const Meta& meta, std::string_view text, diskformer::Part part,
                 const Json& logprobs = nullptr, int index = 0);
Json finish_chunk(const Request& req, const Meta& meta, diskformer::StopReason reason, bool tool_calls = false,
                  int index = 0);
// The answer's function calls as one delta (OpenAI's tool_calls with index, id, type, function).
Json tool_calls_chunk(const Request& req, const Meta& meta, const std::vector<ParsedToolCall>& calls, int index = 0);
Json usage_chunk(const Request& req, const Meta& meta, const diskformer::GenerateStats& stats);

// One server-sent event: "data: <json>\n\n".
std::string sse(const Json& event);

}  // namespace df::server
