// diskformer::Model and diskformer::Session: the public API over model::Model and a Backend.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "diskformer/diskformer.h"
#include "model/model.h"
#include "runtime/model_impl.h"
#include "runtime/session_impl.h"

namespace diskformer {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

}  // namespace

Session::Impl::Resume Session::Impl::resume(std::span<const int32_t> prompt) const {
    size_t p = 0;
    while (p < tokens.size() && p < prompt.size() && tokens[p] == prompt[p]) ++p;
    if (p == prompt.size()) --p;  // re-evaluate the last token so its logits are fresh
    Resume r;
    // Attention rewinds to any point; a recurrent state only goes on from where it is.
    if (m->config().n_recurrent() == 0 || p == tokens.size()) r.n = p;
    for (size_t i = 0; i < checkpoints.size(); ++i)
        if (checkpoints[i].valid && checkpoints[i].n <= p && checkpoints[i].n > r.n) r = {checkpoints[i].n, static_cast<int>(i)};
    return r;
}

Session::Impl::Resume Session::Impl::borrow_plan(const Impl& donor, std::span<const int32_t> prompt) const {
    if (&donor == this || donor.m != m || donor.st->kv_type != st->kv_type || prompt.empty()) return {};
    // What the donor would resume from for this prompt is what it can lend.
    const Resume r = donor.resume(prompt);
    const size_t own = holds(prompt) ? prompt.size() : resume(prompt).n;
    if (r.n <= own || r.n > static_cast<size_t>(st->ctx)) return {};
    return r;
}

void Session::Impl::admit(std::span<const int32_t> ids) {
    const auto& c = m->config();
    if (tokens.size() + ids.size() > static_cast<size_t>(st->ctx))
        throw Error("context full: " + std::to_string(tokens.size()) + " cached + " + std::to_string(ids.size()) +
                    " new tokens exceed the context of " + std::to_string(st->ctx) + " tokens (raise --ctx)");
    for (int32_t id : ids)
        if (id < 0 || id >= c.n_vocab)
            throw Error("token id " + std::to_string(id) + " is outside the vocabulary (0.." + std::to_string(c.n_vocab - 1) + ")");
    for (auto& cp : checkpoints)
        if (cp.n > tokens.size()) cp.valid = false;
}

void Session::Impl::run_steps(std::span<Engine::Step* const> batch) {
    auto& first = *static_cast<Impl*>(batch[0]->session);
    if (batch.size() == 1) {
        first.eval(std::span<const int32_t>(&batch[0]->token, 1), nullptr, true);
        return;
    }
    auto& mi = first.model->impl();
    const df::model::Model& model = *first.m;
    df::Backend& be = *first.be;
    if (!mi.lanes) mi.lanes = model.new_scratch(df::model::kVerifyRows);
    df::model::State& scratch = *mi.lanes;
    const int n = static_cast<int>(batch.size());
    std::vector<int32_t> host(2 * static_cast<size_t>(n));
    std::vector<df::model::Lane> lanes(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
        auto& I = *static_cast<Impl*>(batch[i]->session);
        host[i] = batch[i]->token;
        host[n + i] = static_cast<int32_t>(I.tokens.size());
        df::Step& s = lanes[i].s;
        s.T = 1;
        s.tokens = scratch.tokens + i;
        s.pos = scratch.pos + i;
        s.pos0_hint = host[n + i];
        s.max_ctx = I.st->ctx;
        lanes[i].st = I.st.get();
        lanes[i].row0 = i;
        I.logits_valid = false;
        I.fed_pos = -1;  // the pass feeds no step buffers
    }
    const auto t0 = Clock::now();
    be.upload(scratch.tokens, host.data(), sizeof(int32_t) * n);
    be.upload(scratch.pos, host.data() + n, sizeof(int32_t) * n);
    // The same sessions stepping together again replay the pass recorded for them (CUDA graphs,
    // when the engine keeps them): it reads its tokens and positions from the scratch above.
    std::vector<Engine::LaneSig> sig(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) sig[i] = {lanes[i].st, be.graph_variant(lanes[i].s)};
    const uint64_t key = first.engine->lane_graph(sig);
    if (!key || !be.replay(key)) {
        const bool recording = key && be.begin_capture(key);
        model.forward_lanes(scratch, lanes);
        if (recording) {
            be.end_capture();
            be.replay(key);
        }
    }
    be.synchronize();
    const double ms = ms_since(t0);
    for (int i = 0; i < n; ++i) {
        auto& I = *static_cast<Impl*>(batch[i]->session);
        I.tokens.push_back(batch[i]->token);
        I.last_row = 0;  // forward_lanes left its logits and argmax in row 0
        I.logits_valid = true;
        I.stats.decode_tokens += 1;
        I.stats.decode_ms += ms;
    }
}

void Session::Impl::clear() {
    tokens.clear();
    logits_valid = false;
    fed_pos = -1;
    m->reset_state(*st);
}

void Session::Impl::eval(std::span<const int32_t> ids, float* all, bool decode, bool rows) {
    const auto& c = m->config();
    if (ids.empty()) return;
    admit(ids);
    // Logits for every position need a [rows, vocab] buffer (grown once on first use): such calls
    // run in steps of at most kAllLogitsRows tokens whatever the chunk, so that buffer stays
    // bounded (1024 x 248,320 floats is already 1 GB).
    constexpr size_t kAllLogitsRows = 1024;
    const size_t step = all ? std::min<size_t>(st->chunk, kAllLogitsRows) : st->chunk;
    if (all && !st->all_logits) {
        drop_graphs();  // the recorded steps point at the old buffer
        auto it = std::find(st->owned.begin(), st->owned.end(), static_cast<void*>(st->logits));
        be->release(st->logits);
        st->scratch_bytes -= sizeof(float) * std::min(st->chunk, df::model::kVerifyRows) * static_cast<size_t>(c.n_vocab);
        const size_t bytes = sizeof(float) * step * static_cast<size_t>(c.n_vocab);
        st->logits = static_cast<float*>(be->alloc(bytes, df::MemKind::scratch));
        *it = st->logits;
        st->scratch_bytes += bytes;
        st->all_logits = true;
    }
    const auto t0 = Clock::now();
    const size_t n = ids.size();
    for (size_t off = 0; off < n;) {
        const int T = static_cast<int>(std::min(step, n - off));
        const bool last_chunk = off + T == n;
        const bool fed = T == 1 && fed_pos == static_cast<int64_t>(tokens.size()) && ids[off] == fed_token;
        if (!fed) {
            host_buf.resize(2 * T);
            std::copy(ids.begin() + off, ids.begin() + off + T, host_buf.begin());
            for (int t = 0; t < T; ++t) host_buf[T + t] = static_cast<int32_t>(tokens.size()) + t;
            be->upload(st->tokens, host_buf.data(), sizeof(int32_t) * T);
            be->upload(st->pos, host_buf.data() + T, sizeof(int32_t) * T);
        }
        fed_pos = -1;  // the buffers now hold this step's inputs (or, below, the feed's)
        df::Step s;
        s.T = T;
        s.tokens = st->tokens;
        s.pos = st->pos;
        s.pos0_hint = static_cast<int>(tokens.size());
        s.max_ctx = st->ctx;
        const auto out = all || rows ? df::model::Output::all : last_chunk ? df::model::Output::last : df::model::Output::none;
        logits_valid = false;
        if ((decode && T == 1 && out == df::model::Output::last) || rows) {
            // A decode step (or a verify pass of T tokens) has the same shape every time and
            // reads its tokens and positions from backend memory: record it once, replay it
            // afterwards (CUDA graphs; a no-op on CPU).
            const int variant = be->graph_variant(s);
            if (variant < 0 || variant >= df::Backend::kGraphVariants)
                throw Error("backend returned graph variant " + std::to_string(variant) + " (0.." +
                            std::to_string(df::Backend::kGraphVariants - 1) + " expected)");
            const uint64_t key = graph_key(variant, T);
            if (!be->replay(key)) {
                const bool recording = be->begin_capture(key);
                m->forward(*st, s, out);
                if (recording) {
                    be->end_capture();
                    be->replay(key);
                }
            }
        } else {
            m->forward(*st, s, out);
        }
        if (on_taps) on_taps(st->taps, T, static_cast<int>(tokens.size()));
        if (all) {
            be->download(all + off * c.n_vocab, st->logits, sizeof(float) * T * static_cast<size_t>(c.n_vocab));
            last_row = T - 1;
        } else {
            last_row = rows ? T - 1 : 0;
        }
        tokens.insert(tokens.end(), ids.begin() + off, ids.begin() + off + T);
        off += T;
    }
    be->synchronize();
    logits_valid = true;
    // The last chunk computed logits, so its argmax fed the buffers (host-visible, read in place).
    fed_token = st->argmax[last_row];
    fed_pos = static_cast<int64_t>(tokens.size());
    const double ms = ms_since(t0);
    if (decode) {
        stats.decode_tokens += static_cast<int64_t>(n);
        stats.decode_ms += ms;
    } else {
        stats.prompt_tokens += static_cast<int64_t>(n);
        stats.prefill_ms += ms;
    }
}

Session::Session(std::shared_ptr<Model> model, const SessionOptions& options)
    : impl_(std::make_unique<Impl>()) {
    auto& I = *impl_;
    I.model = std::move(model);
    I.m = I.model->impl().model.get();
    I.be = I.model->impl().backend.get();
    I.engine = I.model->impl().engine.get();
    I.opt = options;
    const auto& c = I.m->config();
    if (options.ctx <= 0) throw Error("context size must be positive, got " + std::to_string(options.ctx));
    if (options.chunk < 0) throw Error("chunk size must be positive (or 0: automatic), got " + std::to_string(options.chunk));
    const int ctx = c.n_ctx_train > 0 ? std::min(options.ctx, c.n_ctx_train) : options.ctx;
    // Automatic: a GPU's prefill GEMMs fill the device only with long chunks (bench/RESULTS.md:
    // 2048 against 1024 is +8 % on the 4B preset at 4096 tokens, for ~120 MB more scratch), and
    // hybrid models gain from longer ones still (27B preset at 4096 / 8192 tokens +3.4 % with
    // 4096, for ~420 MB more; the 4B loses 1 % there); the CPU gains nothing past a few hundred
    // tokens and keeps its scratch small.
    const int gpu_chunk = c.n_recurrent() > 0 ? 4096 : 2048;
    const int want = options.chunk > 0 ? options.chunk : I.be->name() == "cpu" ? 256 : gpu_chunk;
    const int chunk = std::min(want, ctx);
    try {
        Engine::Lock hold(*I.engine);
        I.st = I.m->new_state(ctx, chunk, options.kv_type == KvType::f32 ? df::KvType::f32 : df::KvType::f16, false);
    } catch (const std::exception& e) {
        throw Error(std::string("cannot allocate the session: ") + e.what());
    }
}

Session::~Session() {
    if (impl_ && impl_->st) {
        Engine::Lock hold(*impl_->engine);
        for (auto& cp : impl_->checkpoints) impl_->be->release(cp.buf);
        if (impl_->spec_state) impl_->be->release(impl_->spec_state);
        impl_->drop_graphs();
        impl_->m->free_state(*impl_->st);
    }
}

void Session::append(std::span<const int32_t> tokens, float* all_logits) {
    Engine::Lock hold(*impl_->engine);
    impl_->eval(tokens, all_logits, false);
}

int Session::set_prompt(std::span<const int32_t> prompt) {
    auto& I = *impl_;
    if (prompt.empty()) throw Error("empty prompt");
    if (I.holds(prompt)) {
        I.stats.reused_tokens = static_cast<int64_t>(prompt.size());
        return static_cast<int>(prompt.size());  // nothing new: the logits are already those of this prompt
    }
    const Impl::Resume r = I.resume(prompt);
    Engine::Lock hold(*I.engine);
    if (r.cp >= 0) {
        auto& cp = I.checkpoints[static_cast<size_t>(r.cp)];
        I.m->load_recurrent(*I.st, cp.buf);
        cp.used = ++I.checkpoint_uses;
        I.tokens.resize(r.n);  // the cache still holds its first r.n tokens (checkpoints after a rewrite are dropped)
        I.logits_valid = false;
        I.fed_pos = -1;
    } else if (r.n < I.tokens.size()) {
        if (r.n == 0) {
            I.clear();  // a recurrent state cannot be rewound: restart from token 0
        } else {
            I.tokens.resize(r.n);  // attention-only: KV rows past r.n are overwritten later
            I.logits_valid = false;
        }
    }
    I.stats.reused_tokens = static_cast<int64_t>(r.n);
    I.eval(prompt.subspan(r.n), nullptr, false);
    return static_cast<int>(r.n);
}

int Session::reusable(std::span<const int32_t> prompt) const {
    const auto& I = *impl_;
    if (prompt.empty()) return 0;
    return static_cast<int>(I.holds(prompt) ? prompt.size() : I.resume(prompt).n);
}

int Session::borrowable(const Session& donor, std::span<const int32_t> prompt) const {
    return static_cast<int>(impl_->borrow_plan(*donor.impl_, prompt).n);
}

int Session::borrow(const Session& donor, std::span<const int32_t> prompt) {
    auto& I = *impl_;
    const auto& D = *donor.impl_;
    const Impl::Resume r = I.borrow_plan(D, prompt);
    if (r.n == 0) return 0;
    Engine::Lock hold(*I.engine);
    // Forget the old cache first: a copy that fails half way leaves an empty one, not a stale one.
    I.tokens.clear();
    I.logits_valid = false;
    I.fed_pos = -1;
    for (auto& cp : I.checkpoints) cp.valid = false;  // they were of the old cache
    try {
        I.m->copy_kv_rows(*D.st, *I.st, static_cast<int>(r.n));
        if (I.m->config().n_recurrent() > 0) {
            if (r.cp >= 0)
                I.m->load_recurrent(*I.st, D.checkpoints[static_cast<size_t>(r.cp)].buf);
            else
                I.m->copy_recurrent(*D.st, *I.st);
        }
        I.be->synchronize();  // the donor may be used by another thread once this returns
    } catch (...) {
        I.m->reset_state(*I.st);  // an empty cache starts from a zero recurrent state
        throw;
    }
    I.tokens.assign(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(r.n));
    return static_cast<int>(r.n);
}

bool Session::checkpoint() {
    auto& I = *impl_;
    if (I.m->config().n_recurrent() == 0 || I.opt.checkpoints <= 0) return false;
    Engine::Lock hold(*I.engine);
    for (auto& cp : I.checkpoints)
        if (cp.valid && cp.n == I.tokens.size()) {  // the same point (a valid checkpoint matches the cache)
            cp.used = ++I.checkpoint_uses;
            return true;
        }
    auto invalid = std::find_if(I.checkpoints.begin(), I.checkpoints.end(), [](const auto& cp) { return !cp.valid; });
    Impl::Checkpoint* slot = nullptr;
    if (invalid != I.checkpoints.end()) {
        slot = &*invalid;
    } else if (I.checkpoints.size() < static_cast<size_t>(I.opt.checkpoints)) {
        void* buf = I.alloc_state_copy("a state checkpoint");  // first: a failure leaves no slot behind
        slot = &I.checkpoints.emplace_back();
        slot->buf = buf;
    } else {
        slot = &*std::min_element(I.checkpoints.begin(), I.checkpoints.end(),
                                  [](const auto& a, const auto& b) { return a.used < b.used; });
    }
    I.m->save_recurrent(*I.st, slot->buf);
    slot->n = I.tokens.size();
    slot->valid = true;
    slot->used = ++I.checkpoint_uses;
    return true;
}

int32_t Session::step(int32_t token) {
    auto& I = *impl_;
    I.admit(std::span<const int32_t>(&token, 1));  // errors on this thread, before the queue
    Engine::Step s;
    s.group = I.step_group();
    s.session = &I;
    s.token = token;
    I.engine->step(s, &Impl::run_steps);
    return argmax();
}

int Session::max_draft() const { return std::min(impl_->st->chunk, df::model::kVerifyRows) - 1; }

namespace {

// Session::top_logits of row `row` of the state's logits (the caller holds the backend).
std::vector<std::pair<int32_t, float>> top_logits_of(const Session::Impl& I, int64_t row, int k,
                                                     std::span<const int32_t> extra) {
    const int V = static_cast<int>(I.m->config().n_vocab);
    constexpr int kMax = df::Backend::kTopLogitsMax;
    if (k < 1 || k > std::min(V, kMax))
        throw Error("top_logits: k = " + std::to_string(k) + " outside 1.." + std::to_string(std::min(V, kMax)));
    if (extra.size() > static_cast<size_t>(kMax))
        throw Error("top_logits: " + std::to_string(extra.size()) + " extra ids (at most " + std::to_string(kMax) + ")");
    for (int32_t id : extra)
        if (id < 0 || id >= V) throw Error("top_logits: token " + std::to_string(id) + " is outside the vocabulary");
    const int n_extra = static_cast<int>(extra.size());
    df::model::State& st = *I.st;
    std::copy(extra.begin(), extra.end(), st.top_extra);
    I.be->top_logits(st.logits + row * V, V, k, st.top_extra, n_extra, st.top_ids, st.top_vals);
    I.be->synchronize();
    std::vector<std::pair<int32_t, float>> out(static_cast<size_t>(k + n_extra));
    for (int i = 0; i < k + n_extra; ++i) out[i] = {st.top_ids[i], st.top_vals[i]};
    return out;
}

// Session::row_mass of row `row` of the state's logits (the caller holds the backend).
uint64_t row_mass_of(const Session::Impl& I, int64_t row, float lmax) {
    const int64_t V = I.m->config().n_vocab;
    return I.be->row_mass(I.st->logits + row * V, static_cast<int>(V), lmax);
}

// One verify pass: `token` and `draft` in one forward, the draft kept while pick(i), the choice
// at row i, equals draft[i]. Returns the kept count and the choice at the row after the last
// kept draft token. The cache then holds `token` and the kept tokens, with that row's logits.
template <class Pick>
std::pair<size_t, int32_t> verify_pass(Session::Impl& I, int32_t token, std::span<const int32_t> draft, Pick&& pick) {
    Engine::Lock hold(*I.engine);
    std::vector<int32_t> ids(1, token);
    ids.insert(ids.end(), draft.begin(), draft.end());
    const bool recurrent = I.m->config().n_recurrent() > 0;
    if (recurrent) {
        if (!I.spec_state) I.spec_state = I.alloc_state_copy("the speculation state copy");
        I.m->save_recurrent(*I.st, I.spec_state);
    }
    const size_t base = I.tokens.size();
    const int64_t counted = I.stats.decode_tokens;
    I.eval(ids, nullptr, true, /*rows=*/true);
    size_t kept = 0;
    int32_t choice = pick(0);
    while (kept < draft.size() && draft[kept] == choice) choice = pick(++kept);
    if (kept < draft.size()) {
        I.fed_pos = -1;  // the pass fed its last row's choice, not the kept one's
        if (recurrent) {
            // The state ran through the rejected tokens: restore it and run the kept ones again
            // (a pass of <= 8 tokens: the same bits as the verify pass gave them).
            I.m->load_recurrent(*I.st, I.spec_state);
            I.tokens.resize(base);
            I.eval(std::span(ids).first(kept + 1), nullptr, true, /*rows=*/kept > 0);
        } else {
            I.tokens.resize(base + kept + 1);  // KV rows past it are overwritten later
            I.last_row = static_cast<int64_t>(kept);
        }
    }
    I.stats.decode_tokens = counted + static_cast<int64_t>(kept + 1);  // tokens kept, not evaluated
    return {kept, choice};
}

}  // namespace

int Session::verify(int32_t token, std::span<const int32_t> draft) {
    auto& I = *impl_;
    draft = draft.first(std::min(draft.size(), static_cast<size_t>(std::max(0, max_draft()))));
    if (draft.empty()) {
        step(token);
        return 0;
    }
    // Row i's argmax (host-visible, synchronized) is the greedy choice after ids[0..i].
    return static_cast<int>(verify_pass(I, token, draft, [&](size_t i) { return I.st->argmax[i]; }).first);
}

int Session::verify(int32_t token, std::span<const int32_t> draft, const Choose& choose, int32_t& next) {
    if (!choose) throw Error("verify: no rule to choose tokens");
    return verify(token, draft, ChooseRow([&](int i, Row& r) { return choose(i, r.logits()); }), next);
}

namespace {

// Row `row` of the state's logits (the session's backend held by the caller), read only as the
// rule asks.
class StateRow final : public Session::Row {
public:
    StateRow(const Session::Impl& I, int64_t row, std::vector<float>& buf) : I_(I), row_(row), buf_(buf) {}
    std::span<const float> logits() override {
        const size_t V = I_.m->config().n_vocab;
        if (!fetched_) {
            buf_.resize(V);
            I_.be->download(buf_.data(), I_.st->logits + row_ * static_cast<int64_t>(V), sizeof(float) * V);
            fetched_ = true;
        }
        return buf_;
    }
    std::vector<std::pair<int32_t, float>> top(int k, std::span<const int32_t> extra) override {
        return top_logits_of(I_, row_, k, extra);
    }
    uint64_t mass(float lmax) override { return row_mass_of(I_, row_, lmax); }

private:
    const Session::Impl& I_;
    int64_t row_;
    std::vector<float>& buf_;
    bool fetched_ = false;
};

}  // namespace

int Session::verify(int32_t token, std::span<const int32_t> draft, const ChooseRow& choose, int32_t& next) {
    auto& I = *impl_;
    if (!choose) throw Error("verify: no rule to choose tokens");
    draft = draft.first(std::min(draft.size(), static_cast<size_t>(std::max(0, max_draft()))));
    std::vector<float> buf;
    if (draft.empty()) {
        step(token);
        Engine::Lock hold(*I.engine);
        StateRow r(I, I.last_row, buf);
        next = choose(0, r);
        return 0;
    }
    const auto [kept, choice] = verify_pass(I, token, draft, [&](size_t i) {
        StateRow r(I, static_cast<int64_t>(i), buf);
        return choose(static_cast<int>(i), r);
    });
    next = choice;
    return static_cast<int>(kept);
}

int32_t Session::argmax() const {
    const auto& I = *impl_;
    if (!I.logits_valid) throw Error("no logits: evaluate a token first");
    return I.st->argmax[I.last_row];  // host-visible, and eval() synchronized
}

std::vector<float> Session::logits() const {
    const auto& I = *impl_;
    if (!I.logits_valid) throw Error("no logits: evaluate a token first");
    const size_t V = I.m->config().n_vocab;
    std::vector<float> out(V);
    Engine::Lock hold(*I.engine);
    I.be->download(out.data(), I.st->logits + I.last_row * V, sizeof(float) * V);
    return out;
}

std::vector<std::pair<int32_t, float>> Session::top_logits(int k, std::span<const int32_t> extra) const {
    const auto& I = *impl_;
    if (!I.logits_valid) throw Error("no logits: evaluate a token first");
    Engine::Lock hold(*I.engine);
    return top_logits_of(I, I.last_row, k, extra);
}

uint64_t Session::row_mass(float lmax) const {
    const auto& I = *impl_;
    if (!I.logits_valid) throw Error("no logits: evaluate a token first");
    Engine::Lock hold(*I.engine);
    return row_mass_of(I, I.last_row, lmax);
}

void Session::reset() {
    Engine::Lock hold(*impl_->engine);
    impl_->clear();
}

int Session::n_ctx() const { return impl_->st->ctx; }
int Session::n_chunk() const { return impl_->st->chunk; }
int Session::n_cached() const { return static_cast<int>(impl_->tokens.size()); }
const std::vector<int32_t>& Session::tokens() const { return impl_->tokens; }
const Model& Session::model() const { return *impl_->model; }

Stats Session::stats() const {
    const auto& I = *impl_;
    Stats s = I.stats;
    s.weight_bytes = I.m->weight_bytes();
    s.kv_bytes = I.st->kv_bytes;
    s.state_bytes = I.st->state_bytes;
    s.scratch_bytes = I.st->scratch_bytes;
    return s;
}

void Session::reset_stats() {
    impl_->stats = Stats{};
}

}  // namespace diskformer
