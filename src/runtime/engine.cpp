#include "runtime/engine.h"

#include <algorithm>

#include "backend/backend.h"

namespace diskformer {

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

Engine::Counts Engine::counts() const {
    std::lock_guard l(mu_);
    return counts_;
}

}  // namespace diskformer
