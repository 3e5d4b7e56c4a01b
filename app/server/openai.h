// The OpenAI API's shapes for `diskformer serve`: request bodies in, validated options out, and
// the JSON of answers, stream chunks and errors. No sockets here, so every rule is testable alone.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
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
};

// A body that is not a JSON object is an ApiError (400).
Json parse_body(std::string_view text);

// Fields a request leaves out take `defaults` (the server's sampling options); a sampled request
// without a seed gets a fresh one. Unsupported features that would change the answer (n > 1,
// logprobs, tools, JSON mode, frequency_penalty) are refused rather than ignored.
Request parse_chat_request(const Json& body, const diskformer::GenerateOptions& defaults);
Request parse_completion_request(const Json& body, const diskformer::GenerateOptions& defaults);

// "stop" for an end token or stop string, "length" for max_tokens or a full context.
const char* finish_reason(diskformer::StopReason reason);

// What every answer and chunk of one request repeats.
struct Meta {
    std::string id;     // chatcmpl-… or cmpl-…
    std::string model;  // the served model's name
    int64_t created = 0;
};

Json usage_json(const diskformer::GenerateStats& stats);
// llama.cpp's timing fields (prompt_n, prompt_ms, predicted_n, predicted_per_second, ...).
Json timings_json(const diskformer::GenerateStats& stats);

// The whole answer of a request that did not stream.
Json response_json(const Request& req, const Meta& meta, const diskformer::GenerateResult& result);

// Stream chunks: the opening one (chat: the assistant role), one per piece of text, and the
// closing one with the finish reason; the usage chunk when asked for (empty choices).
Json open_chunk(const Request& req, const Meta& meta);
Json piece_chunk(const Request& req, const Meta& meta, std::string_view text, diskformer::Part part);
Json finish_chunk(const Request& req, const Meta& meta, diskformer::StopReason reason);
Json usage_chunk(const Request& req, const Meta& meta, const diskformer::GenerateStats& stats);

// One server-sent event: "data: <json>\n\n".
std::string sse(const Json& event);

}  // namespace df::server
