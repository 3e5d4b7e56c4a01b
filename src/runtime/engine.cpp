#include "runtime/engine.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backend/backend.h"

namespace diskformer {

Engine::Engine(df::Backend& backend) : backend_(backend) {
    // On unless DF_BATCH_GRAPHS=0 (H100, session 35: 2 streams +8 % on the 4B layout, +10 % on
    // the 27B; even at 4 and 8, where a pass's GPU time hides its launches).
    const char* env = std::getenv("DF_BATCH_GRAPHS");
    lane_graphs_ = !(env && std::strcmp(env, "0") == 0);
}

Engine::Lock::Lock(Engine& e) : e_(e) {
    std::unique_lock l(e.mu_);
    e.cv_.wait(l, [&] { return !e.busy_; });
    e.busy_ = true;
    l.unlock();
    e.backend_.bind_thread();
}

Engine::Lock::~Lock() {
    {
        std::lock_guard l(e_.mu_);
        e_.busy_ = false;
    }
    e_.cv_.notify_all();
}

Engine::Decoding::Decoding(Engine& e, const void* group) : e_(e), group_(group) {
    std::lock_guard l(e.mu_);
    ++e.decoding_[group];
}

Engine::Decoding::~Decoding() {
    {
        std::lock_guard l(e_.mu_);
        if (--e_.decoding_[group_] == 0) e_.decoding_.erase(group_);
    }
    e_.cv_.notify_all();  // a gathering batch may be waiting for this loop
}

void Engine::step(Step& s, RunSteps run) {
    std::unique_lock l(mu_);
    pending_.push_back(&s);
    cv_.notify_all();
    while (!s.done) {
        if (leader_) {  // another thread gathers or runs a batch, which may take this step
            cv_.wait(l);
            continue;
        }
        leader_ = true;
        const void* group = pending_.front()->group;
        auto waiting = [&] {
            return std::count_if(pending_.begin(), pending_.end(), [&](const Step* p) { return p->group == group; });
        };
        auto loops = [&] {
            const auto it = decoding_.find(group);
            return std::min<std::ptrdiff_t>(kMaxLanes, it == decoding_.end() ? 0 : it->second);
        };
        // The other loops of this group are sampling and streaming their last token: wait for
        // their next steps, a fraction of a pass at most (a late one takes the next pass). The
        // backend stays free meanwhile (a loop may need it to read its logits).
        const auto wait = std::chrono::duration<double, std::milli>(std::clamp(0.5 * pass_ms_, 0.05, 50.0));
        const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(wait);
        while (waiting() < loops() && cv_.wait_until(l, deadline) != std::cv_status::timeout) {
        }
        cv_.wait(l, [&] { return !busy_; });
        busy_ = true;
        std::vector<Step*> batch;
        for (auto it = pending_.begin(); it != pending_.end() && batch.size() < static_cast<size_t>(kMaxLanes);) {
            if ((*it)->group == group) {
                batch.push_back(*it);
                it = pending_.erase(it);
            } else {
                ++it;
            }
        }
        l.unlock();
        const auto t0 = Clock::now();
        std::exception_ptr error;
        try {
            backend_.bind_thread();
            run(batch);
        } catch (...) {
            error = std::current_exception();
        }
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        l.lock();
        pass_ms_ = pass_ms_ == 0 ? ms : 0.8 * pass_ms_ + 0.2 * ms;
        if (batch.size() > 1) {
            ++counts_.batches;
            counts_.batched_steps += batch.size();
        } else {
            ++counts_.lone_steps;
        }
        for (Step* p : batch) {
            p->error = error;
            p->done = true;
        }
        busy_ = false;
        leader_ = false;
        cv_.notify_all();
    }
    if (s.error) std::rethrow_exception(s.error);
}

uint64_t Engine::lane_graph(const std::vector<LaneSig>& sig) {
    if (!lane_graphs_) return 0;
    const bool again = sig == last_sig_;
    last_sig_ = sig;
    auto it = graphs_.find(sig);
    if (it == graphs_.end()) {
        if (!again) return 0;
        if (graphs_.size() >= kLaneGraphs) {
            auto lru = std::min_element(graphs_.begin(), graphs_.end(),
                                        [](const auto& a, const auto& b) { return a.second.used < b.second.used; });
            backend_.drop_capture(lru->second.key);
            graphs_.erase(lru);
        }
        it = graphs_.emplace(sig, LaneGraph{(uint64_t{0xFE} << 56) | ++next_graph_, 0}).first;
    }
    it->second.used = ++graph_uses_;
    return it->second.key;
}

void Engine::drop_lane_graphs(const void* state) {
    for (auto it = graphs_.begin(); it != graphs_.end();) {
        if (std::any_of(it->first.begin(), it->first.end(), [&](const LaneSig& l) { return l.state == state; })) {
            backend_.drop_capture(it->second.key);
            it = graphs_.erase(it);
        } else {
            ++it;
        }
    }
    // A new state at the same address must not count as the same set coming together again.
    if (std::any_of(last_sig_.begin(), last_sig_.end(), [&](const LaneSig& l) { return l.state == state; })) last_sig_.clear();
}

int Engine::loops(const void* group) const {
    std::lock_guard l(mu_);
    const auto it = decoding_.find(group);
    return it == decoding_.end() ? 0 : it->second;
}

Engine::Counts Engine::counts() const {
    std::lock_guard l(mu_);
    return counts_;
}

}  // namespace diskformer
