// diskformer serve: the OpenAI-compatible HTTP server (server/server.h) from the command line.
// SIGINT / SIGTERM stop it cleanly: a thread waits for them (blocked everywhere else), so the
// stop runs outside a signal handler.
#include <CLI/CLI.hpp>

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <thread>

#include "cli_common.h"
#include "commands.h"
#include "gen_args.h"
#include "server/server.h"

namespace {

struct ServeArgs {
    ModelArgs model;
    DraftArgs draft;
    df::server::ServerOptions server;
    SamplingArgs defaults;  // for the fields a request leaves out
};

void serve(ServeArgs& a) {
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);  // before any thread starts: all inherit it

    auto& o = a.server;
    if (o.model_id.empty()) o.model_id = std::filesystem::path(a.model.path).stem().string();
    if (o.api_key.empty())
        if (const char* k = std::getenv("DISKFORMER_API_KEY")) o.api_key = k;
    o.session = a.model.session_options();
    auto model = diskformer::Model::load(a.model.path, a.model.model_options());
    o.draft_model = a.draft.load(*model);
    o.dflash_dir = a.draft.dflash;
    if (a.draft.any()) a.defaults.default_draft_for_model();
    a.defaults.apply(o.defaults);
    df::server::Server server(model, o);
    const int port = server.bind();
    const auto& info = model->info();
    const std::string drafting =
        a.draft.any() ? ", drafts of " + std::to_string(o.defaults.draft) + " by " +
                            std::filesystem::path(!a.draft.path.empty() ? a.draft.path : a.draft.dflash).filename().string()
                      : "";
    std::fprintf(stderr, "serving %s (%s, %s backend, %d slot%s of %d tokens%s) on http://%s:%d/v1%s\n", o.model_id.c_str(),
                 info.arch.c_str(), info.backend.c_str(), o.slots, o.slots == 1 ? "" : "s", server.n_ctx(), drafting.c_str(),
                 o.host.c_str(), port, o.api_key.empty() ? "" : " (API key required)");
    std::atomic<bool> returned{false};
    std::thread waiter([&server, &returned, stop_signals] {
        int sig = 0;
        sigwait(&stop_signals, &sig);
        if (returned) return;
        std::fprintf(stderr, "stopping (%s)\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
        server.stop();
    });
    server.run();
    // run() also returns if the listener fails: wake the waiter (a no-op if a signal did).
    returned = true;
    pthread_kill(waiter.native_handle(), SIGTERM);
    waiter.join();
}

}  // namespace

void register_serve(CLI::App& app) {
    auto a = std::make_shared<ServeArgs>();
    auto* cmd = app.add_subcommand("serve", "Serve the model over an OpenAI-compatible HTTP API (/v1/chat/completions, /v1/completions)");
    a->model.add_to(*cmd);
    auto& s = a->server;
    cmd->add_option("--host", s.host, "address to listen on (0.0.0.0: every interface)")->capture_default_str();
    cmd->add_option("--port", s.port, "TCP port (0: any free one)")->capture_default_str()->check(in_range(0, 65535));
    cmd->add_option("--slots", s.slots, "requests served at once, their steps batched (each slot keeps a conversation cached in a KV cache of --ctx tokens)")
        ->capture_default_str()
        ->check(in_range(1, 64));
    cmd->add_option("--queue", s.queue, "requests that may wait for a slot; more are refused at once (HTTP 503)")
        ->capture_default_str()
        ->check(non_negative());
    cmd->add_option("--alias", s.model_id, "the model's name in the API (default: the file name)");
    cmd->add_option("--api-key", s.api_key, "require 'Authorization: Bearer KEY' (default: $DISKFORMER_API_KEY; none)");
    cmd->add_flag("!--no-log", s.log, "do not print a line per request");
    a->defaults.add_to(*cmd);  // the defaults for fields a request leaves out
    a->draft.add_to(*cmd);
    cmd->callback([a] { serve(*a); });
}
