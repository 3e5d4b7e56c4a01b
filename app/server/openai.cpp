// OpenAI request parsing and response shapes (openai.h).
#include "server/openai.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <random>

namespace df::server {
namespace {

using diskformer::StopReason;

[[noreturn]] void bad(const std::string& message, const std::string& param = {}) { throw ApiError(400, message, param); }

const char* kind_of(const Json& v) {
    switch (v.type()) {
        case Json::value_t::null: return "null";
        case Json::value_t::boolean: return "a boolean";
        case Json::value_t::string: return "a string";
        case Json::value_t::array: return "an array";
        case Json::value_t::object: return "an object";
        default: return "a number";
    }
}

// The field, or nullptr when absent or null (OpenAI's clients send null for "not given").
const Json* field(const Json& body, const char* name) {
    const auto it = body.find(name);
    return it == body.end() || it->is_null() ? nullptr : &*it;
}

double number(const Json& v, const char* name) {
    if (!v.is_number()) bad(std::string(name) + " must be a number, got " + kind_of(v), name);
    const double d = v.get<double>();
    if (!std::isfinite(d)) bad(std::string(name) + " must be finite", name);
    return d;
}

int64_t integer(const Json& v, const char* name) {
    if (!v.is_number_integer() && !(v.is_number_float() && std::nearbyint(v.get<double>()) == v.get<double>()))
        bad(std::string(name) + " must be an integer, got " + (v.is_number() ? v.dump() : kind_of(v)), name);
    if (v.is_number_unsigned()) {
        const uint64_t u = v.get<uint64_t>();
        if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) bad(std::string(name) + " is too large", name);
        return static_cast<int64_t>(u);
    }
    if (v.is_number_float()) {
        const double d = v.get<double>();
        if (std::fabs(d) > 9.0e18) bad(std::string(name) + " is too large", name);
        return static_cast<int64_t>(d);
    }
    return v.get<int64_t>();
}

bool boolean(const Json& v, const char* name) {
    if (!v.is_boolean()) bad(std::string(name) + " must be true or false, got " + kind_of(v), name);
    return v.get<bool>();
}

void range(double v, double lo, double hi, bool lo_open, const char* name, const char* what) {
    if (v < lo || v > hi || (lo_open && v == lo)) bad(std::string(name) + " must be " + what + ", got " + Json(v).dump(), name);
}

// A feature that would change the answer: refused unless absent, null or its neutral value.
void refuse_unless(bool neutral, const char* name, const std::string& why) {
    if (!neutral) bad(std::string(name) + ": " + why, name);
}

// A count of alternative tokens per position (0..kMaxTopLogprobs).
int top_logprobs(const Json& v, const char* name) {
    const int64_t k = integer(v, name);
    if (k < 0 || k > diskformer::kMaxTopLogprobs)
        bad(std::string(name) + " must be between 0 and " + std::to_string(diskformer::kMaxTopLogprobs) + ", got " + std::to_string(k), name);
    return static_cast<int>(k);
}

// An assistant message's tool_calls: [{"type": "function", "function": {"name", "arguments"}}],
// arguments a JSON string (as OpenAI sends them) or an object.
std::vector<diskformer::ToolCall> message_tool_calls(const Json& v, const std::string& at) {
    if (!v.is_array()) bad(at + " must be an array, got " + kind_of(v), at);
    std::vector<diskformer::ToolCall> calls;
    for (size_t k = 0; k < v.size(); ++k) {
        const std::string here = at + "[" + std::to_string(k) + "]";
        const Json* fn = v[k].is_object() ? field(v[k], "function") : nullptr;
        if (!fn || !fn->is_object()) bad(here + ".function must be an object", here + ".function");
        const Json* name = field(*fn, "name");
        if (!name || !name->is_string()) bad(here + ".function.name must be a string", here + ".function.name");
        const Json* args = field(*fn, "arguments");
        std::string text = "{}";
        if (args) text = args->is_string() ? args->get<std::string>() : python_json(nlohmann::ordered_json(*args));
        calls.push_back({name->get<std::string>(), std::move(text)});
    }
    return calls;
}

bool blank(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view trim(std::string_view s) {
    while (!s.empty() && blank(s.front())) s.remove_prefix(1);
    while (!s.empty() && blank(s.back())) s.remove_suffix(1);
    return s;
}

constexpr std::string_view kCallOpen = "<tool_call>", kCallClose = "</tool_call>";

// One <tool_call> block's JSON: {"name": string, "arguments": …}.
std::optional<ParsedToolCall> parse_call(std::string_view inner) {
    const auto j = nlohmann::ordered_json::parse(inner, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return std::nullopt;
    const auto name = j.find("name");
    if (name == j.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) return std::nullopt;
    ParsedToolCall c{name->get<std::string>(), "{}"};
    if (const auto args = j.find("arguments"); args != j.end() && !args->is_null())
        c.arguments = args->is_string() ? args->get<std::string>() : args->dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    return c;
}

Json calls_json(const Meta& meta, const std::vector<ParsedToolCall>& calls, bool indexed, int choice) {
    Json out = Json::array();
    const std::string base_id = "call_" + meta.id.substr(meta.id.find('-') + 1) + "_" + (choice ? std::to_string(choice) + "_" : "");
    for (size_t k = 0; k < calls.size(); ++k) {
        Json c = {{"id", base_id + std::to_string(k)},
                  {"type", "function"},
                  {"function", {{"name", calls[k].name}, {"arguments", calls[k].arguments}}}};
        if (indexed) c["index"] = k;
        out.push_back(std::move(c));
    }
    return out;
}

// tool_choice "required" or a named function: the answer is forced into one <tool_call> block
// through JSON mode, {"name": one of the names, "arguments": any object}, or for a named function
// (or the only tool) {"name": it, "arguments": its parameters where JSON mode can enforce that
// schema, else any object}.
void force_tool_call(const Json& choice, const std::vector<std::string>& names,
                     const std::vector<nlohmann::ordered_json>& parameters, Request& r) {
    using OJ = nlohmann::ordered_json;
    if (names.empty()) bad("tool_choice needs tools to choose from", "tool_choice");
    OJ name = {{"enum", OJ(names)}};
    OJ arguments = {{"type", "object"}};
    size_t one = names.size();  // the function the call must be (one tool: "required" names it)
    if (choice.is_object()) {
        const Json* fn = field(choice, "function");
        const Json* want = fn && fn->is_object() ? field(*fn, "name") : nullptr;
        if (!want || !want->is_string()) bad("tool_choice.function.name must be a string", "tool_choice.function.name");
        const auto it = std::find(names.begin(), names.end(), want->get<std::string>());
        if (it == names.end()) bad("tool_choice names \"" + want->get<std::string>() + "\", which is not among the tools", "tool_choice.function.name");
        one = static_cast<size_t>(it - names.begin());
    } else if (names.size() == 1) {
        one = 0;
    }
    if (one < names.size()) {
        name = {{"const", names[one]}};
        const OJ& p = parameters[one];
        if (!p.is_null()) {
            try {
                diskformer::check_json_schema(p.dump());
                arguments = p;
            } catch (const diskformer::Error&) {
                // outside JSON mode's subset: any object (the model has the schema in its prompt)
            }
        }
    }
    OJ schema = {{"type", "object"},
                 {"properties", {{"name", name}, {"arguments", arguments}}},
                 {"required", {"name", "arguments"}},
                 {"additionalProperties", false}};
    // The parameters' references ("#/$defs/…") point into the parameters' own document: their
    // definitions go to the top of the call's schema (a reference to "#" itself would point at
    // the call, not the parameters: such parameters are left to the prompt).
    if (arguments.is_object() && arguments.dump().find(R"("$ref":"#")") != std::string::npos) {
        schema["properties"]["arguments"] = {{"type", "object"}};
    } else if (arguments.is_object()) {
        for (const char* defs : {"$defs", "definitions"})
            if (arguments.contains(defs)) schema[defs] = arguments[defs];
    }
    r.gen.json = true;
    r.gen.json_schema = schema.dump();
    r.gen.json_before = "<tool_call>\n";
    r.gen.json_after = "\n</tool_call>";
}

// OpenAI writes a log-probability of -inf as -9999.
double finite_logprob(float lp) { return std::isfinite(lp) ? static_cast<double>(lp) : -9999.0; }

constexpr int64_t kMaxChoices = 16;  // choices per request (each a generation of its own)

// The options both endpoints share.
void parse_common(const Json& body, Request& r, const diskformer::GenerateOptions& defaults) {
    r.gen = defaults;
    r.gen.abort = nullptr;
    if (const Json* v = field(body, "stream")) r.stream = boolean(*v, "stream");
    if (const Json* v = field(body, "stream_options")) {
        if (!v->is_object()) bad(std::string("stream_options must be an object, got ") + kind_of(*v), "stream_options");
        if (const Json* u = field(*v, "include_usage")) r.include_usage = boolean(*u, "stream_options.include_usage");
    }
    // max_completion_tokens is the newer name; either bounds the answer.
    for (const char* name : {"max_tokens", "max_completion_tokens"})
        if (const Json* v = field(body, name)) {
            const int64_t n = integer(*v, name);
            if (n < 1) bad(std::string(name) + " must be at least 1, got " + std::to_string(n), name);
            r.gen.max_tokens = static_cast<int>(std::min<int64_t>(n, std::numeric_limits<int>::max()));
        }
    if (const Json* v = field(body, "temperature")) {
        r.gen.temperature = static_cast<float>(number(*v, "temperature"));
        range(r.gen.temperature, 0, 100, false, "temperature", "between 0 (greedy) and 100");
    }
    if (const Json* v = field(body, "top_p")) {
        r.gen.top_p = static_cast<float>(number(*v, "top_p"));
        range(r.gen.top_p, 0, 1, true, "top_p", "in (0, 1]");
    }
    if (const Json* v = field(body, "top_k")) {
        // 0 or -1 (vLLM's spelling; llama.cpp's server takes any k <= 0) mean all tokens.
        const int64_t k = integer(*v, "top_k");
        if (k < -1) bad("top_k must be -1 or 0 (all) or positive, got " + std::to_string(k), "top_k");
        r.gen.top_k = static_cast<int>(std::clamp<int64_t>(k, 0, std::numeric_limits<int>::max()));
    }
    if (const Json* v = field(body, "min_p")) {
        r.gen.min_p = static_cast<float>(number(*v, "min_p"));
        if (!(r.gen.min_p >= 0 && r.gen.min_p < 1)) bad("min_p must be in [0, 1), got " + v->dump(), "min_p");
    }
    if (const Json* v = field(body, "presence_penalty")) {
        r.gen.presence_penalty = static_cast<float>(number(*v, "presence_penalty"));
        range(r.gen.presence_penalty, -2, 2, false, "presence_penalty", "between -2 and 2");
    }
    if (const Json* v = field(body, "repeat_penalty")) {
        r.gen.repeat_penalty = static_cast<float>(number(*v, "repeat_penalty"));
        range(r.gen.repeat_penalty, 0, 100, true, "repeat_penalty", "positive (1: off)");
    }
    if (const Json* v = field(body, "frequency_penalty")) {
        r.gen.frequency_penalty = static_cast<float>(number(*v, "frequency_penalty"));
        range(r.gen.frequency_penalty, -2, 2, false, "frequency_penalty", "between -2 and 2");
    }
    if (const Json* v = field(body, "seed")) {
        r.gen.seed = static_cast<uint64_t>(integer(*v, "seed"));
    } else {
        // Each request without a seed samples afresh, as clients expect of a server.
        std::random_device rd;
        r.gen.seed = rd() ^ (uint64_t{rd()} << 32);
    }
    if (const Json* v = field(body, "stop")) {
        r.gen.stop.clear();
        auto add = [&](const Json& s) {
            if (!s.is_string()) bad(std::string("stop must be a string or an array of strings, found ") + kind_of(s), "stop");
            if (s.get_ref<const std::string&>().empty()) bad("stop strings must not be empty", "stop");
            r.gen.stop.push_back(s.get<std::string>());
        };
        if (v->is_array())
            for (const auto& s : *v) add(s);
        else
            add(*v);
    }
    if (const Json* v = field(body, "draft")) {  // extension: speculative decoding
        const int64_t d = integer(*v, "draft");
        if (d < 0 || d > 64) bad("draft must be between 0 (off) and 64, got " + std::to_string(d), "draft");
        r.gen.draft = static_cast<int>(d);
    }
    if (const Json* v = field(body, "n")) {
        const int64_t n = integer(*v, "n");
        if (n < 1 || n > kMaxChoices) bad("n must be between 1 and " + std::to_string(kMaxChoices) + ", got " + std::to_string(n), "n");
        r.n = static_cast<int>(n);
    }
    r.best_of = r.n;
    if (const Json* v = field(body, "best_of")) {
        const int64_t b = integer(*v, "best_of");
        if (b < r.n || b > kMaxChoices)
            bad("best_of must be between n (" + std::to_string(r.n) + ") and " + std::to_string(kMaxChoices) + ", got " + std::to_string(b),
                "best_of");
        if (b > r.n && r.stream) bad("best_of cannot be used with stream", "best_of");
        r.best_of = static_cast<int>(b);
    }
    if (const Json* v = field(body, "logit_bias")) {
        if (!v->is_object()) bad(std::string("logit_bias must be an object of token ids to biases, got ") + kind_of(*v), "logit_bias");
        for (auto it = v->begin(); it != v->end(); ++it) {
            const std::string& key = it.key();
            char* end = nullptr;
            const long id = std::strtol(key.c_str(), &end, 10);
            if (key.empty() || *end != '\0' || id < 0 || id > std::numeric_limits<int32_t>::max())
                bad("logit_bias keys must be token ids, got \"" + key + "\"", "logit_bias");
            const double b = number(*it, "logit_bias");
            range(b, -100, 100, false, "logit_bias", "between -100 and 100");
            r.gen.logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(b));
        }
    }
}

std::string text_content(const Json& content, size_t i) {
    const std::string param = "messages[" + std::to_string(i) + "].content";
    if (content.is_string()) return content.get<std::string>();
    if (content.is_null()) return {};
    if (!content.is_array()) bad(param + " must be a string or an array of text parts, got " + kind_of(content), param);
    std::string text;
    for (const auto& part : content) {
        const Json* type = part.is_object() ? field(part, "type") : nullptr;
        if (!type || !type->is_string()) bad(param + ": each part must be an object with a \"type\"", param);
        if (*type != "text") bad(param + ": only text parts are supported, found \"" + type->get<std::string>() + "\"", param);
        const Json* t = field(part, "text");
        if (!t || !t->is_string()) bad(param + ": a text part needs a string \"text\"", param);
        text += t->get<std::string>();
    }
    return text;
}

Json base(const Meta& meta, const char* object) {
    return {{"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}};
}

const char* chunk_object(const Request& req) { return req.chat ? "chat.completion.chunk" : "text_completion"; }

}  // namespace

ApiError::ApiError(int status_, const std::string& message, std::string param_, std::string code_)
    : std::runtime_error(message), status(status_), param(std::move(param_)), code(std::move(code_)) {}

std::string ApiError::type() const {
    switch (status) {
        case 401: return "authentication_error";
        case 404: return "not_found_error";
        case 503: return "server_busy_error";
        default: return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

Json ApiError::body() const {
    return {{"error",
             {{"message", what()},
              {"type", type()},
              {"param", param.empty() ? Json(nullptr) : Json(param)},
              {"code", code.empty() ? Json(nullptr) : Json(code)}}}};
}

Json parse_body(std::string_view text) {
    Json body = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (body.is_discarded()) bad("the request body is not valid JSON");
    if (!body.is_object()) bad(std::string("the request body must be a JSON object, got ") + kind_of(body));
    return body;
}

Request parse_chat_request(const Json& body, const diskformer::GenerateOptions& defaults, const nlohmann::ordered_json* ordered) {
    Request r;
    r.chat = true;
    const Json* msgs = field(body, "messages");
    if (!msgs) bad("messages is required", "messages");
    if (!msgs->is_array() || msgs->empty()) bad("messages must be a non-empty array", "messages");
    for (size_t i = 0; i < msgs->size(); ++i) {
        const Json& m = (*msgs)[i];
        const std::string at = "messages[" + std::to_string(i) + "]";
        if (!m.is_object()) bad(at + " must be an object", at);
        const Json* role = field(m, "role");
        if (!role || !role->is_string()) bad(at + ".role must be a string", at + ".role");
        std::string r_role = role->get<std::string>();
        if (r_role == "developer") r_role = "system";  // OpenAI's newer name for it
        if (r_role != "system" && r_role != "user" && r_role != "assistant" && r_role != "tool")
            bad(at + ".role must be system, developer, user, assistant or tool, got \"" + r_role + "\"", at + ".role");
        diskformer::ChatMessage cm{r_role, text_content(m.contains("content") ? m["content"] : Json(), i), {}};
        if (r_role == "assistant") {
            if (const Json* tc = field(m, "tool_calls")) cm.tool_calls = message_tool_calls(*tc, at + ".tool_calls");
            if (const Json* rc = field(m, "reasoning_content")) {
                if (!rc->is_string()) bad(at + ".reasoning_content must be a string", at + ".reasoning_content");
                cm.reasoning = rc->get<std::string>();
            }
        }
        r.messages.push_back(std::move(cm));
    }
    parse_common(body, r, defaults);
    std::vector<std::string> names;                   // the tools' function names
    std::vector<nlohmann::ordered_json> parameters;  // and their parameter schemas (null: none)
    if (const Json* v = field(body, "tools")) {
        if (!v->is_array()) bad(std::string("tools must be an array, got ") + kind_of(*v), "tools");
        const nlohmann::ordered_json* ov = ordered && ordered->is_object() && ordered->contains("tools") ? &(*ordered)["tools"] : nullptr;
        for (size_t i = 0; i < v->size(); ++i) {
            const Json& t = (*v)[i];
            const std::string at = "tools[" + std::to_string(i) + "]";
            if (!t.is_object()) bad(at + " must be an object", at);
            if (const Json* type = field(t, "type"); !type || *type != "function")
                bad(at + ".type must be \"function\"", at + ".type");
            const Json* fn = field(t, "function");
            if (!fn || !fn->is_object()) bad(at + ".function must be an object", at + ".function");
            const Json* name = field(*fn, "name");
            if (!name || !name->is_string() || name->get_ref<const std::string&>().empty())
                bad(at + ".function.name must be a non-empty string", at + ".function.name");
            const nlohmann::ordered_json tool = ov && ov->is_array() && i < ov->size() ? (*ov)[i] : nlohmann::ordered_json(t);
            r.tools.push_back(python_json(tool));
            names.push_back(name->get<std::string>());
            const auto& f = tool["function"];
            parameters.push_back(f.contains("parameters") ? f["parameters"] : nlohmann::ordered_json());
        }
    }
    if (const Json* v = field(body, "tool_choice")) {
        if (*v == "none") {
            r.tools.clear();  // the model is not told of them, so it cannot call them
        } else if (*v == "required" || v->is_object()) {
            force_tool_call(*v, names, parameters, r);
        } else if (*v != "auto") {
            bad("tool_choice must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": …}}", "tool_choice");
        }
    }
    if (const Json* v = field(body, "parallel_tool_calls")) (void)boolean(*v, "parallel_tool_calls");  // Qwen may call several
    bool logprobs = false;
    if (const Json* v = field(body, "logprobs")) logprobs = boolean(*v, "logprobs");
    int top = 0;
    if (const Json* v = field(body, "top_logprobs")) {
        top = top_logprobs(*v, "top_logprobs");
        if (top > 0 && !logprobs) bad("top_logprobs needs logprobs set to true", "top_logprobs");
    }
    r.gen.logprobs = logprobs ? top : -1;
    const bool forced_call = !r.gen.json_before.empty();
    if (const Json* v = field(body, "response_format")) {
        const Json* type = v->is_object() ? field(*v, "type") : nullptr;
        if (!type || !type->is_string()) bad("response_format must be an object with a string \"type\"", "response_format");
        if (*type == "json_object") {
            r.gen.json = true;
        } else if (*type == "json_schema") {
            const Json* js = field(*v, "json_schema");
            const Json* schema = js && js->is_object() ? field(*js, "schema") : nullptr;
            if (!schema) bad("response_format.json_schema.schema is required", "response_format.json_schema.schema");
            // Printed from the client-ordered body: properties are written in their declared order.
            const nlohmann::ordered_json* os = nullptr;
            if (ordered && ordered->is_object() && ordered->contains("response_format")) {
                const auto& rf = (*ordered)["response_format"];
                if (rf.is_object() && rf.contains("json_schema") && rf["json_schema"].is_object() && rf["json_schema"].contains("schema"))
                    os = &rf["json_schema"]["schema"];
            }
            r.gen.json = true;
            r.gen.json_schema = os ? os->dump() : schema->dump();
            try {
                diskformer::check_json_schema(r.gen.json_schema);
            } catch (const diskformer::Error& e) {
                bad(e.what(), "response_format.json_schema.schema");
            }
        } else {
            refuse_unless(*type == "text", "response_format", "type must be \"text\", \"json_object\" or \"json_schema\"");
        }
        if (*type != "text" && forced_call)
            bad("response_format cannot be combined with a tool_choice that forces a call", "response_format");
    }
    if (const Json* k = field(body, "chat_template_kwargs")) {
        if (!k->is_object()) bad("chat_template_kwargs must be an object", "chat_template_kwargs");
        if (const Json* t = field(*k, "enable_thinking"))
            r.thinking = boolean(*t, "chat_template_kwargs.enable_thinking") ? diskformer::Thinking::on : diskformer::Thinking::off;
    }
    return r;
}

Request parse_completion_request(const Json& body, const diskformer::GenerateOptions& defaults) {
    Request r;
    r.chat = false;
    const Json* p = field(body, "prompt");
    if (!p) bad("prompt is required", "prompt");
    if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) p = &(*p)[0];
    if (!p->is_string()) bad("prompt must be a string (or an array of one string)", "prompt");
    r.prompt = p->get<std::string>();
    if (r.prompt.empty()) bad("prompt must not be empty", "prompt");
    parse_common(body, r, defaults);
    if (const Json* v = field(body, "echo")) refuse_unless(!boolean(*v, "echo"), "echo", "not supported");
    if (const Json* v = field(body, "suffix")) refuse_unless(v->is_string() && v->get_ref<const std::string&>().empty(), "suffix", "not supported");
    if (const Json* v = field(body, "logprobs")) r.gen.logprobs = top_logprobs(*v, "logprobs");
    return r;
}

const char* finish_reason(StopReason reason) {
    switch (reason) {
        case StopReason::max_tokens:
        case StopReason::context_full: return "length";
        default: return "stop";
    }
}

Json usage_json(const diskformer::GenerateStats& s) {
    return {{"prompt_tokens", s.prompt_tokens},
            {"completion_tokens", s.generated_tokens},
            {"total_tokens", s.prompt_tokens + s.generated_tokens},
            {"prompt_tokens_details", {{"cached_tokens", s.reused_tokens}}}};
}

Json timings_json(const diskformer::GenerateStats& s) {
    return {{"cache_n", s.reused_tokens},
            {"draft_n", s.drafted_tokens},
            {"draft_n_accepted", s.accepted_tokens},
            {"prompt_n", s.prompt_tokens - s.reused_tokens},
            {"prompt_ms", s.prefill_ms},
            {"prompt_per_second", s.prefill_tok_s()},
            {"predicted_n", s.generated_tokens},
            {"predicted_ms", s.decode_ms},
            {"predicted_per_second", s.decode_tok_s()},
            {"ttft_ms", s.ttft_ms}};
}

std::string python_json(const nlohmann::ordered_json& v) {
    using OJ = nlohmann::ordered_json;
    auto scalar = [](const OJ& x) { return x.dump(-1, ' ', false, OJ::error_handler_t::replace); };
    if (v.is_object()) {
        std::string out = "{";
        for (auto it = v.begin(); it != v.end(); ++it) {
            if (it != v.begin()) out += ", ";
            out += scalar(OJ(it.key())) + ": " + python_json(it.value());
        }
        return out + "}";
    }
    if (v.is_array()) {
        std::string out = "[";
        for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + python_json(v[i]);
        return out + "]";
    }
    return scalar(v);
}

ToolCallText parse_tool_calls(std::string_view text) {
    ToolCallText r;
    std::string content;
    size_t pos = 0;
    for (;;) {
        const size_t open = text.find(kCallOpen, pos);
        if (open == std::string_view::npos) {
            content += text.substr(pos);
            break;
        }
        const size_t body = open + kCallOpen.size(), close = text.find(kCallClose, body);
        const size_t end = close == std::string_view::npos ? text.size() : close + kCallClose.size();
        if (auto call = parse_call(text.substr(body, close == std::string_view::npos ? std::string_view::npos : close - body))) {
            content += text.substr(pos, open - pos);
            r.calls.push_back(std::move(*call));
        } else {
            content += text.substr(pos, end - pos);
        }
        pos = end;
    }
    r.content = std::string(trim(content));
    return r;
}

std::string ToolCallStream::push(std::string_view text) {
    held_ += text;
    if (in_call_) return {};
    if (const size_t open = held_.find(kCallOpen); open != std::string::npos) {
        std::string out = held_.substr(0, open);
        held_.erase(0, open);
        in_call_ = true;
        // Whitespace before a call is not content (parse_tool_calls trims it).
        while (!out.empty() && blank(out.back())) {
            held_.insert(held_.begin(), out.back());
            out.pop_back();
        }
        return out;
    }
    // Hold back a tail that may still become "<tool_call>", and trailing whitespace.
    size_t keep = 0;
    for (size_t k = std::min(held_.size(), kCallOpen.size() - 1); k > 0; --k)
        if (held_.compare(held_.size() - k, k, kCallOpen, 0, k) == 0) {
            keep = k;
            break;
        }
    while (keep < held_.size() && blank(held_[held_.size() - keep - 1])) ++keep;
    std::string out = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return out;
}

ToolCallText ToolCallStream::finish() {
    ToolCallText t = parse_tool_calls(held_);
    if (t.calls.empty()) t.content = held_;  // no call after all: the held text as it was
    held_.clear();
    in_call_ = false;
    return t;
}

Json logprobs_json(const Request& req, std::span<const LogprobToken> tokens, const TokenText& text, size_t& offset) {
    if (req.chat) {
        auto entry = [&](const diskformer::TokenLogprob& t) {
            const std::string b = text(t.token);
            Json bytes = Json::array();
            for (const unsigned char c : b) bytes.push_back(c);
            return Json{{"token", diskformer::valid_utf8(b)}, {"logprob", finite_logprob(t.logprob)}, {"bytes", std::move(bytes)}};
        };
        Json content = Json::array(), reasoning = Json::array();
        for (const auto& t : tokens) {
            Json e = entry(t.lp.chosen), top = Json::array();
            for (const auto& alt : t.lp.top) top.push_back(entry(alt));
            e["top_logprobs"] = std::move(top);
            (t.part == diskformer::Part::reasoning ? reasoning : content).push_back(std::move(e));
        }
        Json out = {{"content", std::move(content)}};
        if (!reasoning.empty()) out["reasoning_content"] = std::move(reasoning);
        return out;
    }
    Json toks = Json::array(), lps = Json::array(), tops = Json::array(), offsets = Json::array();
    for (const auto& t : tokens) {
        const std::string b = text(t.lp.chosen.token);
        toks.push_back(diskformer::valid_utf8(b));
        lps.push_back(finite_logprob(t.lp.chosen.logprob));
        Json top = Json::object();
        for (const auto& alt : t.lp.top) top[diskformer::valid_utf8(text(alt.token))] = finite_logprob(alt.logprob);
        tops.push_back(std::move(top));
        offsets.push_back(offset);
        offset += b.size();
    }
    return {{"tokens", std::move(toks)}, {"token_logprobs", std::move(lps)}, {"top_logprobs", std::move(tops)}, {"text_offset", std::move(offsets)}};
}

namespace {

Json choice_json(const Request& req, const Meta& meta, const diskformer::GenerateResult& res, const Json& logprobs, int index) {
    Json choice = {{"index", index}, {"finish_reason", finish_reason(res.stop)}};
    if (req.chat) {
        Json msg = {{"role", "assistant"}, {"content", res.text}};
        if (!req.tools.empty()) {
            if (ToolCallText t = parse_tool_calls(res.text); !t.calls.empty()) {
                msg["content"] = t.content.empty() ? Json(nullptr) : Json(t.content);
                msg["tool_calls"] = calls_json(meta, t.calls, false, index);
                choice["finish_reason"] = "tool_calls";
            }
        }
        if (!res.reasoning.empty()) msg["reasoning_content"] = res.reasoning;
        choice["message"] = std::move(msg);
    } else {
        choice["text"] = res.text;
        if (!res.reasoning.empty()) choice["reasoning_content"] = res.reasoning;
    }
    choice["logprobs"] = logprobs;
    return choice;
}

}  // namespace

diskformer::GenerateStats combined_stats(std::span<const diskformer::GenerateResult> results) {
    diskformer::GenerateStats s;
    if (results.empty()) return s;
    s = results[0].stats;
    for (size_t i = 1; i < results.size(); ++i) {
        const auto& t = results[i].stats;
        s.generated_tokens += t.generated_tokens;
        s.decode_ms += t.decode_ms;
        s.drafted_tokens += t.drafted_tokens;
        s.accepted_tokens += t.accepted_tokens;
    }
    return s;
}

Json response_json(const Request& req, const Meta& meta, std::span<const diskformer::GenerateResult> results,
                   std::span<const Json> logprobs) {
    Json out = base(meta, req.chat ? "chat.completion" : "text_completion");
    out["choices"] = Json::array();
    for (size_t i = 0; i < results.size(); ++i)
        out["choices"].push_back(choice_json(req, meta, results[i], i < logprobs.size() ? logprobs[i] : Json(nullptr), static_cast<int>(i)));
    const auto stats = combined_stats(results);
    out["usage"] = usage_json(stats);
    out["timings"] = timings_json(stats);
    return out;
}

Json response_json(const Request& req, const Meta& meta, const diskformer::GenerateResult& res, const Json& logprobs) {
    return response_json(req, meta, std::span(&res, 1), std::span(&logprobs, 1));
}

Json open_chunk(const Request& req, const Meta& meta, int index) {
    Json out = base(meta, chunk_object(req));
    Json choice = {{"index", index}, {"finish_reason", nullptr}};
    if (req.chat)
        choice["delta"] = {{"role", "assistant"}, {"content", ""}};
    else
        choice["text"] = "";
    out["choices"] = Json::array({std::move(choice)});
    return out;
}

Json piece_chunk(const Request& req, const Meta& meta, std::string_view text, diskformer::Part part, const Json& logprobs,
                 int index) {
    const char* key = part == diskformer::Part::reasoning ? "reasoning_content" : req.chat ? "content" : "text";
    Json choice = {{"index", index}, {"finish_reason", nullptr}};
    if (req.chat)
        choice["delta"] = {{key, std::string(text)}};
    else
        choice[key] = std::string(text);
    if (!logprobs.is_null()) choice["logprobs"] = logprobs;
    Json out = base(meta, chunk_object(req));
    out["choices"] = Json::array({std::move(choice)});
    return out;
}

Json tool_calls_chunk(const Request& req, const Meta& meta, const std::vector<ParsedToolCall>& calls, int index) {
    Json choice = {{"index", index}, {"finish_reason", nullptr}, {"delta", {{"tool_calls", calls_json(meta, calls, true, index)}}}};
    Json out = base(meta, chunk_object(req));
    out["choices"] = Json::array({std::move(choice)});
    return out;
}

Json finish_chunk(const Request& req, const Meta& meta, StopReason reason, bool tool_calls, int index) {
    Json choice = {{"index", index}, {"finish_reason", tool_calls ? "tool_calls" : finish_reason(reason)}};
    if (req.chat)
        choice["delta"] = Json::object();
    else
        choice["text"] = "";
    Json out = base(meta, chunk_object(req));
    out["choices"] = Json::array({std::move(choice)});
    return out;
}

Json usage_chunk(const Request& req, const Meta& meta, const diskformer::GenerateStats& stats) {
    Json out = base(meta, chunk_object(req));
    out["choices"] = Json::array();
    out["usage"] = usage_json(stats);
    out["timings"] = timings_json(stats);
    return out;
}

std::string sse(const Json& event) {
    // Invalid UTF-8 cannot reach here (the text stream emits whole characters, U+FFFD for a
    // broken tail), but a dump must never throw mid-stream: replace rather than fail.
    return "data: " + event.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n\n";
}

}  // namespace df::server
