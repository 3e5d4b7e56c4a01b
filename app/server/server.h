// `diskformer serve`: an OpenAI-compatible HTTP server over one model.
//
//   POST /v1/chat/completions   messages in Qwen's chat format; "stream": true for server-sent events
//   POST /v1/completions        a raw prompt (control tokens parsed)
//   GET  /v1/models, /health, /metrics (Prometheus text)
//
// Requests run at once, one per session ("slot", each keeping its cache), up to --slots; more
// wait for a slot. Their one-token steps are batched into shared passes by the library (each
// weight read once for all of them; the answers stay those of one request alone). A request
// goes to the free slot whose cached tokens give at least half of its prompt, reaching into its
// first user message (else to the least recently used free slot, copying what another free
// slot holds of its prompt: Session::borrow), so a conversation that comes back evaluates only
// its new turn and a shared system prompt is evaluated once. A client that disconnects from a
// stream ends its generation; a failed request leaves the server serving.
#pragma once

#include <memory>
#include <string>

#include "diskformer/diskformer.h"
#include "diskformer/generate.h"

namespace df::server {

struct ServerOptions {
    std::string host = "127.0.0.1";
    int port = 8080;                        // 0: any free port (bind() says which)
    int slots = 1;                          // requests served at once, each slot a session with its own KV cache
    int queue = 32;                         // requests that may wait for a slot; more get 503 at once
    std::string model_id;                   // the name /v1/models and answers give
    std::string api_key;                    // when set, /v1/* need "Authorization: Bearer <key>"
    diskformer::SessionOptions session;     // each slot's context, chunk and KV type
    diskformer::GenerateOptions defaults;   // sampling for the fields a request leaves out
    // A draft model beside the target (check_drafter): each slot gets a drafter session of the
    // same context, used by requests whose "draft" (default: defaults.draft) is above 0.
    std::shared_ptr<diskformer::Model> draft_model;
    // Or a DFlash block drafter directory: each slot attaches one to its session.
    std::string dflash_dir;
    bool log = true;                        // one line per request on stderr
};

class Server {
public:
    Server(std::shared_ptr<diskformer::Model> model, ServerOptions options);
    ~Server();
    Server(const Server&) = delete;
    Server& operator=(const Server&) = delete;

    // Binds the listening socket and returns its port; throws diskformer::Error if it cannot.
    int bind();
    // Serves until stop() (bind() first).
    void run();
    // Stops accepting, ends the generation in progress and makes run() return; any thread.
    void stop();
    // Each slot's context in tokens (the requested one, clamped to the model's training context).
    int n_ctx() const;

    struct Impl;

private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace df::server
