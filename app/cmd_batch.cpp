// diskformer batch: many prompts answered at once (continuous batching), one JSON line out per
// line in, in input order, as soon as the answers before it are written.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli_common.h"
#include "commands.h"
#include "diskformer/generate.h"
#include "gen_args.h"
#include "gen_output.h"
#include "server/openai.h"

namespace {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;  // answers keep "index" first

struct BatchArgs {
    ModelArgs model;
    GenArgs gen;
    std::string in = "-", out = "-";
    int parallel = 4;
    bool raw = false;
};

// One input line: the prompt's tokens, or why there are none; and the caller's id, echoed.
struct Item {
    std::vector<int32_t> prompt;
    std::string error;
    Json id;
    bool has_id = false;
};

std::vector<std::string> read_lines(const std::string& path) {
    std::ifstream file;
    if (path != "-") {
        file.open(path, std::ios::binary);
        if (!file) throw diskformer::Error("cannot open '" + path + "'");
    }
    std::istream& in = path == "-" ? std::cin : file;
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.find_first_not_of(" \t") != std::string::npos) lines.push_back(line);
    }
    return lines;
}

// A JSON object line {"prompt": "..."} or {"messages": [{"role": ..., "content": ...}, ...]}
// (with an optional "id"); any other line is the prompt text itself.
Item parse_item(const std::string& line, const diskformer::Model& model, const BatchArgs& a) {
    Item it;
    const Json j = Json::parse(line, nullptr, false);
    try {
        std::vector<diskformer::ChatMessage> msgs;
        if (!a.gen.system.empty()) msgs.push_back({"system", a.gen.system, {}});
        std::string text = line;
        if (j.is_object()) {
            if (j.contains("id")) {
                it.id = j["id"];
                it.has_id = true;
            }
            if (j.contains("messages") == j.contains("prompt"))
                throw diskformer::Error("a JSON line needs \"prompt\" (a string) or \"messages\" (an array), not both");
            if (j.contains("messages")) {
                if (a.raw) throw diskformer::Error("--raw takes prompts, not messages");
                if (!j["messages"].is_array() || j["messages"].empty()) throw diskformer::Error("\"messages\" must be a non-empty array");
                for (const Json& m : j["messages"]) {
                    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
                        !m["content"].is_string())
                        throw diskformer::Error("each message needs a string \"role\" and a string \"content\"");
                    msgs.push_back({m["role"], m["content"], {}});
                }
                it.prompt = diskformer::chat_prompt(model, msgs, a.gen.thinking());
                return it;
            }
            if (!j["prompt"].is_string()) throw diskformer::Error("\"prompt\" must be a string");
            text = j["prompt"];
        }
        if (a.raw) {
            it.prompt = model.tokenize(text, true);
        } else {
            msgs.push_back({"user", text, {}});
            it.prompt = diskformer::chat_prompt(model, msgs, a.gen.thinking());
        }
        if (it.prompt.empty()) throw diskformer::Error("the prompt is empty");
    } catch (const std::exception& e) {
        it.error = e.what();
    }
    return it;
}

int run(BatchArgs& a) {
    const std::vector<std::string> lines = read_lines(a.in);
    std::FILE* out = a.out == "-" ? stdout : std::fopen(a.out.c_str(), "wb");
    if (!out) throw diskformer::Error("cannot write '" + a.out + "'");
    auto model = diskformer::Model::load(a.model.path, a.model.model_options());
    const diskformer::GenerateOptions base = a.gen.options();
    std::vector<Item> items;
    for (const auto& line : lines) items.push_back(parse_item(line, *model, a));
    const int workers = std::max(1, std::min<int>(a.parallel, static_cast<int>(items.size())));
    std::vector<std::unique_ptr<diskformer::Session>> sessions;
    for (int i = 0; i < workers; ++i) sessions.push_back(std::make_unique<diskformer::Session>(model, a.model.session_options()));
    install_interrupt_handler();

    // Answers are written in input order: each waits for those before it.
    std::mutex mu;
    std::vector<std::optional<std::string>> done(items.size());
    size_t written = 0;
    int64_t prompt_tokens = 0, generated = 0, failed = 0;
    auto finish = [&](size_t i, OrderedJson j) {
        std::lock_guard l(mu);
        done[i] = j.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
        for (; written < done.size() && done[written]; ++written) std::fprintf(out, "%s\n", done[written]->c_str());
        std::fflush(out);
    };
    std::atomic<size_t> next{0};
    const auto t0 = std::chrono::steady_clock::now();
    auto work = [&](diskformer::Session& s) {
        for (size_t i; (i = next++) < items.size() && !interrupt_flag();) {
            OrderedJson j = {{"index", i}};
            if (items[i].has_id) j["id"] = items[i].id;
            if (!items[i].error.empty()) {
                j["error"] = items[i].error;
                std::lock_guard l(mu);
                ++failed;
            } else {
                try {
                    diskformer::GenerateOptions o = base;
                    o.seed = base.seed + i;  // sampled answers differ by line, and repeat with --seed
                    o.abort = &interrupt_flag();
                    // Each line from an empty cache: which lines ran before on this session
                    // depends on --parallel and timing, and a reused prefix may round its last
                    // rows differently (a short pass takes the matvec path, DESIGN.md numerics).
                    s.reset();
                    const auto r = diskformer::generate(s, items[i].prompt, o);
                    if (r.stop == diskformer::StopReason::aborted) return;  // Ctrl-C: this line is not written
                    j["text"] = r.text;
                    if (!r.reasoning.empty()) j["reasoning"] = r.reasoning;
                    j["finish_reason"] = df::server::finish_reason(r.stop);
                    j["prompt_tokens"] = r.stats.prompt_tokens;
                    j["cached_tokens"] = r.stats.reused_tokens;
                    j["completion_tokens"] = r.stats.generated_tokens;
                    std::lock_guard l(mu);
                    prompt_tokens += r.stats.prompt_tokens;
                    generated += r.stats.generated_tokens;
                } catch (const std::exception& e) {
                    s.reset();  // whatever failed mid-pass, the next line starts clean
                    j["error"] = e.what();
                    std::lock_guard l(mu);
                    ++failed;
                }
            }
            finish(i, std::move(j));
        }
    };
    std::vector<std::thread> threads;
    for (int w = 0; w < workers; ++w) threads.emplace_back(work, std::ref(*sessions[w]));
    for (auto& t : threads) t.join();
    if (out != stdout) std::fclose(out);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto b = model->batch_stats();
    std::fprintf(stderr,
                 "%zu of %zu prompts answered (%lld failed) · %lld prompt tokens · %lld generated in %.2f s = %.1f tok/s · "
                 "%d at once, %llu shared passes of %llu steps · seed %llu\n",
                 written - static_cast<size_t>(failed), items.size(), static_cast<long long>(failed),
                 static_cast<long long>(prompt_tokens), static_cast<long long>(generated), sec, sec > 0 ? generated / sec : 0,
                 workers, static_cast<unsigned long long>(b.passes), static_cast<unsigned long long>(b.batched_steps),
                 static_cast<unsigned long long>(base.seed));
    if (interrupt_flag()) return 130;
    return failed > 0 ? 2 : 0;
}

}  // namespace

void register_batch(CLI::App& app) {
    auto a = std::make_shared<BatchArgs>();
    auto* cmd = app.add_subcommand(
        "batch",
        "Answer many prompts at once: JSON lines in ({\"prompt\": ...} or {\"messages\": [...]}, optional \"id\"; any "
        "other line is a prompt), one JSON line out per prompt, in input order");
    a->model.add_to(*cmd);
    cmd->add_option("-i,--input", a->in, "prompts, one per line (- : stdin)")->capture_default_str();
    cmd->add_option("-o,--output", a->out, "answers as JSON lines (- : stdout)")->capture_default_str();
    cmd->add_option("--parallel", a->parallel,
                    "prompts generated at once (each a session of --ctx tokens; their steps share passes)")
        ->capture_default_str()
        ->check(in_range(1, 64));
    cmd->add_flag("--raw", a->raw, "feed each prompt as is, without the chat template (control tokens parsed)");
    a->gen.add_to(*cmd);
    cmd->callback([a] {
        const int code = run(*a);
        if (code != 0) std::exit(code);
    });
}
