// libFuzzer target for the server's request side (app/server/openai.cpp): a request body as
// both endpoints parse it, and an answer's text as the tool-call parser reads it whole and as
// a stream. A bad request must come back as an ApiError with a 4xx status (anything else would
// be a 500 from the server, or a crash); the stream must find the calls the whole text has and,
// when there are none, give the text back unchanged.
//
// DF_FUZZ_WRITE_SEEDS=DIR fuzz_openai  writes seed inputs into DIR and exits (fuzz/run.sh uses it).
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>

#include "server/openai.h"
#include "seeds.h"

namespace {

namespace ds = df::server;

[[noreturn]] void fail(const char* what, const std::string& detail) {
    std::fprintf(stderr, "fuzz_openai: %s: %s\n", what, detail.c_str());
    std::abort();
}

void parse_request(std::string_view text, bool chat) {
    try {
        const ds::Json body = ds::parse_body(text);
        nlohmann::ordered_json ordered;  // as the server parses it
        if (chat && (body.contains("tools") || body.contains("response_format")))
            ordered = nlohmann::ordered_json::parse(text, nullptr, false);
        const diskformer::GenerateOptions defaults;
        const ds::Request r = chat ? ds::parse_chat_request(body, defaults, &ordered) : ds::parse_completion_request(body, defaults);
        if (r.n < 1 || r.best_of < r.n) fail("accepted a request with", "n " + std::to_string(r.n) + ", best_of " + std::to_string(r.best_of));
    } catch (const ds::ApiError& e) {
        if (e.status < 400 || e.status > 499) fail("a bad request's status is not 4xx", std::to_string(e.status) + " " + e.what());
        (void)e.body();
    } catch (const std::exception& e) {
        fail(chat ? "chat request threw (a 500)" : "completion request threw (a 500)", e.what());
    }
}

void tool_calls(std::string_view text, size_t step) {
    const ds::ToolCallText whole = ds::parse_tool_calls(text);
    ds::ToolCallStream st;
    std::string sent;
    for (size_t i = 0; i < text.size(); i += step) sent += st.push(text.substr(i, step));
    const ds::ToolCallText end = st.finish();
    if (end.calls.size() != whole.calls.size()) fail("the stream found other calls", std::to_string(end.calls.size()));
    for (size_t i = 0; i < end.calls.size(); ++i)
        if (end.calls[i].name != whole.calls[i].name || end.calls[i].arguments != whole.calls[i].arguments)
            fail("the stream's call differs", end.calls[i].name);
    if (whole.calls.empty() && sent + end.content != text) fail("the stream changed a text without calls", sent + end.content);
}

void write_seeds(const std::string& dir) {
    const char* seeds[] = {
        R"({"model": "m", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], "max_tokens": 16, "temperature": 0.7, "top_p": 0.9, "seed": 3, "stop": ["\n\n"]})",
        R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "Weather?"}]}], "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}], "tool_choice": "required"})",
        R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]}, {"role": "tool", "tool_call_id": "c1", "content": "2"}], "tool_choice": {"type": "function", "function": {"name": "f"}}, "tools": [{"type": "function", "function": {"name": "f"}}]})",
        R"({"messages": [{"role": "user", "content": "json"}], "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object", "properties": {"id": {"type": "string", "pattern": "^[A-Z]{2}$"}}}}}, "logprobs": true, "top_logprobs": 3, "n": 2, "best_of": 3})",
        R"({"messages": [{"role": "user", "content": "s"}], "stream": true, "stream_options": {"include_usage": true}, "response_format": {"type": "json_object"}, "logit_bias": {"42": -100}, "chat_template_kwargs": {"enable_thinking": false}})",
        R"({"prompt": "Once upon a time", "max_tokens": 8, "logprobs": 2, "echo": false, "top_k": 40, "min_p": 0.05, "repeat_penalty": 1.1, "draft": 4})",
        "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"t\"}",
        "if a < b then <tool <tool_call>not json</tool_call>",
    };
    int i = 0;
    for (const char* s : seeds) df::fuzz::write_seed(dir, "seed" + std::to_string(i++), s);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) { return df::fuzz::seed_or_run(write_seeds); }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    parse_request(in, true);
    parse_request(in, false);
    tool_calls(in, size == 0 ? 1 : 1 + data[0] % 13);  // pieces of 1..13 bytes
    return 0;
}
