// The OpenAI-compatible server, in-process on a loopback port with golden models on the CPU:
// answers equal the library's, a stream adds up to the whole answer, caches are reused across
// requests and slots, bad requests get OpenAI error bodies and leave the server serving, and a
// client that leaves a stream ends its generation.
#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <sstream>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common/golden.h"
#include "common/random_dflash.h"
#include "diskformer/generate.h"
#include "runtime/json_prefix.h"
#include "runtime/json_schema.h"
#include "server/openai.h"
#include "server/server.h"

namespace {

using Json = nlohmann::json;
namespace ds = df::server;

std::shared_ptr<diskformer::Model> model(const std::string& name) {
    static std::map<std::string, std::shared_ptr<diskformer::Model>> loaded;
    auto& m = loaded[name];
    if (!m)
        m = diskformer::Model::load((df::test::golden_dir() / "models" / (name + ".gguf")).string(),
                                    {.backend = diskformer::BackendKind::cpu, .threads = 2});
    return m;
}

ds::ServerOptions options(int slots = 1, int ctx = 512) {
    ds::ServerOptions o;
    o.port = 0;
    o.slots = slots;
    o.model_id = "test-model";
    o.log = false;
    o.session.ctx = ctx;
    return o;
}

// A server on a free loopback port, serving on its own thread while the object lives.
class Running {
public:
    explicit Running(const std::string& name, ds::ServerOptions o = options()) : server_(model(name), std::move(o)) {
        port_ = server_.bind();
        thread_ = std::thread([this] { server_.run(); });
    }
    ~Running() {
        server_.stop();
        thread_.join();
    }
    httplib::Client client() const {
        httplib::Client c("127.0.0.1", port_);
        c.set_read_timeout(300);
        return c;
    }
    ds::Server& server() { return server_; }

private:
    ds::Server server_;
    int port_ = 0;
    std::thread thread_;
};

struct Reply {
    int status = 0;
    Json body;
};

Reply post(const Running& s, const std::string& path, const std::string& body, const httplib::Headers& headers = {}) {
    auto c = s.client();
    auto r = c.Post(path.c_str(), headers, body, "application/json");
    if (!r) {
        ADD_FAILURE() << "no answer from the server: " << httplib::to_string(r.error());
        return {};
    }
    return {r->status, Json::parse(r->body, nullptr, false)};
}
Reply post(const Running& s, const std::string& path, const Json& body) { return post(s, path, body.dump()); }

Json health(const Running& s) {
    auto c = s.client();
    auto r = c.Get("/health");
    return r ? Json::parse(r->body, nullptr, false) : Json();
}

// The events of a stream (the "data: " payloads), and whether it ended with [DONE].
struct Events {
    int status = 0;
    std::vector<Json> events;
    bool done = false;
};

Events parse_events(int status, const std::string& text) {
    Events e;
    e.status = status;
    size_t pos = 0;
    while (pos < text.size()) {
        const size_t end = text.find("\n\n", pos);
        EXPECT_NE(end, std::string::npos) << "an event without its blank line: " << text.substr(pos);
        if (end == std::string::npos) break;
        const std::string ev = text.substr(pos, end - pos);
        pos = end + 2;
        EXPECT_EQ(ev.rfind("data: ", 0), 0u) << ev;
        EXPECT_FALSE(e.done) << "an event after [DONE]: " << ev;
        if (ev == "data: [DONE]")
            e.done = true;
        else
            e.events.push_back(Json::parse(ev.substr(6), nullptr, false));
    }
    return e;
}

Events post_stream(const Running& s, const std::string& path, Json body) {
    body["stream"] = true;
    auto c = s.client();
    auto r = c.Post(path.c_str(), body.dump(), "application/json");
    if (!r) {
        ADD_FAILURE() << "no answer from the server: " << httplib::to_string(r.error());
        return {};
    }
    EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
    return parse_events(r->status, r->body);
}

Json chat_body(const std::vector<std::pair<std::string, std::string>>& msgs, int max_tokens) {
    Json m = Json::array();
    for (const auto& [role, content] : msgs) m.push_back({{"role", role}, {"content", content}});
    return {{"model", "anything"}, {"messages", m}, {"max_tokens", max_tokens}};
}

// What the library itself answers (greedy) to these messages on a fresh session.
diskformer::GenerateResult library_answer(const std::string& name, const std::vector<diskformer::ChatMessage>& msgs,
                                          int max_tokens) {
    diskformer::Session s(model(name), {.ctx = 512});
    const auto prompt = diskformer::chat_prompt(*model(name), msgs);
    diskformer::GenerateOptions o;
    o.max_tokens = max_tokens;
    return diskformer::generate(s, prompt, o);
}

const std::vector<std::pair<std::string, std::string>> kConversation = {
    {"system", "You are terse."}, {"user", "Name a colour and a number."}};

std::vector<diskformer::ChatMessage> to_messages(const std::vector<std::pair<std::string, std::string>>& msgs) {
    std::vector<diskformer::ChatMessage> out;
    for (const auto& [role, content] : msgs) out.push_back({role, content, {}});
    return out;
}

class ServerModels : public ::testing::TestWithParam<const char*> {};

TEST_P(ServerModels, ChatAnswerIsTheLibrarysGreedyAnswer) {
    Running s(GetParam());
    const Reply r = post(s, "/v1/chat/completions", chat_body(kConversation, 24));
    ASSERT_EQ(r.status, 200) << r.body.dump();
    const auto want = library_answer(GetParam(), to_messages(kConversation), 24);
    const Json& choice = r.body["choices"][0];
    EXPECT_EQ(r.body["object"], "chat.completion");
    EXPECT_EQ(r.body["model"], "test-model");
    EXPECT_EQ(choice["message"]["role"], "assistant");
    EXPECT_EQ(choice["message"]["content"], want.text);
    EXPECT_EQ(choice["message"].value("reasoning_content", ""), want.reasoning);
    EXPECT_EQ(choice["finish_reason"], ds::finish_reason(want.stop));
    EXPECT_EQ(r.body["usage"]["completion_tokens"], want.tokens.size());
    EXPECT_EQ(r.body["usage"]["prompt_tokens"], diskformer::chat_prompt(*model(GetParam()), to_messages(kConversation)).size());
    EXPECT_EQ(r.body["usage"]["total_tokens"],
              r.body["usage"]["prompt_tokens"].get<int>() + r.body["usage"]["completion_tokens"].get<int>());
    EXPECT_FALSE(want.text.empty() && want.reasoning.empty()) << "the model said nothing: the comparison is empty";
}

TEST_P(ServerModels, StreamAddsUpToTheWholeAnswer) {
    Running s(GetParam());
    const Json body = chat_body(kConversation, 24);
    const Reply whole = post(s, "/v1/chat/completions", body);
    ASSERT_EQ(whole.status, 200);
    Json sb = body;
    sb["stream_options"] = {{"include_usage", true}};
    const Events e = post_stream(s, "/v1/chat/completions", sb);
    ASSERT_EQ(e.status, 200);
    ASSERT_TRUE(e.done) << "no [DONE]";
    ASSERT_GE(e.events.size(), 3u);
    EXPECT_EQ(e.events.front()["choices"][0]["delta"]["role"], "assistant");
    std::string content, reasoning;
    std::string finish;
    for (size_t i = 0; i < e.events.size(); ++i) {
        const Json& ev = e.events[i];
        EXPECT_EQ(ev["object"], "chat.completion.chunk");
        EXPECT_EQ(ev["id"], e.events[0]["id"]) << "one id per stream";
        if (ev["choices"].empty()) {
            EXPECT_EQ(i + 1, e.events.size()) << "the usage chunk comes last";
            EXPECT_EQ(ev["usage"]["completion_tokens"], whole.body["usage"]["completion_tokens"]);
            continue;
        }
        const Json& c = ev["choices"][0];
        content += c["delta"].value("content", "");
        reasoning += c["delta"].value("reasoning_content", "");
        if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
    }
    EXPECT_TRUE(e.events.back()["choices"].empty()) << "include_usage asked for a usage chunk";
    const Json& m = whole.body["choices"][0]["message"];
    EXPECT_EQ(content, m["content"]);
    EXPECT_EQ(reasoning, m.value("reasoning_content", ""));
    EXPECT_EQ(finish, whole.body["choices"][0]["finish_reason"]);
}

INSTANTIATE_TEST_SUITE_P(Golden, ServerModels, ::testing::Values("q3_4L_kmix", "q35_4L_iq2mix"));

TEST(Server, ADraftModelGivesTheLibrarysAnswer) {
    for (const auto& [target, drafter] : std::vector<std::pair<const char*, const char*>>{
             {"q3_4L_kmix", "q35_4L_iq2mix"}, {"q35_4L_iq2mix", "q35_4L_iq2mix"}}) {
        SCOPED_TRACE(std::string(target) + " by " + drafter);
        ds::ServerOptions o = options();
        o.draft_model = model(drafter);
        o.defaults.draft = 7;
        o.defaults.draft_adaptive = false;  // draft whenever possible: the drafter must be used
        Running s(target, o);
        const auto want = library_answer(target, to_messages(kConversation), 24);
        for (int round = 0; round < 2; ++round) {  // the second reuses both caches
            const Reply r = post(s, "/v1/chat/completions", chat_body(kConversation, 24));
            ASSERT_EQ(r.status, 200) << r.body.dump();
            EXPECT_EQ(r.body["choices"][0]["message"]["content"], want.text);
            EXPECT_EQ(r.body["choices"][0]["message"].value("reasoning_content", ""), want.reasoning);
            EXPECT_GT(r.body["timings"]["draft_n"].get<int>(), 0) << r.body.dump();
            if (std::string(target) == drafter) {
                EXPECT_EQ(r.body["timings"]["draft_n_accepted"], r.body["timings"]["draft_n"]);
            }
        }
        // "draft": 0 turns it off for a request.
        Json off = chat_body(kConversation, 24);
        off["draft"] = 0;
        const Reply r = post(s, "/v1/chat/completions", off);
        ASSERT_EQ(r.status, 200);
        EXPECT_EQ(r.body["choices"][0]["message"]["content"], want.text);
        EXPECT_EQ(r.body["timings"]["draft_n"], 0);
        // A sampled request drafts too, and its seed gives the answer it gives without drafts.
        Json sampled = chat_body(kConversation, 24);
        sampled["temperature"] = 0.8;
        sampled["top_k"] = 3;
        sampled["seed"] = 3;
        const Reply with = post(s, "/v1/chat/completions", sampled);
        sampled["draft"] = 0;
        const Reply without = post(s, "/v1/chat/completions", sampled);
        ASSERT_EQ(with.status, 200) << with.body.dump();
        ASSERT_EQ(without.status, 200) << without.body.dump();
        EXPECT_EQ(with.body["choices"][0]["message"], without.body["choices"][0]["message"]);
        EXPECT_GT(with.body["timings"]["draft_n"].get<int>(), 0) << with.body.dump();
        EXPECT_EQ(without.body["timings"]["draft_n"], 0);
    }
}

TEST(Server, ADflashDrafterPerSlotGivesTheLibrarysAnswer) {
    const auto dir = df::test::write_dflash_dir(df::test::DflashSpec{}, 6);
    ds::ServerOptions o = options(2);
    o.dflash_dir = dir.string();
    o.defaults.draft = 7;
    o.defaults.draft_adaptive = false;
    {
        Running s("q3_4L_kmix", o);
        const auto want = library_answer("q3_4L_kmix", to_messages(kConversation), 24);
        for (int round = 0; round < 2; ++round) {
            const Reply r = post(s, "/v1/chat/completions", chat_body(kConversation, 24));
            ASSERT_EQ(r.status, 200) << r.body.dump();
            EXPECT_EQ(r.body["choices"][0]["message"]["content"], want.text);
            EXPECT_GT(r.body["timings"]["draft_n"].get<int>(), 0) << r.body.dump();
        }
    }
    o.dflash_dir = (dir / "missing").string();
    EXPECT_THROW(ds::Server(model("q3_4L_kmix"), o), diskformer::Error);
    std::filesystem::remove_all(dir);
}

TEST(Server, CompletionsTakeARawPromptWithControlTokens) {
    Running s("q3_4L_kmix");
    const std::string prompt = "<|im_start|>user\nCount to five.<|im_end|>\n<|im_start|>assistant\n";
    const Reply r = post(s, "/v1/completions", Json{{"prompt", prompt}, {"max_tokens", 16}});
    ASSERT_EQ(r.status, 200) << r.body.dump();
    diskformer::Session lib(model("q3_4L_kmix"), {.ctx = 512});
    const auto ids = model("q3_4L_kmix")->tokenize(prompt, true);
    diskformer::GenerateOptions o;
    o.max_tokens = 16;
    const auto want = diskformer::generate(lib, ids, o);
    EXPECT_EQ(r.body["object"], "text_completion");
    EXPECT_EQ(r.body["choices"][0]["text"], want.text);
    EXPECT_EQ(r.body["usage"]["prompt_tokens"], ids.size());
    // Streamed: the same text in "text" fields.
    const Events e = post_stream(s, "/v1/completions", Json{{"prompt", Json::array({prompt})}, {"max_tokens", 16}});
    ASSERT_TRUE(e.done);
    std::string text;
    for (const auto& ev : e.events) text += ev["choices"][0].value("text", "");
    EXPECT_EQ(text, want.text);
}

// Log-probabilities as OpenAI's clients read them, against the library's own: chat (whole and
// streamed, where each token's entry rides with the text it produced) and completions. The end
// token is not reported; the chosen tokens' bytes add up to the answer.
TEST(Server, LogprobsAreTheLibrarysInOpenAIsShapes) {
    const char* name = "q3_4L_kmix";
    Running s(name);
    Json body = chat_body(kConversation, 24);
    body["logprobs"] = true;
    body["top_logprobs"] = 3;
    body["chat_template_kwargs"] = {{"enable_thinking", false}};
    const Reply whole = post(s, "/v1/chat/completions", body);
    ASSERT_EQ(whole.status, 200) << whole.body.dump();

    diskformer::Session lib(model(name), {.ctx = 512});
    diskformer::GenerateOptions o;
    o.max_tokens = 24;
    o.logprobs = 3;
    const auto want = diskformer::generate(lib, diskformer::chat_prompt(*model(name), to_messages(kConversation), diskformer::Thinking::off), o);
    const bool ended = want.stop == diskformer::StopReason::end_token;
    const size_t n = want.tokens.size() - (ended ? 1 : 0);
    const Json& content = whole.body["choices"][0]["logprobs"]["content"];
    ASSERT_TRUE(content.is_array()) << whole.body.dump();
    ASSERT_EQ(content.size(), n);
    std::string bytes;
    for (size_t i = 0; i < n; ++i) {
        const Json& e = content[i];
        EXPECT_NEAR(e["logprob"].get<double>(), want.logprobs[i].chosen.logprob, 1e-6);
        const std::string tok = model(name)->detokenize(std::span(&want.tokens[i], 1));
        EXPECT_EQ(e["bytes"].size(), tok.size());
        for (const auto& b : e["bytes"]) bytes.push_back(static_cast<char>(b.get<int>()));
        ASSERT_EQ(e["top_logprobs"].size(), 3u);
        for (int k = 0; k < 3; ++k)
            EXPECT_NEAR(e["top_logprobs"][k]["logprob"].get<double>(), want.logprobs[i].top[k].logprob, 1e-6);
    }
    EXPECT_EQ(bytes, want.text) << "thinking off: every reported token is part of the answer";

    const Events e = post_stream(s, "/v1/chat/completions", body);
    ASSERT_TRUE(e.done);
    std::vector<double> streamed;
    for (const auto& ev : e.events) {
        const Json& c = ev["choices"][0];
        if (!c.contains("logprobs") || c["logprobs"].is_null()) continue;
        for (const auto& x : c["logprobs"]["content"]) streamed.push_back(x["logprob"].get<double>());
    }
    ASSERT_EQ(streamed.size(), n);
    for (size_t i = 0; i < n; ++i) EXPECT_NEAR(streamed[i], content[i]["logprob"].get<double>(), 1e-4);  // the cached prompt's last token re-evaluated alone

    // Completions: parallel arrays; logprobs 0 reports the chosen tokens with no alternatives.
    const std::string prompt = "<|im_start|>user\nCount to five.<|im_end|>\n<|im_start|>assistant\n";
    const Reply c = post(s, "/v1/completions", Json{{"prompt", prompt}, {"max_tokens", 12}, {"logprobs", 0}});
    ASSERT_EQ(c.status, 200) << c.body.dump();
    const Json& lp = c.body["choices"][0]["logprobs"];
    ASSERT_TRUE(lp.is_object()) << c.body.dump();
    const size_t m = lp["tokens"].size();
    EXPECT_GT(m, 0u);
    EXPECT_EQ(lp["token_logprobs"].size(), m);
    EXPECT_EQ(lp["top_logprobs"].size(), m);
    ASSERT_EQ(lp["text_offset"].size(), m);
    EXPECT_EQ(lp["text_offset"][0], 0);
    for (size_t i = 0; i < m; ++i) {
        EXPECT_LE(lp["token_logprobs"][i].get<double>(), 0.0);
        EXPECT_TRUE(lp["top_logprobs"][i].empty());
        if (i) {
            EXPECT_GE(lp["text_offset"][i].get<int>(), lp["text_offset"][i - 1].get<int>());
        }
    }
    // Without the field: null, as before.
    const Reply plain = post(s, "/v1/completions", Json{{"prompt", prompt}, {"max_tokens", 4}});
    EXPECT_TRUE(plain.body["choices"][0]["logprobs"].is_null());
}

// A request with tools: the prompt lists them in the client's key order, as the library renders
// them (the random model calls nothing, so the answer is plain text, whole and streamed alike).
TEST(Server, ToolsGoIntoThePromptInTheClientsOrder) {
    const char* name = "q3_4L_kmix";
    Running s(name);
    const std::string weather = R"({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}})";
    const std::string body = R"({"messages": [{"role": "user", "content": "Weather in Paris?"}], "max_tokens": 8, "tools": [)" + weather + "]}";
    const Reply r = post(s, "/v1/chat/completions", body, {});
    ASSERT_EQ(r.status, 200) << r.body.dump();
    const std::vector<std::string> tools = {weather};
    const auto msgs = to_messages({{"user", "Weather in Paris?"}});
    EXPECT_EQ(r.body["usage"]["prompt_tokens"], diskformer::chat_prompt(*model(name), msgs, diskformer::Thinking::automatic, true, tools).size());
    EXPECT_GT(r.body["usage"]["prompt_tokens"].get<size_t>(), diskformer::chat_prompt(*model(name), msgs).size() + 40);
    // tool_choice "none": the model is not told of them.
    Json none = Json::parse(body);
    none["tool_choice"] = "none";
    const Reply n = post(s, "/v1/chat/completions", none);
    EXPECT_EQ(n.body["usage"]["prompt_tokens"], diskformer::chat_prompt(*model(name), msgs).size());
    const Events e = post_stream(s, "/v1/chat/completions", Json::parse(body));
    ASSERT_TRUE(e.done);
    std::string content;
    for (const auto& ev : e.events) content += ev["choices"][0]["delta"].value("content", "");
    EXPECT_EQ(content, r.body["choices"][0]["message"]["content"]);
}

// response_format json_object: the answer is JSON (a whole object when the model ends it), whole
// and streamed alike, on both architectures (qwen35 with its thinking off).
TEST(Server, JsonObjectResponsesAreJson) {
    for (const char* name : {"q3_4L_kmix", "q35_4L_iq2mix"}) {
        SCOPED_TRACE(name);
        Running s(name);
        Json body = chat_body({{"user", "Reply in JSON."}}, 48);
        body["response_format"] = {{"type", "json_object"}};
        body["chat_template_kwargs"] = {{"enable_thinking", false}};
        const Reply r = post(s, "/v1/chat/completions", body);
        ASSERT_EQ(r.status, 200) << r.body.dump();
        const std::string content = r.body["choices"][0]["message"]["content"];
        diskformer::JsonPrefix j;
        EXPECT_TRUE(j.feed(content)) << content;
        if (r.body["choices"][0]["finish_reason"] == "stop") {
            EXPECT_TRUE(Json::accept(content)) << content;
        }
        const Events e = post_stream(s, "/v1/chat/completions", body);
        ASSERT_TRUE(e.done);
        std::string streamed;
        for (const auto& ev : e.events) streamed += ev["choices"][0]["delta"].value("content", "");
        EXPECT_EQ(streamed, content);

        // json_schema: the schema's properties, in their declared order (sampled, seeded).
        body["response_format"] = Json::parse(R"({"type": "json_schema", "json_schema": {"name": "pick", "strict": true,
            "schema": {"type": "object", "properties": {"colour": {"enum": ["red", "green"]}, "sure": {"type": "boolean"}},
                       "required": ["colour", "sure"], "additionalProperties": false}}})");
        body["max_tokens"] = 200;
        body["temperature"] = 1.0;
        body["seed"] = 3;
        const Reply sr = post(s, "/v1/chat/completions", body);
        ASSERT_EQ(sr.status, 200) << sr.body.dump();
        const std::string sc = sr.body["choices"][0]["message"]["content"];
        diskformer::JsonSchema schema = diskformer::JsonSchema::compile(body["response_format"]["json_schema"]["schema"].dump());
        diskformer::JsonPrefix js(&schema);
        EXPECT_TRUE(js.feed(sc)) << sc;
        if (sr.body["choices"][0]["finish_reason"] == "stop") {
            const Json doc = Json::parse(sc);
            EXPECT_TRUE(doc["colour"] == "red" || doc["colour"] == "green") << sc;
            EXPECT_TRUE(doc["sure"].is_boolean()) << sc;
        }
    }
}

// n sampled choices of one request: choice i is the library's answer with seed + i; usage
// counts the prompt once and every answer; a stream sends each choice's events under its index
// (interleaved when the choices run at once), each opened first and finished once.
void NChoicesAreTheLibrarys(const Running& s, const char* name, int n = 3) {
    Json body = chat_body(kConversation, 12);
    body["n"] = n;
    body["temperature"] = 1.0;
    body["top_k"] = 0;
    body["seed"] = 42;
    const Reply r = post(s, "/v1/chat/completions", body);
    ASSERT_EQ(r.status, 200) << r.body.dump();
    ASSERT_EQ(r.body["choices"].size(), static_cast<size_t>(n));
    size_t completion = 0;
    std::vector<std::string> texts;
    for (int i = 0; i < n; ++i) {
        SCOPED_TRACE("choice " + std::to_string(i));
        const Json& c = r.body["choices"][i];
        EXPECT_EQ(c["index"], i);
        diskformer::Session lib(model(name), {.ctx = 512});
        diskformer::GenerateOptions o;
        o.max_tokens = 12;
        o.temperature = 1.0f;
        o.top_k = 0;
        o.seed = 42 + i;
        const auto want = diskformer::generate(lib, diskformer::chat_prompt(*model(name), to_messages(kConversation)), o);
        EXPECT_EQ(c["message"]["content"], want.text);
        EXPECT_EQ(c["message"].value("reasoning_content", ""), want.reasoning);
        completion += want.tokens.size();
        texts.push_back(want.reasoning + want.text);
    }
    EXPECT_NE(texts[0], texts[1]) << "the choices should differ";
    EXPECT_EQ(r.body["usage"]["completion_tokens"], completion);
    EXPECT_EQ(r.body["usage"]["prompt_tokens"], diskformer::chat_prompt(*model(name), to_messages(kConversation)).size());

    const int ns = std::min(n, 3);
    body["n"] = ns;
    body["stream_options"] = {{"include_usage", true}};
    const Events e = post_stream(s, "/v1/chat/completions", body);
    ASSERT_TRUE(e.done);
    std::vector<std::string> streamed(static_cast<size_t>(ns));
    std::vector<int> opened(static_cast<size_t>(ns)), finished(static_cast<size_t>(ns));
    int usage = 0;
    for (const auto& ev : e.events) {
        if (ev["choices"].empty()) {  // the usage chunk, last
            ++usage;
            continue;
        }
        const Json& c = ev["choices"][0];
        const int i = c["index"];
        ASSERT_TRUE(i >= 0 && i < ns) << ev.dump();
        EXPECT_EQ(finished[i], 0) << "nothing after a choice's finish";
        if (c["delta"].contains("role")) ++opened[i];
        else EXPECT_EQ(opened[i], 1) << "a choice's role chunk comes first";
        streamed[i] += c["delta"].value("reasoning_content", "") + c["delta"].value("content", "");
        if (!c["finish_reason"].is_null()) ++finished[i];
    }
    EXPECT_EQ(usage, 1);
    for (int i = 0; i < ns; ++i) {
        EXPECT_EQ(opened[i], 1) << i;
        EXPECT_EQ(finished[i], 1) << i;
        EXPECT_EQ(streamed[i], texts[i]) << i;
    }
}

TEST(Server, NChoicesAreSeededGenerationsOneAfterAnother) {
    const char* name = "q35_4L_iq2mix";
    Running s(name);
    NChoicesAreTheLibrarys(s, name);
}

TEST(Server, NChoicesRunAtOnceOnFreeSlotsWithTheSameAnswers) {
    // Five choices on three slots (streamed: three): the prompt evaluated once and copied to the
    // two others, the choices in shared passes, and the answers those of the choices one after
    // another.
    const char* name = "q35_4L_iq2mix";
    Running s(name, options(3));
    NChoicesAreTheLibrarys(s, name, 5);
    const Json h = health(s);
    EXPECT_GT(h["batching"]["passes"].get<int>(), 0) << h.dump();
    EXPECT_EQ(h["slots_busy"], 0);
    // A streamed request's choices share passes too.
    Json body = chat_body(kConversation, 12);
    body["n"] = 3;
    body["temperature"] = 1.0;
    body["seed"] = 5;
    const Events e = post_stream(s, "/v1/chat/completions", body);
    ASSERT_TRUE(e.done);
    EXPECT_GT(health(s)["batching"]["passes"].get<int>(), h["batching"]["passes"].get<int>());
}

TEST(Server, NChoicesLogprobsAtOnce) {
    const char* name = "q3_4L_kmix";
    Json body = chat_body(kConversation, 6);
    body["n"] = 3;
    body["temperature"] = 0.8;
    body["seed"] = 9;
    body["logprobs"] = true;
    body["top_logprobs"] = 2;
    Running one(name, options(1)), three(name, options(3));
    const Reply a = post(one, "/v1/chat/completions", body), b = post(three, "/v1/chat/completions", body);
    ASSERT_EQ(a.status, 200) << a.body.dump();
    ASSERT_EQ(b.status, 200) << b.body.dump();
    EXPECT_EQ(a.body["choices"], b.body["choices"]);
    EXPECT_EQ(a.body["usage"]["completion_tokens"], b.body["usage"]["completion_tokens"]);
}


// tool_choice forcing a call: the answer is one <tool_call> block of that function (its
// parameters' schema enforced), returned as tool_calls, even from a random model.
TEST(Server, AForcedToolChoiceAnswersWithThatCall) {
    Running s("q3_4L_kmix");
    Json body = chat_body({{"user", "Weather?"}}, 160);
    body["tools"] = Json::parse(R"([{"type": "function", "function": {"name": "get_time"}},
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
         "properties": {"city": {"enum": ["Paris", "Rome"]}}, "required": ["city"], "additionalProperties": false}}}])");
    body["tool_choice"] = Json::parse(R"({"type": "function", "function": {"name": "get_weather"}})");
    body["chat_template_kwargs"] = {{"enable_thinking", false}};
    const Reply r = post(s, "/v1/chat/completions", body);
    ASSERT_EQ(r.status, 200) << r.body.dump();
    const Json& c = r.body["choices"][0];
    ASSERT_EQ(c["finish_reason"], "tool_calls") << r.body.dump();
    ASSERT_EQ(c["message"]["tool_calls"].size(), 1u);
    EXPECT_EQ(c["message"]["tool_calls"][0]["function"]["name"], "get_weather");
    const Json args = Json::parse(c["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>());
    EXPECT_TRUE(args["city"] == "Paris" || args["city"] == "Rome") << args.dump();
    EXPECT_TRUE(c["message"]["content"].is_null());
    // "required": any of the functions (streamed: one tool_calls delta, then the finish).
    body["tool_choice"] = "required";
    const Events e = post_stream(s, "/v1/chat/completions", body);
    ASSERT_TRUE(e.done);
    std::string name, finish;
    for (const auto& ev : e.events) {
        const Json& ch = ev["choices"][0];
        if (ch["delta"].contains("tool_calls")) name = ch["delta"]["tool_calls"][0]["function"]["name"];
        if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
    }
    if (finish == "tool_calls") {
        EXPECT_TRUE(name == "get_time" || name == "get_weather") << name;
    } else {
        EXPECT_EQ(finish, "length") << "a forced call ends as a call or at max_tokens";
    }
}

// A function whose parameters refer to their own $defs (as pydantic writes them): the forced
// call follows them.
TEST(Server, AForcedToolCallFollowsParametersWithDefinitions) {
    Running s("q3_4L_kmix", options(1, 2048));
    Json body = chat_body({{"user", "Weather?"}}, 1200);  // random models write long runs of whitespace
    body["tools"] = Json::parse(R"([{"type": "function", "function": {"name": "get_weather", "parameters": {
        "$defs": {"Place": {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}},
                            "required": ["city"], "additionalProperties": false}},
        "type": "object", "properties": {"place": {"$ref": "#/$defs/Place"}}, "required": ["place"],
        "additionalProperties": false}}}])");
    body["tool_choice"] = "required";
    body["chat_template_kwargs"] = {{"enable_thinking", false}};
    const Reply r = post(s, "/v1/chat/completions", body);
    ASSERT_EQ(r.status, 200) << r.body.dump();
    const Json& c = r.body["choices"][0];
    ASSERT_EQ(c["finish_reason"], "tool_calls") << r.body.dump();
    const Json args = Json::parse(c["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>());
    EXPECT_TRUE(args["place"]["city"] == "Paris" || args["place"]["city"] == "Rome") << args.dump();
    EXPECT_EQ(args.size(), 1u) << args.dump();
}

// logit_bias: +100 on a token makes greedy decoding write nothing else.
TEST(Server, LogitBiasSteersTheChoice) {
    const char* name = "q3_4L_kmix";
    Running s(name);
    const std::vector<int32_t> x = model(name)->tokenize("x");
    ASSERT_EQ(x.size(), 1u);
    Json body = chat_body({{"user", "Say something."}}, 6);
    body["logit_bias"] = {{std::to_string(x[0]), 100}};
    body["chat_template_kwargs"] = {{"enable_thinking", false}};
    const Reply r = post(s, "/v1/chat/completions", body);
    ASSERT_EQ(r.status, 200) << r.body.dump();
    EXPECT_EQ(r.body["choices"][0]["message"]["content"], "xxxxxx");
}

TEST(Server, AConversationThatComesBackReusesItsSlot) {
    const Json a = chat_body({{"user", "First conversation: tell me about rivers and their sources."}}, 4);
    const Json b = chat_body({{"user", "Second one, quite different: what do bees make?"}}, 4);
    auto cached = [](const Reply& r) { return r.body["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(); };
    auto prompt_n = [](const Reply& r) { return r.body["usage"]["prompt_tokens"].get<int>(); };
    {
        Running two("q3_4L_kmix", options(2));
        ASSERT_EQ(post(two, "/v1/chat/completions", a).status, 200);
        ASSERT_EQ(post(two, "/v1/chat/completions", b).status, 200);
        const Reply again = post(two, "/v1/chat/completions", a);
        ASSERT_EQ(again.status, 200);
        EXPECT_EQ(cached(again), prompt_n(again) - 1) << "two slots: a's cache survives b";
        EXPECT_EQ(again.body["timings"]["cache_n"], cached(again));
    }
    {
        Running one("q3_4L_kmix", options(1));
        ASSERT_EQ(post(one, "/v1/chat/completions", a).status, 200);
        ASSERT_EQ(post(one, "/v1/chat/completions", b).status, 200);
        const Reply again = post(one, "/v1/chat/completions", a);
        EXPECT_LT(cached(again), prompt_n(again) / 2) << "one slot: b replaced a's cache";
    }
    {
        // A hybrid model cannot rewind, but resumes from the checkpoints generation keeps: the
        // same prompt again, and the conversation re-sent with its answer (thinking dropped).
        Running h("q35_4L_iq2mix", options(1));
        const Reply first = post(h, "/v1/chat/completions", a);
        ASSERT_EQ(first.status, 200);
        const Reply same = post(h, "/v1/chat/completions", a);
        EXPECT_EQ(cached(same), prompt_n(same) - 1);
        Json next = a;
        next["messages"].push_back({{"role", "assistant"}, {"content", same.body["choices"][0]["message"]["content"]}});
        next["messages"].push_back({{"role", "user"}, {"content", "And then?"}});
        const Reply turn = post(h, "/v1/chat/completions", next);
        ASSERT_EQ(turn.status, 200);
        // Resumed just after the first prompt's last <|im_start|> (then "assistant\n<think>\n").
        const auto m = model("q35_4L_iq2mix");
        const auto p1 = diskformer::chat_prompt(*m, std::vector<diskformer::ChatMessage>{{"user", a["messages"][0]["content"], {}}});
        ASSERT_EQ(static_cast<int>(p1.size()), prompt_n(first));
        const auto last = std::find(p1.rbegin(), p1.rend(), m->tokenize("<|im_start|>", true).at(0));
        EXPECT_EQ(cached(turn), p1.rend() - last);
        EXPECT_LT(cached(turn), prompt_n(first));
    }
}

TEST(Server, BadRequestsGetOpenAIErrorsAndTheServerGoesOn) {
    Running s("q3_4L_kmix", options(1, 64));
    const std::string chat = "/v1/chat/completions";
    const std::string long_text(2000, 'x');
    struct Case {
        std::string path, body, param, mentions;
    };
    const std::vector<Case> cases = {
        {chat, "{bad", "", "not valid JSON"},
        {chat, "[1, 2]", "", "JSON object"},
        {chat, "{}", "messages", "required"},
        {chat, R"({"messages": "hi"})", "messages", "non-empty array"},
        {chat, R"({"messages": [{"role": "robot", "content": "x"}]})", "messages[0].role", "robot"},
        {chat, R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", "messages[0].content", "image_url"},
        {chat, R"({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"})", "temperature", "number"},
        {chat, R"({"messages": [{"role": "user", "content": "x"}], "top_p": 0})", "top_p", "(0, 1]"},
        {chat, R"({"messages": [{"role": "user", "content": "x"}], "top_k": -2})", "top_k", "-1 or 0 (all)"},
        {chat, R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0})", "max_tokens", "at least 1"},
        {chat, R"({"messages": [{"role": "user", "content": "x"}], "n": 17})", "n", "between 1 and 16"},
        {chat, R"({"messages": [{"role": "user", "content": "x"}], "n": 0})", "n", "between 1 and 16"},
        {chat, R"({"messages": [{"role": "user", "content": "x"}], "stop": [""]})", "stop", "empty"},
        {chat, R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 21})", "top_logprobs", "between 0 and 20"},
        {chat, R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", "top_logprobs", "logprobs set to true"},
        {chat, R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 1})", "logprobs", "true or false"},
        {"/v1/completions", R"({"prompt": "x", "logprobs": -1})", "logprobs", "between 0 and 20"},
        {chat, R"({"messages": [{"role": "user", "content": "x"}], "frequency_penalty": 2.5})", "frequency_penalty", "between -2 and 2"},
        {chat, R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"abc": 1}})", "logit_bias", "token ids"},
        {chat, R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"5": 101}})", "logit_bias", "between -100 and 100"},
        {chat, R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"99999999": 1}})", "logit_bias", "past the vocabulary"},
        {chat, R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})", "tools[0].function", "must be an object"},
        {chat, R"({"messages": [{"role": "user", "content": "x"}], "tools": [], "tool_choice": "required"})", "tool_choice", "needs tools"},
        {chat, R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "always"})", "tool_choice", "\"required\""},
        {chat, R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "g"}}})", "tool_choice.function.name", "not among the tools"},
        {chat, R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "required", "response_format": {"type": "json_object"}})", "response_format", "cannot be combined"},
        {chat, R"({"messages": [{"role": "assistant", "content": "", "tool_calls": [{"function": {"arguments": "{}"}}]}]})", "messages[0].tool_calls[0].function.name", "string"},
        {chat, R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", "json_schema": {}}})", "response_format.json_schema.schema", "required"},
        {chat, R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "object", "properties": {"a": {"anyOf": []}}}}}})", "response_format.json_schema.schema", "anyOf"},
        {chat, R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "yaml"}})", "response_format", "json_schema"},
        {chat, R"({"messages": [{"role": "user", "content": "x"}], "response_format": "json"})", "response_format", "string \"type\""},
        {chat, Json{{"messages", {{{"role", "user"}, {"content", long_text}}}}}.dump(), "messages", "context holds 64"},
        {"/v1/completions", R"({"max_tokens": 3})", "prompt", "required"},
        {"/v1/completions", R"({"prompt": [1, 2, 3]})", "prompt", "string"},
    };
    for (const auto& c : cases) {
        const Reply r = post(s, c.path, c.body);
        EXPECT_EQ(r.status, 400) << c.body;
        const Json& e = r.body["error"];
        ASSERT_TRUE(e.is_object()) << c.body << " -> " << r.body.dump();
        EXPECT_EQ(e["type"], "invalid_request_error");
        EXPECT_NE(e["message"].get<std::string>().find(c.mentions), std::string::npos) << c.body << " -> " << e["message"];
        if (c.param.empty())
            EXPECT_TRUE(e["param"].is_null()) << c.body;
        else
            EXPECT_EQ(e["param"], c.param) << c.body;
    }
    const Reply too_long = post(s, chat, Json{{"messages", {{{"role", "user"}, {"content", long_text}}}}});
    EXPECT_EQ(too_long.body["error"]["code"], "context_length_exceeded");

    auto c = s.client();
    auto missing = c.Get("/v1/nothing");
    ASSERT_TRUE(missing);
    EXPECT_EQ(missing->status, 404);
    EXPECT_EQ(Json::parse(missing->body, nullptr, false)["error"]["type"], "not_found_error");

    // Still serving, and counting.
    const Reply ok = post(s, chat, chat_body({{"user", "hi"}}, 3));
    EXPECT_EQ(ok.status, 200);
    const Json h = health(s);
    EXPECT_EQ(h["requests"]["rejected"], cases.size() + 1);
    EXPECT_EQ(h["requests"]["served"], 1);
    EXPECT_EQ(h["requests"]["failed"], 0);

    // A body is JSON whatever its Content-Type says: curl -d sends application/x-www-form-urlencoded,
    // which httplib alone would parse as a form and refuse above 8 KB (padding: JSON whitespace).
    const std::string padded = chat_body({{"user", "hi"}}, 3).dump() + std::string(9000, ' ');
    auto form = c.Post(chat.c_str(), padded, "application/x-www-form-urlencoded");
    ASSERT_TRUE(form);
    EXPECT_EQ(form->status, 200) << form->body;
    EXPECT_EQ(Json::parse(form->body, nullptr, false)["object"], "chat.completion") << form->body;
    httplib::MultipartFormDataItems items = {{"messages", "[]", "", ""}};
    auto multipart = c.Post(chat.c_str(), items);
    ASSERT_TRUE(multipart);
    EXPECT_EQ(multipart->status, 400);
    EXPECT_NE(multipart->body.find("multipart"), std::string::npos) << multipart->body;
    EXPECT_EQ(post(s, chat, chat_body({{"user", "hi"}}, 3)).status, 200) << "the connection after a refused multipart body";
}

TEST(Server, ANewConversationBorrowsTheSharedSystemPromptFromAnotherSlot) {
    // Two conversations with one long system prompt on two slots: the second starts on the free
    // slot with the system turn copied from the first one's cache (after it, for the hybrid model:
    // its checkpoint there), and answers as it would alone.
    const std::string system =
        "You are the support assistant of a hardware shop. Be brief, polite and exact; never guess a price; "
        "ask for the order number when a question is about an order.";
    for (const char* name : {"q3_4L_kmix", "q35_4L_iq2mix"}) {
        SCOPED_TRACE(name);
        Running s(name, options(2));
        const Reply a = post(s, "/v1/chat/completions", chat_body({{"system", system}, {"user", "Do you sell drills?"}}, 6));
        ASSERT_EQ(a.status, 200);
        const Reply b = post(s, "/v1/chat/completions", chat_body({{"system", system}, {"user", "Where is my parcel?"}}, 6));
        ASSERT_EQ(b.status, 200);
        const int cached = b.body["usage"]["prompt_tokens_details"]["cached_tokens"];
        const auto sys_only = diskformer::chat_prompt(*model(name), std::vector<diskformer::ChatMessage>{{"system", system, {}}}, diskformer::Thinking::automatic, false);
        EXPECT_GE(cached, static_cast<int>(sys_only.size()) - 1) << "the system turn came from the other slot";
        const auto want = library_answer(name, {{"system", system, {}}, {"user", "Where is my parcel?", {}}}, 6);
        const Json& m = b.body["choices"][0]["message"];
        EXPECT_EQ(m.value("reasoning_content", "") + "|" + m["content"].get<std::string>(), want.reasoning + "|" + want.text);
        auto c = s.client();
        auto r = c.Get("/metrics");
        ASSERT_TRUE(r);
        EXPECT_NE(r->body.find("diskformer_prompt_tokens_shared_total " + std::to_string(cached) + "\n"), std::string::npos) << r->body;
        // The first conversation kept its slot: the same request again evaluates one token.
        const Reply again = post(s, "/v1/chat/completions", chat_body({{"system", system}, {"user", "Do you sell drills?"}}, 6));
        EXPECT_EQ(again.body["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(),
                  again.body["usage"]["prompt_tokens"].get<int>() - 1);
    }
}

TEST(Server, AFullQueueRefusesAtOnce) {
    ds::ServerOptions o = options(1, 4096);
    o.queue = 1;
    auto s = std::make_unique<Running>("q3_4L_kmix", o);
    const Json long_story = chat_body({{"user", "Write a very long story."}}, 4000);
    Reply a, b;
    std::thread ta([&] { a = post(*s, "/v1/chat/completions", long_story); });
    auto wait_for = [&](const char* key, int want) {
        for (int i = 0; i < 400 && health(*s)[key] != want; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        return health(*s)[key] == want;
    };
    ASSERT_TRUE(wait_for("slots_busy", 1));
    std::thread tb([&] { b = post(*s, "/v1/chat/completions", long_story); });
    ASSERT_TRUE(wait_for("requests_waiting", 1));
    const Reply c = post(*s, "/v1/chat/completions", chat_body({{"user", "hi"}}, 2));
    EXPECT_EQ(c.status, 503) << c.body.dump();
    EXPECT_EQ(c.body["error"]["code"], "server_overloaded");
    Json sc = chat_body({{"user", "hi"}}, 2);
    sc["stream"] = true;
    const Reply e = post(*s, "/v1/chat/completions", sc);
    EXPECT_EQ(e.status, 503) << "a stream is refused before its headers";
    EXPECT_EQ(health(*s)["requests"]["rejected"], 2);
    s->server().stop();
    ta.join();
    tb.join();
    EXPECT_EQ(a.status, 503);
    EXPECT_EQ(b.status, 503);
    s.reset();
}

TEST(Server, BestOfReturnsTheCandidatesWithTheHighestLogprobPerToken) {
    // best_of 4, n 2 on two slots: the candidates are the seeded generations seed .. seed + 3, and
    // the two with the highest mean log-probability come back, best first.
    const char* name = "q3_4L_kmix";
    Running s(name, options(2));
    const std::string prompt = "<|im_start|>user\nTell me a word.<|im_end|>\n<|im_start|>assistant\n";
    const Json body = {{"prompt", prompt}, {"max_tokens", 10}, {"temperature", 1.0}, {"top_k", 0}, {"seed", 7}, {"n", 2}, {"best_of", 4}};
    const Reply r = post(s, "/v1/completions", body);
    ASSERT_EQ(r.status, 200) << r.body.dump();
    ASSERT_EQ(r.body["choices"].size(), 2u);
    const auto ids = model(name)->tokenize(prompt, true);
    std::vector<std::pair<double, std::string>> cands;
    int64_t tokens = 0;
    for (int i = 0; i < 4; ++i) {
        diskformer::Session lib(model(name), {.ctx = 512});
        diskformer::GenerateOptions o;
        o.max_tokens = 10;
        o.temperature = 1.0f;
        o.top_k = 0;
        o.seed = 7 + i;
        o.logprobs = 0;
        const auto g = diskformer::generate(lib, ids, o);
        double sum = 0;
        for (const auto& t : g.logprobs) sum += t.chosen.logprob;
        cands.emplace_back(sum / g.logprobs.size(), g.text);
        tokens += static_cast<int64_t>(g.tokens.size());
    }
    std::stable_sort(cands.begin(), cands.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    EXPECT_EQ(r.body["choices"][0]["text"], cands[0].second);
    EXPECT_EQ(r.body["choices"][1]["text"], cands[1].second);
    EXPECT_EQ(r.body["choices"][0]["index"], 0);
    EXPECT_TRUE(r.body["choices"][0]["logprobs"].is_null()) << "not asked for";
    EXPECT_EQ(r.body["usage"]["completion_tokens"], tokens) << "every candidate counts";
    // Refused: fewer candidates than choices, and candidates in a stream.
    Json fewer = body;
    fewer["best_of"] = 1;
    EXPECT_EQ(post(s, "/v1/completions", fewer).status, 400);
    Json streamed = body;
    streamed["stream"] = true;
    const Reply st = post(s, "/v1/completions", streamed);
    EXPECT_EQ(st.status, 400);
    EXPECT_EQ(st.body["error"]["param"], "best_of");
}

TEST(Server, MetricsCountWhatRequestsDid) {
    Running s("q3_4L_kmix", options(2));
    const Reply a = post(s, "/v1/chat/completions", chat_body({{"user", "Name a fish."}}, 10));
    const Reply b = post(s, "/v1/chat/completions", chat_body({{"user", "Name a fish."}}, 10));  // its prompt cached
    ASSERT_EQ(a.status, 200);
    ASSERT_EQ(b.status, 200);
    EXPECT_EQ(post(s, "/v1/chat/completions", std::string("{")).status, 400);
    auto c = s.client();
    auto r = c.Get("/metrics");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->get_header_value("Content-Type").rfind("text/plain; version=0.0.4", 0), 0u);
    std::map<std::string, double> m;  // sample name (with labels) -> value
    std::istringstream lines(r->body);
    for (std::string line; std::getline(lines, line);) {
        if (line.empty() || line[0] == '#') continue;
        const size_t sp = line.rfind(' ');
        ASSERT_NE(sp, std::string::npos) << line;
        ASSERT_EQ(line.rfind("diskformer_", 0), 0u) << line;
        m[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
    }
    auto usage = [](const Reply& x, const char* k) { return x.body["usage"][k].get<double>(); };
    EXPECT_EQ(m["diskformer_requests_total{outcome=\"served\"}"], 2);
    EXPECT_EQ(m["diskformer_requests_total{outcome=\"rejected\"}"], 1);
    EXPECT_EQ(m["diskformer_prompt_tokens_total"], usage(a, "prompt_tokens") + usage(b, "prompt_tokens"));
    EXPECT_EQ(m["diskformer_generated_tokens_total"], usage(a, "completion_tokens") + usage(b, "completion_tokens"));
    EXPECT_EQ(m["diskformer_prompt_tokens_cached_total"], b.body["usage"]["prompt_tokens_details"]["cached_tokens"].get<double>());
    EXPECT_GT(m["diskformer_prompt_tokens_cached_total"], 0);
    EXPECT_GT(m["diskformer_decode_seconds_total"], 0);
    EXPECT_EQ(m["diskformer_slots"], 2);
    EXPECT_EQ(m["diskformer_slots_busy"], 0);
    EXPECT_EQ(m["diskformer_requests_waiting"], 0);
    EXPECT_GE(m["diskformer_lone_steps_total"], usage(a, "completion_tokens") - 1) << "one request at a time: lone steps";
}

TEST(Server, AnApiKeyGuardsTheApiButNotHealth) {
    ds::ServerOptions o = options();
    o.api_key = "sekret";
    Running s("q3_4L_kmix", o);
    const std::string body = chat_body({{"user", "hi"}}, 2).dump();
    const Reply none = post(s, "/v1/chat/completions", body);
    EXPECT_EQ(none.status, 401);
    EXPECT_EQ(none.body["error"]["type"], "authentication_error");
    EXPECT_EQ(post(s, "/v1/chat/completions", body, {{"Authorization", "Bearer wrong"}}).status, 401);
    EXPECT_EQ(post(s, "/v1/chat/completions", body, {{"Authorization", "Bearer sekret"}}).status, 200);
    auto c = s.client();
    auto models = c.Get("/v1/models");
    ASSERT_TRUE(models);
    EXPECT_EQ(models->status, 401);
    const std::string tok = R"({"content": "hi"})";
    EXPECT_EQ(post(s, "/tokenize", tok).status, 401);
    EXPECT_EQ(post(s, "/tokenize", tok, {{"Authorization", "Bearer sekret"}}).status, 200);
    EXPECT_EQ(health(s)["status"], "ok");
}

// llama.cpp's utility routes: /tokenize (control tokens parsed unless asked not to; pieces as
// text, or bytes for part of a character), /detokenize, /apply-template (the prompt a chat
// request would be given); bad bodies are 400s.
TEST(Server, TokenizeDetokenizeAndApplyTemplate) {
    const char* name = "q3_4L_kmix";
    Running s(name);
    const auto& m = *model(name);
    const std::string text = "<|im_start|>user\nhé 😀";
    const Reply t = post(s, "/tokenize", Json{{"content", text}});
    ASSERT_EQ(t.status, 200) << t.body.dump();
    EXPECT_EQ(t.body["tokens"], Json(m.tokenize(text, true)));
    const Reply plain = post(s, "/tokenize", Json{{"content", text}, {"parse_special", false}});
    EXPECT_EQ(plain.body["tokens"], Json(m.tokenize(text, false)));
    EXPECT_NE(plain.body["tokens"], t.body["tokens"]);

    const Reply pieces = post(s, "/tokenize", Json{{"content", text}, {"with_pieces", true}});
    ASSERT_EQ(pieces.status, 200) << pieces.body.dump();
    std::string joined;
    for (const auto& p : pieces.body["tokens"]) {
        ASSERT_TRUE(p["id"].is_number_integer());
        if (p["piece"].is_string()) joined += p["piece"].get<std::string>();
        else for (const auto& b : p["piece"]) joined += static_cast<char>(b.get<int>());
    }
    EXPECT_EQ(joined, text) << "the pieces spell the text, bytes and all";

    const Reply d = post(s, "/detokenize", Json{{"tokens", t.body["tokens"]}});
    ASSERT_EQ(d.status, 200) << d.body.dump();
    EXPECT_EQ(d.body["content"], text);

    const Json chat = chat_body(kConversation, 4);
    const Reply a = post(s, "/apply-template", chat);
    ASSERT_EQ(a.status, 200) << a.body.dump();
    EXPECT_EQ(a.body["prompt"], m.detokenize(diskformer::chat_prompt(m, to_messages(kConversation))));

    for (const auto& [path, bad] : std::vector<std::pair<std::string, std::string>>{
             {"/tokenize", "{}"}, {"/tokenize", R"({"content": 5})"}, {"/tokenize", R"({"content": "x", "with_pieces": 1})"},
             {"/detokenize", R"({"tokens": [1, -1]})"}, {"/detokenize", R"({"tokens": [99999999]})"},
             {"/detokenize", R"({"tokens": "1"})"}, {"/apply-template", R"({"messages": []})"}, {"/tokenize", "not json"}}) {
        const Reply r = post(s, path, bad, {});
        EXPECT_EQ(r.status, 400) << path << " " << bad << ": " << r.body.dump();
        EXPECT_TRUE(r.body.contains("error")) << path << " " << bad;
    }
}

TEST(Server, ModelsListsTheServedModel) {
    Running s("q35_4L_iq2mix");
    auto c = s.client();
    auto r = c.Get("/v1/models");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200);
    const Json j = Json::parse(r->body);
    ASSERT_EQ(j["data"].size(), 1u);
    EXPECT_EQ(j["data"][0]["id"], "test-model");
    EXPECT_EQ(j["data"][0]["meta"]["arch"], "qwen35");
    EXPECT_EQ(j["data"][0]["meta"]["n_ctx"], s.server().n_ctx());
    EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "*");
}

TEST(Server, AClientThatLeavesAStreamEndsItsGeneration) {
    Running s("q3_4L_kmix", options(1, 4096));
    Json body = chat_body({{"user", "Write a very long story."}}, 4000);
    body["stream"] = true;
    auto c = s.client();
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/chat/completions";
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    size_t received = 0;
    req.content_receiver = [&](const char*, size_t n, uint64_t, uint64_t) {
        received += n;
        return received < 2000;  // a few chunks, then hang up
    };
    c.send(req);  // fails by design: the receiver cancelled
    EXPECT_GE(received, 2000u);
    Json h;
    for (int i = 0; i < 600; ++i) {  // the server notices at its next write
        h = health(s);
        if (h["requests"]["aborted"] == 1) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_EQ(h["requests"]["aborted"], 1) << h.dump();
    EXPECT_EQ(h["requests"]["served"], 0) << "the generation ran to its end: " << h.dump();
    EXPECT_EQ(post(s, "/v1/chat/completions", chat_body({{"user", "hi"}}, 2)).status, 200);
}

TEST(Server, StopEndsTheRequestInProgress) {
    auto s = std::make_unique<Running>("q3_4L_kmix", options(1, 4096));
    Reply r;
    std::thread client([&] { r = post(*s, "/v1/chat/completions", chat_body({{"user", "Write a very long story."}}, 4000)); });
    // 4,000 tokens take seconds on this model; stop a moment after the request went out.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    s->server().stop();
    client.join();
    EXPECT_EQ(r.status, 503) << r.body.dump();
    EXPECT_NE(r.body["error"]["message"].get<std::string>().find("shutting down"), std::string::npos);
    s.reset();  // run() returned: the destructor joins it
}

TEST(Server, ConcurrentRequestsAreEachAnsweredAsIfAlone) {
    // Seven requests at once on three slots of a hybrid model (the rest wait for a slot), some
    // streamed: each answer is the library's alone, and the requests in flight shared passes.
    Running s("q35_4L_iq2mix", options(3));
    const std::vector<std::string> questions = {"What is rain?",      "Why is snow white?", "Name a fish.", "Count to three.",
                                                "Say hello twice.", "What do cats eat?",  "Spell 'tree'."};
    std::vector<std::string> answers(questions.size());
    std::vector<int> statuses(questions.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < questions.size(); ++i)
        threads.emplace_back([&, i] {
            const Json body = chat_body({{"user", questions[i]}}, 16 + static_cast<int>(i));
            if (i % 3 == 1) {
                const Events e = post_stream(s, "/v1/chat/completions", body);
                statuses[i] = e.done ? e.status : -1;
                std::string reasoning, content;
                for (const Json& ev : e.events)
                    if (!ev["choices"].empty()) {
                        reasoning += ev["choices"][0]["delta"].value("reasoning_content", "");
                        content += ev["choices"][0]["delta"].value("content", "");
                    }
                answers[i] = reasoning + "|" + content;
            } else {
                const Reply r = post(s, "/v1/chat/completions", body);
                statuses[i] = r.status;
                if (r.status == 200) {
                    const Json& m = r.body["choices"][0]["message"];
                    answers[i] = m.value("reasoning_content", "") + "|" + m["content"].get<std::string>();
                }
            }
        });
    for (auto& t : threads) t.join();
    for (size_t i = 0; i < questions.size(); ++i) {
        ASSERT_EQ(statuses[i], 200) << questions[i];
        const auto want = library_answer("q35_4L_iq2mix", {{"user", questions[i], {}}}, 16 + static_cast<int>(i));
        EXPECT_EQ(answers[i], want.reasoning + "|" + want.text) << questions[i];
        EXPECT_GT(answers[i].size(), 1u) << "the model said nothing: the comparison is empty";
    }
    const Json h = health(s);
    EXPECT_EQ(h["slots_busy"], 0) << h.dump();
    EXPECT_EQ(h["requests"]["served"], questions.size()) << h.dump();
    EXPECT_GT(h["batching"]["passes"].get<int>(), 0) << h.dump();
}

TEST(OpenAI, ParsesTheFieldsClientsSend) {
    diskformer::GenerateOptions defaults;
    defaults.top_k = 7;
    const Json body = Json::parse(R"({
        "model": "x",
        "messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Hello, "}, {"type": "text", "text": "there"}]},
            {"role": "assistant", "content": "Hi.", "reasoning_content": "greet back", "tool_calls": []},
            {"role": "user", "content": "Again"}
        ],
        "max_completion_tokens": 9, "temperature": 0.5, "top_p": 0.9, "seed": -3, "stop": "END", "frequency_penalty": 0.25,
        "stream": true, "stream_options": {"include_usage": true},
        "chat_template_kwargs": {"enable_thinking": false}, "user": "ignored", "tools": [], "n": 1
    })");
    const ds::Request r = ds::parse_chat_request(body, defaults);
    ASSERT_EQ(r.messages.size(), 4u);
    EXPECT_EQ(r.messages[0].role, "system");
    EXPECT_EQ(r.messages[1].content, "Hello, there");
    EXPECT_EQ(r.messages[2].reasoning, "greet back");
    EXPECT_EQ(r.gen.max_tokens, 9);
    EXPECT_FLOAT_EQ(r.gen.temperature, 0.5f);
    EXPECT_FLOAT_EQ(r.gen.top_p, 0.9f);
    EXPECT_EQ(r.gen.top_k, 7) << "left out: the server's default";
    for (const int k : {-1, 0}) {  // vLLM's "all" and ours
        const auto all = ds::parse_chat_request(Json{{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"top_k", k}}, defaults);
        EXPECT_EQ(all.gen.top_k, 0) << k;
    }
    EXPECT_EQ(r.gen.seed, static_cast<uint64_t>(-3));
    EXPECT_EQ(r.gen.stop, std::vector<std::string>{"END"});
    EXPECT_FLOAT_EQ(r.gen.frequency_penalty, 0.25f);
    EXPECT_TRUE(r.stream);
    EXPECT_TRUE(r.include_usage);
    EXPECT_EQ(r.thinking, diskformer::Thinking::off);

    // null means "not given"; a sampled request without a seed draws one.
    const Json plain = Json::parse(R"({"messages": [{"role": "user", "content": "x"}], "temperature": 1, "max_tokens": null, "seed": null})");
    const auto a = ds::parse_chat_request(plain, defaults), b = ds::parse_chat_request(plain, defaults);
    EXPECT_EQ(a.gen.max_tokens, -1);
    EXPECT_NE(a.gen.seed, b.gen.seed);
    EXPECT_EQ(a.gen.logprobs, -1);

    // Log-probabilities: chat's boolean + count, completions' count.
    const auto lp = ds::parse_chat_request(Json::parse(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 4})"), defaults);
    EXPECT_EQ(lp.gen.logprobs, 4);
    const auto only = ds::parse_chat_request(Json::parse(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true})"), defaults);
    EXPECT_EQ(only.gen.logprobs, 0);
    const auto off = ds::parse_chat_request(Json::parse(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": false, "top_logprobs": 0})"), defaults);
    EXPECT_EQ(off.gen.logprobs, -1);
    EXPECT_EQ(ds::parse_completion_request(Json::parse(R"({"prompt": "x", "logprobs": 2})"), defaults).gen.logprobs, 2);
}

// Tools and tool calls in requests: the signatures printed as the template's tojson does (from
// the client-ordered body when given), an assistant turn's calls, tool_choice "none".
TEST(OpenAI, ParsesToolsAndToolCalls) {
    const std::string text = R"({"messages": [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
            {"id": "c2", "type": "function", "function": {"name": "get_time", "arguments": {"tz": "CET", "h": 1.5}}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Wetter — \"jetzt\"", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
        "parallel_tool_calls": true})";
    const Json body = Json::parse(text);
    const auto ordered = nlohmann::ordered_json::parse(text);
    const auto r = ds::parse_chat_request(body, {}, &ordered);
    ASSERT_EQ(r.tools.size(), 1u);
    EXPECT_EQ(r.tools[0], R"({"type": "function", "function": {"name": "get_weather", "description": "Wetter — \"jetzt\"", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}})");
    // Without the ordered body the keys come sorted (still valid, not the client's order).
    EXPECT_EQ(ds::parse_chat_request(body, {}).tools[0].rfind(R"({"function": {"description")", 0), 0u);
    ASSERT_EQ(r.messages[1].tool_calls.size(), 2u);
    EXPECT_EQ(r.messages[1].content, "");
    EXPECT_EQ(r.messages[1].tool_calls[0].name, "get_weather");
    EXPECT_EQ(r.messages[1].tool_calls[0].arguments, R"({"city": "Paris"})");
    EXPECT_EQ(r.messages[1].tool_calls[1].arguments, R"({"h": 1.5, "tz": "CET"})");
    EXPECT_EQ(r.messages[2].role, "tool");
    Json none = body;
    none["tool_choice"] = "none";
    EXPECT_TRUE(ds::parse_chat_request(none, {}).tools.empty());
    Json required = body;
    required["tool_choice"] = "required";
    const auto req = ds::parse_chat_request(required, {}, &ordered);
    EXPECT_TRUE(req.gen.json);
    EXPECT_EQ(req.gen.json_before, "<tool_call>\n");
    EXPECT_EQ(req.gen.json_after, "\n</tool_call>");
    EXPECT_NE(req.gen.json_schema.find(R"("name":{"const":"get_weather"})"), std::string::npos) << "the only tool";
    Json named = body;
    named["tool_choice"] = Json::parse(R"({"type": "function", "function": {"name": "get_weather"}})");
    const auto nreq = ds::parse_chat_request(named, {}, &ordered);
    EXPECT_NE(nreq.gen.json_schema.find(R"("arguments":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})"),
              std::string::npos) << nreq.gen.json_schema;
}

// The model's <tool_call> blocks: parsed into calls (arguments as compact JSON in the model's
// order), the rest trimmed into content; a block that is not a call stays text; a last block
// cut off by the end is parsed; a stream holds back from the first "<tool_call>" (and a tail
// that may become one) and gives the same calls at the end.
TEST(OpenAI, ToolCallsFromTheAnswer) {
    const std::string answer = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n</tool_call>\n"
                               "<tool_call>\n{\"name\": \"get_time\"}\n</tool_call>";
    const auto t = ds::parse_tool_calls(answer);
    ASSERT_EQ(t.calls.size(), 2u);
    EXPECT_EQ(t.calls[0].name, "get_weather");
    EXPECT_EQ(t.calls[0].arguments, R"({"city":"Paris","days":2})");
    EXPECT_EQ(t.calls[1].arguments, "{}");
    EXPECT_EQ(t.content, "Let me check.");
    const auto broken = ds::parse_tool_calls("a <tool_call>not json</tool_call> b");
    EXPECT_TRUE(broken.calls.empty());
    EXPECT_EQ(broken.content, "a <tool_call>not json</tool_call> b");
    const auto cut = ds::parse_tool_calls("<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n");
    ASSERT_EQ(cut.calls.size(), 1u);
    EXPECT_EQ(cut.content, "");

    for (size_t step : {1, 3, 7, 1000}) {
        SCOPED_TRACE("pieces of " + std::to_string(step));
        ds::ToolCallStream st;
        std::string sent;
        for (size_t i = 0; i < answer.size(); i += step) sent += st.push(std::string_view(answer).substr(i, step));
        const auto end = st.finish();
        EXPECT_EQ(sent, "Let me check.");
        EXPECT_EQ(end.content, "");
        ASSERT_EQ(end.calls.size(), 2u);
        EXPECT_EQ(end.calls[1].name, "get_time");
    }
    ds::ToolCallStream plain;
    std::string sent = plain.push("if a <");
    sent += plain.push(" b then <tool");
    const auto end = plain.finish();
    EXPECT_EQ(sent + end.content, "if a < b then <tool");
    EXPECT_TRUE(end.calls.empty());

    // The answer's shape: content null, tool_calls with ids, finish_reason "tool_calls".
    ds::Request req;
    req.tools = {"{}"};
    diskformer::GenerateResult res;
    res.text = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
    const Json j = ds::response_json(req, {"chatcmpl-00ab", "m", 1}, res);
    const Json& c = j["choices"][0];
    EXPECT_EQ(c["finish_reason"], "tool_calls");
    EXPECT_TRUE(c["message"]["content"].is_null());
    EXPECT_EQ(c["message"]["tool_calls"][0]["id"], "call_00ab_0");
    EXPECT_EQ(c["message"]["tool_calls"][0]["type"], "function");
    EXPECT_EQ(c["message"]["tool_calls"][0]["function"]["name"], "get_time");
    EXPECT_EQ(c["message"]["tool_calls"][0]["function"]["arguments"], "{}");
    const Json d = ds::tool_calls_chunk(req, {"chatcmpl-00ab", "m", 1}, ds::parse_tool_calls(res.text).calls);
    EXPECT_EQ(d["choices"][0]["delta"]["tool_calls"][0]["index"], 0);
    EXPECT_EQ(ds::finish_chunk(req, {"chatcmpl-00ab", "m", 1}, diskformer::StopReason::end_token, true)["choices"][0]["finish_reason"], "tool_calls");
}

// The shapes alone: a token split inside a UTF-8 character is carried as U+FFFD with its exact
// bytes, a ruled-out token's log-probability is -9999, thinking tokens go under
// reasoning_content, and completions' offsets run on from the given one.
TEST(OpenAI, LogprobsShapes) {
    const ds::TokenText text = [](int32_t id) { return id == 1 ? std::string("\xE4\xBD") : id == 2 ? std::string("ab") : std::string("c"); };
    std::vector<ds::LogprobToken> toks = {{{{1, -0.5f}, {{1, -0.5f}, {2, -1.5f}}}, diskformer::Part::reasoning},
                                          {{{2, -INFINITY}, {}}, diskformer::Part::answer}};
    ds::Request chat;
    size_t off = 0;
    const Json j = ds::logprobs_json(chat, toks, text, off);
    ASSERT_EQ(j["reasoning_content"].size(), 1u);
    EXPECT_EQ(j["reasoning_content"][0]["token"], "\xEF\xBF\xBD\xEF\xBF\xBD");
    EXPECT_EQ(j["reasoning_content"][0]["bytes"], Json::array({0xE4, 0xBD}));
    EXPECT_EQ(j["reasoning_content"][0]["top_logprobs"][1]["token"], "ab");
    ASSERT_EQ(j["content"].size(), 1u);
    EXPECT_EQ(j["content"][0]["logprob"], -9999.0);
    EXPECT_NO_THROW((void)j.dump());

    ds::Request comp;
    comp.chat = false;
    off = 10;
    const Json c = ds::logprobs_json(comp, toks, text, off);
    EXPECT_EQ(c["text_offset"], Json::array({10, 12}));
    EXPECT_EQ(off, 14u);
    EXPECT_EQ(c["top_logprobs"][0]["ab"], -1.5);
    EXPECT_EQ(c["token_logprobs"][1], -9999.0);
}

}  // namespace
