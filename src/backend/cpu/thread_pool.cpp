#include "backend/cpu/thread_pool.h"

#include <algorithm>

namespace df::cpu {

ThreadPool::ThreadPool(int threads) {
    if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard lock(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t, int)>& fn) {
    if (n <= 0) return;
    grain = std::max<int64_t>(grain, 1);
    const int64_t units = (n + grain - 1) / grain;
    const int64_t parts = std::min<int64_t>(units, size());
    if (parts <= 1) {
        fn(0, n, 0);
        return;
    }
    const int64_t chunk = (units + parts - 1) / parts * grain;
    {
        std::lock_guard lock(mu_);
        job_ = &fn;
        n_ = n;
        chunk_ = chunk;
        pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
        ++generation_;
    }
    cv_.notify_all();
    fn(0, std::min(n, chunk), 0);
    // Workers finish within microseconds of us for balanced loops: spin briefly, then yield.
    while (pending_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
}

void ThreadPool::worker(int index) {
    uint64_t seen = 0;
    for (;;) {
        const std::function<void(int64_t, int64_t, int)>* job;
        int64_t n, chunk;
        {
            std::unique_lock lock(mu_);
            cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
            if (stop_) return;
            seen = generation_;
            job = job_;
            n = n_;
            chunk = chunk_;
        }
        const int64_t begin = index * chunk;
        if (begin < n) (*job)(begin, std::min(n, begin + chunk), index);
        pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
}

}  // namespace df::cpu
