// The HTTP side of `diskformer serve` (server.h): routes, slots, streaming.
#include "server/server.h"

#include <httplib.h>

#include <algorithm>
#include <cmath>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "server/openai.h"

namespace df::server {
namespace {

using diskformer::Error;
using diskformer::GenerateResult;
using diskformer::Session;

constexpr size_t kMaxBody = 64u << 20;  // request bodies (a long conversation is a few MB)

int64_t unix_now() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void send_json(httplib::Response& res, int status, const Json& body) {
    res.status = status;
    res.set_content(body.dump(-1, ' ', false, Json::error_handler_t::replace), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) { send_json(res, e.status, e.body()); }

}  // namespace

struct Server::Impl {
    std::shared_ptr<diskformer::Model> model;
    ServerOptions opt;
    httplib::Server http;
    int n_ctx = 0;

    // Each request holds a slot while it generates; requests on different slots run at once,
    // their one-token steps batched into shared passes by the library (its engine serializes
    // the backend), and a request waits while every slot is taken.
    struct Slot {
        std::unique_ptr<Session> session;
        std::unique_ptr<Session> drafter;  // with a draft model: its cache follows the slot's
        std::unique_ptr<diskformer::BlockDrafter> block;  // with a DFlash drafter
        uint64_t used = 0;  // when it last served (a counter), for least-recently-used choice
        bool busy = false;
    };
    std::vector<Slot> slots;
    uint64_t uses = 0;
    int32_t im_start = -1, newline = -1;  // the chat format's tokens (conversation_start)
    std::mutex slots_mu;  // slots' busy / used, `aborts`, `stopping`
    std::condition_variable slot_freed;

    // The abort flags of the generations in progress, for stop().
    std::vector<std::atomic<bool>*> aborts;
    std::atomic<bool> stopping{false};
    std::atomic<uint64_t> requests{0};
    // Completion requests by outcome, for /health (monitoring, and the tests).
    std::atomic<uint64_t> served{0}, aborted{0}, rejected{0}, failed{0};
    // What generation did, summed over every choice of every request (/metrics).
    std::atomic<uint64_t> prompt_total{0}, cached_total{0}, generated_total{0}, prefill_us{0}, decode_us{0};
    std::atomic<uint64_t> shared_total{0};  // prompt tokens copied from another slot's cache
    std::atomic<int> waiting{0};  // requests waiting for a free slot

    Impl(std::shared_ptr<diskformer::Model> m, ServerOptions o) : model(std::move(m)), opt(std::move(o)) {
        if (opt.slots < 1) throw Error("serve: --slots must be at least 1");
        if (opt.queue < 0) throw Error("serve: --queue must be 0 or more");
        if (opt.draft_model) diskformer::check_drafter(*model, *opt.draft_model);
        for (int i = 0; i < opt.slots; ++i) {
            Slot& s = slots.emplace_back();
            s.session = std::make_unique<Session>(model, opt.session);
            if (opt.draft_model) s.drafter = std::make_unique<Session>(opt.draft_model, opt.session);
            if (!opt.dflash_dir.empty()) {
                try {
                    s.block = std::make_unique<diskformer::BlockDrafter>(opt.dflash_dir, *s.session);
                } catch (const Error& e) {
                    throw Error("--dflash " + opt.dflash_dir + ": " + e.what());
                }
            }
        }
        n_ctx = slots[0].session->n_ctx();
        try {
            im_start = model->tokenize("<|im_start|>", true).at(0);
            const auto nl = model->tokenize("\n");
            newline = nl.size() == 1 ? nl[0] : -1;
        } catch (const std::exception&) {  // no tokenizer: completions of raw ids only
        }
        // The first passes load kernels and record the decode graph (CUDA): now, not in the
        // first request's time to first token.
        for (auto& s : slots)
            for (Session* x : {s.session.get(), s.drafter.get()}) {
                if (!x) continue;
                x->set_prompt(std::vector<int32_t>{0});
                x->step(x->argmax());
                x->reset();
                x->reset_stats();
            }
        routes();
    }

    int slots_busy() {
        std::lock_guard l(slots_mu);
        return static_cast<int>(std::count_if(slots.begin(), slots.end(), [](const Slot& s) { return s.busy; }));
    }

    // Prometheus' text format: counters since the server started, gauges of now.
    std::string metrics() {
        std::string out;
        auto metric = [&](const char* name, const char* type, const char* help, const std::vector<std::pair<std::string, double>>& values) {
            out += std::string("# HELP diskformer_") + name + " " + help + "\n# TYPE diskformer_" + name + " " + type + "\n";
            for (const auto& [labels, v] : values) {
                char num[64];
                std::snprintf(num, sizeof num, "%.17g", v);
                out += std::string("diskformer_") + name + labels + " " + num + "\n";
            }
        };
        const auto batch = model->batch_stats();
        metric("requests_total", "counter", "Completion requests by outcome.",
               {{"{outcome=\"served\"}", served.load()},
                {"{outcome=\"aborted\"}", aborted.load()},
                {"{outcome=\"rejected\"}", rejected.load()},
                {"{outcome=\"failed\"}", failed.load()}});
        metric("prompt_tokens_total", "counter", "Prompt tokens of generations (every choice).", {{"", prompt_total.load()}});
        metric("prompt_tokens_cached_total", "counter", "Of those, tokens taken from a slot's cache.", {{"", cached_total.load()}});
        metric("prompt_tokens_shared_total", "counter", "Of the cached ones, tokens copied from another slot's cache.",
               {{"", shared_total.load()}});
        metric("generated_tokens_total", "counter", "Tokens generated.", {{"", generated_total.load()}});
        metric("prefill_seconds_total", "counter", "Time spent evaluating prompts.", {{"", prefill_us.load() * 1e-6}});
        metric("decode_seconds_total", "counter", "Time from each generation's first token to its last.", {{"", decode_us.load() * 1e-6}});
        metric("slots", "gauge", "Requests that can run at once.", {{"", static_cast<double>(slots.size())}});
        metric("slots_busy", "gauge", "Slots running a request now.", {{"", static_cast<double>(slots_busy())}});
        metric("requests_waiting", "gauge", "Requests waiting for a free slot.", {{"", static_cast<double>(waiting.load())}});
        metric("batched_passes_total", "counter", "Forward passes that ran several requests' steps together.",
               {{"", static_cast<double>(batch.passes)}});
        metric("batched_steps_total", "counter", "Steps run in those passes.", {{"", static_cast<double>(batch.batched_steps)}});
        metric("lone_steps_total", "counter", "Steps run alone.", {{"", static_cast<double>(batch.lone_steps)}});
        return out;
    }

    void log(const std::string& line) const {
        if (opt.log) std::fprintf(stderr, "%s\n", line.c_str());
    }

    // Throws 503 when every slot is taken and the queue is full (under slots_mu).
    void refuse_when_full() const {
        if (std::any_of(slots.begin(), slots.end(), [](const Slot& s) { return !s.busy; }) || waiting < opt.queue) return;
        throw ApiError(503,
                       "the server is busy: every slot is taken and " + std::to_string(waiting.load()) +
                           " requests are waiting (serve --slots / --queue)",
                       {}, "server_overloaded");
    }

    // Of the free slots, the one whose cache gives most of the prompt, if that is at least half
    // of it and reaches into its first user message (a returning conversation); otherwise the
    // least recently used one (an empty one first), so that a new conversation that merely
    // shares a prefix (a system prompt, tools) does not take another's cache: it borrows that
    // prefix instead (generate()). Under slots_mu, with a slot free.
    Slot& pick(std::span<const int32_t> prompt) {
        const size_t own_from = conversation_start(prompt);
        Slot* best = nullptr;
        size_t best_n = 0;
        for (auto& s : slots)
            if (!s.busy)
                if (const size_t n = static_cast<size_t>(s.session->reusable(prompt)); !best || n > best_n) best = &s, best_n = n;
        if (2 * best_n < prompt.size() || best_n <= own_from) best = least_recent_free();
        best->used = ++uses;
        return *best;
    }

    // The free slot used longest ago (an empty one first), or null. Under slots_mu.
    Slot* least_recent_free() {
        Slot* lru = nullptr;
        for (auto& x : slots)
            if (!x.busy && (!lru || x.used < lru->used)) lru = &x;
        return lru;
    }

    // Where a chat prompt's first user message begins, after a leading system turn and the next
    // turn's "<|im_start|>role\n" (0 for other prompts): a cache that shares no more than that
    // is another conversation's.
    size_t conversation_start(std::span<const int32_t> prompt) const {
        if (im_start < 0 || prompt.empty() || prompt[0] != im_start) return 0;
        for (size_t i = 1; i < prompt.size(); ++i)
            if (prompt[i] == im_start)  // the second turn: skip its role line
                for (size_t k = i + 1; k < prompt.size(); ++k)
                    if (prompt[k] == newline) return k + 1;
        return 0;
    }

    std::vector<int32_t> prompt_tokens(const Request& r) const {
        std::vector<int32_t> ids;
        try {
            ids = r.chat ? diskformer::chat_prompt(*model, r.messages, r.thinking, true, r.tools) : model->tokenize(r.prompt, true);
        } catch (const Error& e) {
            throw ApiError(400, e.what(), r.chat ? "messages" : "prompt");
        }
        if (ids.empty()) throw ApiError(400, "the prompt is empty", r.chat ? "messages" : "prompt");
        for (const auto& [t, bias] : r.gen.logit_bias)
            if (t >= model->info().n_vocab)
                throw ApiError(400, "logit_bias names token " + std::to_string(t) + ", past the vocabulary's " +
                                        std::to_string(model->info().n_vocab), "logit_bias");
        if (ids.size() > static_cast<size_t>(n_ctx))
            throw ApiError(400,
                           "the prompt has " + std::to_string(ids.size()) + " tokens but the context holds " +
                               std::to_string(n_ctx) + " (start the server with a larger --ctx, or shorten the prompt)",
                           r.chat ? "messages" : "prompt", "context_length_exceeded");
        return ids;
    }

    // A request's log-probabilities as generation reports them: each token's entry waits until a
    // piece of text carries it out (stream), and the last token's until the stop reason says
    // whether it was an end token, which is not reported.
    struct Logprobs {
        const Request& r;
        const Impl& s;
        std::vector<LogprobToken> pending;
        size_t offset = 0;  // completions' text_offset
        bool on() const { return r.gen.logprobs >= 0; }
        void add(const diskformer::Piece& p) {
            if (p.logprobs) pending.push_back({*p.logprobs, p.part});
        }
        Json take() {
            if (pending.empty()) return nullptr;
            Json j = logprobs_json(r, pending, [this](int32_t id) { return s.model->detokenize(std::span(&id, 1)); }, offset);
            pending.clear();
            return j;
        }
        Json finish(const GenerateResult& g) {
            if (g.stop == diskformer::StopReason::end_token && !pending.empty()) pending.pop_back();
            return take();
        }
    };

    // Of `all` candidates, the n with the highest mean log-probability of their tokens, best first
    // (ties: the lower index); all of them in order when there is no choosing.
    static std::vector<int> best_choices(const std::vector<GenerateResult>& all, int n) {
        std::vector<int> order(all.size());
        for (size_t i = 0; i < all.size(); ++i) order[i] = static_cast<int>(i);
        if (static_cast<int>(all.size()) == n) return order;
        std::vector<double> score(all.size());
        for (size_t i = 0; i < all.size(); ++i) {
            double sum = 0;
            for (const auto& t : all[i].logprobs) sum += t.chosen.logprob;
            score[i] = all[i].logprobs.empty() ? -HUGE_VAL : sum / static_cast<double>(all[i].logprobs.size());
        }
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return score[a] > score[b]; });
        order.resize(static_cast<size_t>(n));
        return order;
    }

    // Slots a request holds, released (and its abort flag forgotten) when this goes.
    struct Held {
        Impl* s = nullptr;
        std::vector<Slot*> slots;  // empty: the server is stopping
        std::atomic<bool>* abort = nullptr;
        Held() = default;
        Held(const Held&) = delete;
        Held& operator=(const Held&) = delete;
        ~Held() {
            if (slots.empty()) return;
            {
                std::lock_guard l(s->slots_mu);
                for (Slot* x : slots) x->busy = false;
                s->aborts.erase(std::find(s->aborts.begin(), s->aborts.end(), abort));
            }
            s->slot_freed.notify_all();
        }
    };

    // Waits for a free slot for `prompt` (pick), then takes up to `more` other free slots
    // without waiting (the least recently used first). Throws 503 when the queue is full.
    void acquire(Held& h, std::span<const int32_t> prompt, std::atomic<bool>& abort, int more) {
        std::unique_lock l(slots_mu);
        refuse_when_full();
        ++waiting;
        slot_freed.wait(l, [&] { return stopping || std::any_of(slots.begin(), slots.end(), [](const Slot& s) { return !s.busy; }); });
        --waiting;
        if (stopping) return;  // no slot: the generation ends as aborted at once
        h.s = this;
        h.abort = &abort;
        aborts.push_back(&abort);
        Slot* first = &pick(prompt);
        first->busy = true;
        h.slots.push_back(first);
        for (; more > 0; --more) {
            Slot* lru = least_recent_free();
            if (!lru) break;
            lru->busy = true;
            lru->used = ++uses;
            h.slots.push_back(lru);
        }
    }

    // Runs one generation on a slot this request holds. Before it, a free slot that holds more
    // of the prompt (the same system prompt and tools, say) lends it, copied instead of
    // evaluated (held meanwhile).
    GenerateResult run_on(Slot& slot, const Request& r, std::span<const int32_t> prompt, std::atomic<bool>& abort,
                          const diskformer::StreamCallback& on_piece) {
        diskformer::GenerateOptions o = r.gen;
        o.abort = &abort;
        o.drafter = slot.drafter.get();
        o.block_drafter = slot.block.get();
        try {
            Slot* donor = nullptr;
            {
                std::lock_guard l(slots_mu);
                int lend = 0;
                for (auto& x : slots)
                    if (!x.busy)
                        if (const int n = slot.session->borrowable(*x.session, prompt); n > lend) lend = n, donor = &x;
                if (donor) donor->busy = true;
            }
            if (donor) {
                struct Return {
                    Impl* s;
                    Slot* donor;
                    ~Return() {
                        {
                            std::lock_guard l(s->slots_mu);
                            donor->busy = false;
                        }
                        s->slot_freed.notify_all();
                    }
                } give_back{this, donor};
                shared_total += static_cast<uint64_t>(slot.session->borrow(*donor->session, prompt));
            }
            GenerateResult g = diskformer::generate(*slot.session, prompt, o, on_piece);
            const auto& st = g.stats;
            prompt_total += static_cast<uint64_t>(st.prompt_tokens);
            cached_total += static_cast<uint64_t>(st.reused_tokens);
            generated_total += static_cast<uint64_t>(st.generated_tokens);
            prefill_us += static_cast<uint64_t>(st.prefill_ms * 1e3);
            decode_us += static_cast<uint64_t>(st.decode_ms * 1e3);
            return g;
        } catch (...) {
            slot.session->reset();  // whatever failed mid-pass, the next request starts clean
            if (slot.drafter) slot.drafter->reset();
            throw;
        }
    }

    static GenerateResult aborted_at_once() {
        GenerateResult g;
        g.stop = diskformer::StopReason::aborted;
        return g;
    }

    // What a request does with each of its choices as it is generated (from the thread that runs
    // that choice): its pieces, and the result once it ends.
    struct ChoiceHooks {
        std::function<diskformer::StreamCallback(int)> pieces;  // choice i's callback (may be empty)
        std::function<void(int, const GenerateResult&)> done;   // choice i ended (not when aborted at once)
    };

    // n choices of a request (n, or best_of candidates; waiting for a free slot, `abort` ends
    // them early: a client gone, stop()) at once on as many free slots as there are (each
    // choice's steps then share passes): the prompt is evaluated on the first slot and
    // copied to the others, and slot k runs choices k, k + slots, ... Choice i draws with seed + i
    // either way, so the answers are those of the choices one after another.
    std::vector<GenerateResult> generate_choices(const Request& r, std::span<const int32_t> prompt, std::atomic<bool>& abort,
                                                 int n, const ChoiceHooks& hooks) {
        std::vector<GenerateResult> results(static_cast<size_t>(n));
        Held h;
        acquire(h, prompt, abort, n - 1);
        if (h.slots.empty()) {
            for (auto& g : results) g = aborted_at_once();
            return results;
        }
        const int k = static_cast<int>(h.slots.size());
        auto run_choice = [&](int slot, int i) {
            results[i] = run_on(*h.slots[slot], choice(r, i), prompt, abort, hooks.pieces ? hooks.pieces(i) : diskformer::StreamCallback{});
            if (hooks.done) hooks.done(i, results[i]);
        };
        if (k == 1) {
            for (int i = 0; i < n && !abort; ++i) run_choice(0, i);
            for (int i = 0; i < n; ++i)
                if (results[i].tokens.empty() && abort) results[i].stop = diskformer::StopReason::aborted;
            return results;
        }
        Request pre = r;
        pre.gen.max_tokens = 0;  // the prompt only (with generation's checkpoints)
        const GenerateResult p = run_on(*h.slots[0], pre, prompt, abort, {});
        if (p.stop == diskformer::StopReason::aborted) {
            for (auto& g : results) g = aborted_at_once();
            return results;
        }
        for (int j = 1; j < k; ++j) shared_total += static_cast<uint64_t>(h.slots[j]->session->borrow(*h.slots[0]->session, prompt));
        std::vector<std::exception_ptr> errors(static_cast<size_t>(k));
        auto work = [&](int j) {
            try {
                for (int i = j; i < n; i += k) run_choice(j, i);
            } catch (...) {
                errors[j] = std::current_exception();
                abort = true;  // the others stop too: the request fails as a whole
            }
        };
        std::vector<std::thread> threads;
        for (int j = 1; j < k; ++j) threads.emplace_back(work, j);
        work(0);
        for (auto& t : threads) t.join();
        for (auto& e : errors)
            if (e) std::rethrow_exception(e);
        // The prompt was evaluated for this request, by the pass before the choices.
        results[0].stats.reused_tokens = p.stats.reused_tokens;
        results[0].stats.prefill_ms = p.stats.prefill_ms;
        return results;
    }

    Meta meta(const Request& r) {
        char id[32];
        std::snprintf(id, sizeof id, "%s-%016llx", r.chat ? "chatcmpl" : "cmpl",
                      static_cast<unsigned long long>(unix_now() * 1000003ull + requests.fetch_add(1)));
        return {id, opt.model_id, unix_now()};
    }

    // Choice i of a request: a sampled one draws with seed + i, so the choices differ.
    static Request choice(const Request& r, int i) {
        Request c = r;
        c.gen.seed += static_cast<uint64_t>(i);
        return c;
    }

    std::string summary(const Request& r, std::span<const GenerateResult> results) const {
        const auto s = combined_stats(results);
        char buf[256];
        std::snprintf(buf, sizeof buf, "%s 200 · prompt %lld (cached %lld) · %lld tokens%s · %.1f tok/s · %s%s",
                      r.chat ? "/v1/chat/completions" : "/v1/completions", static_cast<long long>(s.prompt_tokens),
                      static_cast<long long>(s.reused_tokens), static_cast<long long>(s.generated_tokens),
                      results.size() > 1 ? (" in " + std::to_string(results.size()) + " choices").c_str() : "",
                      s.decode_tok_s(), diskformer::to_string(results.back().stop), r.stream ? " · streamed" : "");
        return buf;
    }

    void completion(const httplib::Request& http_req, httplib::Response& res, bool chat) {
        const char* path = chat ? "/v1/chat/completions" : "/v1/completions";
        try {
            const Json body = parse_body(http_req.body);
            // Tools and schemas keep their keys in the client's order (the prompt, property order).
            nlohmann::ordered_json ordered;
            if (chat && (body.contains("tools") || body.contains("response_format")))
                ordered = nlohmann::ordered_json::parse(http_req.body, nullptr, false);
            auto r = std::make_shared<Request>(chat ? parse_chat_request(body, opt.defaults, &ordered)
                                                    : parse_completion_request(body, opt.defaults));
            auto prompt = std::make_shared<std::vector<int32_t>>(prompt_tokens(*r));
            {
                std::lock_guard l(slots_mu);
                refuse_when_full();  // before a stream's headers go out with status 200
            }
            const Meta m = meta(*r);
            if (!r->stream) {
                std::atomic<bool> abort{false};
                // best_of: every candidate scored by its tokens' log-probabilities (computed for
                // the choosing; returned only when the request asks for them).
                Request cand = *r;
                if (r->best_of > r->n) cand.gen.logprobs = std::max(cand.gen.logprobs, 0);
                std::vector<Logprobs> lps(static_cast<size_t>(r->best_of), Logprobs{*r, *this, {}});
                ChoiceHooks hooks;
                hooks.pieces = [&lps](int i) {
                    return lps[i].on() ? diskformer::StreamCallback([&lps, i](const diskformer::Piece& p) { lps[i].add(p); })
                                       : diskformer::StreamCallback{};
                };
                std::vector<GenerateResult> all = generate_choices(cand, *prompt, abort, r->best_of, hooks);
                if (stopping) {
                    ++aborted;
                    throw ApiError(503, "the server is shutting down");
                }
                const diskformer::GenerateStats spent = combined_stats(all);  // usage counts every candidate
                const std::vector<int> pick = best_choices(all, r->n);
                std::vector<GenerateResult> results;
                std::vector<Json> logprobs;
                for (int i : pick) {
                    logprobs.push_back(lps[i].on() ? lps[i].finish(all[i]) : Json(nullptr));
                    results.push_back(std::move(all[i]));
                    if (!lps[i].on()) results.back().logprobs.clear();
                }
                Json out = response_json(*r, m, results, logprobs);
                out["usage"] = usage_json(spent);
                send_json(res, 200, out);
                ++served;
                log(summary(*r, results));
                return;
            }
            res.set_header("Cache-Control", "no-cache");
            res.set_chunked_content_provider("text/event-stream", [this, r, prompt, m](size_t, httplib::DataSink& sink) {
                stream(*r, *prompt, m, sink);
                return true;
            });
        } catch (const ApiError& e) {
            if (e.status < 500 || e.code == "server_overloaded") ++rejected;
            send_error(res, e);
            log(std::string(path) + " " + std::to_string(e.status) + " · " + e.what());
        } catch (const std::exception& e) {
            ++failed;
            send_error(res, ApiError(500, e.what()));
            log(std::string(path) + " 500 · " + e.what());
        }
    }

    // Writes a request's events as they come; the headers are out, so failures become an error
    // event. A write that fails (the client left) aborts the generation. n > 1 choices run at
    // once on free slots (generate_choices), their events interleaved, each under its index.
    void stream(const Request& r, std::span<const int32_t> prompt, const Meta& m, httplib::DataSink& sink) {
        std::atomic<bool> abort{false};
        std::mutex write_mu;  // choices write from their own threads
        auto send = [&](const Json& event) {
            std::lock_guard l(write_mu);
            if (abort) return;
            const std::string s = sse(event);
            if (!sink.write(s.data(), s.size())) abort = true;
        };
        try {
            struct Choice {
                explicit Choice(Logprobs l) : lp(std::move(l)) {}
                Logprobs lp;
                ToolCallStream calls;  // with tools, answer text from a <tool_call> on is held back
            };
            std::vector<std::unique_ptr<Choice>> choices;
            for (int i = 0; i < r.n; ++i) choices.push_back(std::make_unique<Choice>(Logprobs{r, *this, {}}));
            for (int i = 0; i < r.n; ++i) send(open_chunk(r, m, i));
            ChoiceHooks hooks;
            hooks.pieces = [&](int i) {
                return diskformer::StreamCallback([&, i](const diskformer::Piece& p) {
                    Choice& c = *choices[static_cast<size_t>(i)];
                    if (!p.last) c.lp.add(p);
                    const std::string text = !r.tools.empty() && p.part == diskformer::Part::answer ? c.calls.push(p.text) : std::string(p.text);
                    if (!text.empty()) send(piece_chunk(r, m, text, p.part, c.lp.take(), i));
                    if (p.last) c.lp.add(p);  // an end token or not: finish() decides
                });
            };
            hooks.done = [&](int i, const GenerateResult& g) {
                if (g.stop == diskformer::StopReason::aborted) return;
                Choice& c = *choices[static_cast<size_t>(i)];
                const ToolCallText held = c.calls.finish();
                Json rest = c.lp.finish(g);
                if (!held.content.empty() || !rest.is_null()) send(piece_chunk(r, m, held.content, diskformer::Part::answer, rest, i));
                if (!held.calls.empty()) send(tool_calls_chunk(r, m, held.calls, i));
                send(finish_chunk(r, m, g.stop, !held.calls.empty(), i));
            };
            const std::vector<GenerateResult> results = generate_choices(r, prompt, abort, r.n, hooks);
            const bool cut = std::any_of(results.begin(), results.end(),
                                         [](const GenerateResult& g) { return g.stop == diskformer::StopReason::aborted; });
            if (cut) {
                ++aborted;
                log(std::string(r.chat ? "/v1/chat/completions" : "/v1/completions") + " · stream ended early (" +
                    (stopping ? "server stopping" : "client gone") + ") after " +
                    std::to_string(combined_stats(results).generated_tokens) + " tokens");
                if (stopping) {
                    abort = false;  // the client is still there: tell it why
                    send(ApiError(503, "the server is shutting down").body());
                }
            } else {
                ++served;
                if (r.include_usage) send(usage_chunk(r, m, combined_stats(results)));
                log(summary(r, results));
            }
        } catch (const std::exception& e) {
            ++failed;
            send(ApiError(500, e.what()).body());
            log(std::string(r.chat ? "/v1/chat/completions" : "/v1/completions") + " 500 (streaming) · " + e.what());
        }
        std::lock_guard l(write_mu);
        const std::string done = "data: [DONE]\n\n";
        if (!abort) sink.write(done.data(), done.size());
        sink.done();
    }

    static bool flag(const Json& body, const char* key, bool fallback) {
        if (!body.contains(key)) return fallback;
        if (!body[key].is_boolean()) throw ApiError(400, std::string("\"") + key + "\" must be true or false", key);
        return body[key].get<bool>();
    }

    // A small JSON-in, JSON-out route: 400 for a bad body, 500 for anything else.
    void utility(const httplib::Request& q, httplib::Response& res, const std::function<Json(const Json&)>& answer) {
        try {
            send_json(res, 200, answer(parse_body(q.body)));
        } catch (const ApiError& e) {
            ++rejected;
            send_error(res, e);
            log(q.path + " " + std::to_string(e.status) + " · " + e.what());
        } catch (const std::exception& e) {
            ++failed;
            send_error(res, ApiError(500, e.what()));
            log(q.path + " 500 · " + e.what());
        }
    }

    void routes() {
        http.set_payload_max_length(kMaxBody);
        // Workers for the slots, for the requests waiting for one (each holds a worker), and
        // some for /health, /metrics, /v1/models and requests refused early; idle ones cost
        // nothing.
        const size_t workers = slots.size() + static_cast<size_t>(opt.queue) + 8;
        http.new_task_queue = [workers] { return new httplib::ThreadPool(workers); };
        // Browsers (a local web UI) may call the API from another origin.
        http.set_post_routing_handler([](const httplib::Request&, httplib::Response& res) {
            res.set_header("Access-Control-Allow-Origin", "*");
        });
        http.Options(R"(/.*)", [](const httplib::Request&, httplib::Response& res) {
            res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
            res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
            res.status = 204;
        });
        http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
            const bool guarded = req.path.rfind("/v1/", 0) == 0 || req.path == "/tokenize" || req.path == "/detokenize" ||
                                 req.path == "/apply-template";
            if (opt.api_key.empty() || req.method == "OPTIONS" || !guarded)
                return httplib::Server::HandlerResponse::Unhandled;
            if (req.get_header_value("Authorization") == "Bearer " + opt.api_key)
                return httplib::Server::HandlerResponse::Unhandled;
            send_error(res, ApiError(401, "a valid API key is required (Authorization: Bearer <key>)", {}, "invalid_api_key"));
            log(req.method + " " + req.path + " 401");
            return httplib::Server::HandlerResponse::Handled;
        });
        // Statuses httplib sets itself (no route, body too large) get an error body too.
        http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
            if (!res.body.empty()) return;
            const std::string what = res.status == 404   ? "no such endpoint: " + req.method + " " + req.path
                                     : res.status == 413 ? "the request body is larger than " + std::to_string(kMaxBody >> 20) + " MB"
                                                         : "the request failed (HTTP " + std::to_string(res.status) + ")";
            send_error(res, ApiError(res.status, what));
            log(req.method + " " + req.path + " " + std::to_string(res.status));
        });
        http.set_exception_handler([this](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
            std::string what = "internal error";
            try {
                std::rethrow_exception(ep);
            } catch (const std::exception& e) {
                what = e.what();
            } catch (...) {
            }
            send_error(res, ApiError(500, what));
            log(req.method + " " + req.path + " 500 · " + what);
        });

        // The POST routes read their bodies themselves: httplib would parse a body sent as
        // application/x-www-form-urlencoded (curl -d's default) as a form and refuse one above
        // 8 KB; the API's bodies are JSON whatever the header says (kMaxBody still applies).
        auto json_body = [this](auto handle) {
            return [this, handle](const httplib::Request& q, httplib::Response& res, const httplib::ContentReader& read) {
                if (q.is_multipart_form_data()) {  // read (so the connection stays in step) and refused
                    if (!read([](const httplib::MultipartFormData&) { return true; }, [](const char*, size_t) { return true; })) return;
                    send_error(res, ApiError(400, "the request body must be JSON, not multipart form data"));
                    log(q.method + " " + q.path + " 400");
                    return;
                }
                httplib::Request r = q;
                r.body.clear();
                if (!read([&r](const char* data, size_t n) {
                        r.body.append(data, n);
                        return true;
                    }))
                    return;  // httplib set the status (413: too large, 400: a broken body); the error handler answers
                handle(r, res);
            };
        };
        http.Post("/v1/chat/completions", json_body([this](const httplib::Request& q, httplib::Response& s) { completion(q, s, true); }));
        http.Post("/v1/completions", json_body([this](const httplib::Request& q, httplib::Response& s) { completion(q, s, false); }));
        http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
            const auto& info = model->info();
            send_json(res, 200,
                      {{"object", "list"},
                       {"data", Json::array({{{"id", opt.model_id},
                                              {"object", "model"},
                                              {"created", unix_now()},
                                              {"owned_by", "diskformer"},
                                              {"meta", {{"arch", info.arch},
                                                        {"backend", info.backend},
                                                        {"n_ctx", n_ctx},
                                                        {"n_ctx_train", info.n_ctx_train},
                                                        {"n_vocab", info.n_vocab},
                                                        {"weight_bytes", info.weight_bytes}}}}})}});
        });
        // llama.cpp's utility routes: text to tokens, tokens to text, a conversation to its prompt.
        http.Post("/tokenize", json_body([this](const httplib::Request& q, httplib::Response& res) {
            utility(q, res, [this](const Json& body) {
                const Json* content = body.is_object() && body.contains("content") ? &body["content"] : nullptr;
                if (!content || !content->is_string()) throw ApiError(400, "\"content\" must be a string", "content");
                const bool special = flag(body, "parse_special", true), pieces = flag(body, "with_pieces", false);
                const auto ids = model->tokenize(content->get<std::string>(), special);
                Json tokens = Json::array();
                for (const int32_t id : ids) {
                    if (!pieces) {
                        tokens.push_back(id);
                        continue;
                    }
                    const std::string piece = model->detokenize(std::span<const int32_t>(&id, 1));
                    Json p = piece;
                    try {
                        (void)p.dump();  // a piece may be part of a character: then its bytes
                    } catch (const Json::type_error&) {
                        p = Json::array();
                        for (const char c : piece) p.push_back(static_cast<unsigned char>(c));
                    }
                    tokens.push_back({{"id", id}, {"piece", p}});
                }
                return Json{{"tokens", tokens}};
            });
        }));
        http.Post("/detokenize", json_body([this](const httplib::Request& q, httplib::Response& res) {
            utility(q, res, [this](const Json& body) {
                const Json* tokens = body.is_object() && body.contains("tokens") ? &body["tokens"] : nullptr;
                if (!tokens || !tokens->is_array()) throw ApiError(400, "\"tokens\" must be an array of token ids", "tokens");
                std::vector<int32_t> ids;
                for (const auto& t : *tokens) {
                    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= model->info().n_vocab)
                        throw ApiError(400, "\"tokens\" holds " + t.dump() + ", not a token id below " + std::to_string(model->info().n_vocab), "tokens");
                    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
                }
                return Json{{"content", model->detokenize(ids)}};
            });
        }));
        http.Post("/apply-template", json_body([this](const httplib::Request& q, httplib::Response& res) {
            utility(q, res, [this, &q](const Json& body) {
                nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(q.body, nullptr, false);
                const Request r = parse_chat_request(body, opt.defaults, &ordered);
                return Json{{"prompt", model->detokenize(prompt_tokens(r))}};
            });
        }));
        http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
            res.set_content(metrics(), "text/plain; version=0.0.4; charset=utf-8");
        });
        http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
            const auto batch = model->batch_stats();
            send_json(res, 200,
                      {{"status", "ok"},
                       {"model", opt.model_id},
                       {"slots", opt.slots},
                       {"slots_busy", slots_busy()},
                       {"requests_waiting", waiting.load()},
                       {"batching", {{"passes", batch.passes}, {"batched_steps", batch.batched_steps}, {"lone_steps", batch.lone_steps}}},
                       {"requests", {{"served", served.load()},
                                     {"aborted", aborted.load()},
                                     {"rejected", rejected.load()},
                                     {"failed", failed.load()}}}});
        });
    }
};

Server::Server(std::shared_ptr<diskformer::Model> model, ServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(model), std::move(options))) {}

Server::~Server() = default;

int Server::bind() {
    auto& s = *impl_;
    const int port = s.opt.port == 0 ? s.http.bind_to_any_port(s.opt.host) : (s.http.bind_to_port(s.opt.host, s.opt.port) ? s.opt.port : -1);
    if (port < 0)
        throw Error("serve: cannot listen on " + s.opt.host + ":" + std::to_string(s.opt.port) +
                    " (in use, or not an address of this machine)");
    return port;
}

void Server::run() { impl_->http.listen_after_bind(); }

int Server::n_ctx() const { return impl_->n_ctx; }

void Server::stop() {
    auto& s = *impl_;
    {
        std::lock_guard l(s.slots_mu);
        s.stopping = true;
        for (auto* a : s.aborts) *a = true;
    }
    s.slot_freed.notify_all();
    s.http.stop();
}

}  // namespace df::server
