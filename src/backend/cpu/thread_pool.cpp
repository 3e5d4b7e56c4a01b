#include "backend/cpu/thread_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>

namespace df::cpu {
namespace {

// How long an idle worker polls for the next job before it sleeps. Between the matmuls of a
// decode step the gap is a few microseconds of single-threaded work; between steps, sampling and
// I/O. Long enough for the first, short enough not to burn a core through the second.
constexpr auto kSpin = std::chrono::microseconds(200);

}  // namespace

ThreadPool::ThreadPool(int threads) {
    if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard lock(mu_);
        stop_ = true;
        generation_.fetch_add(1, std::memory_order_release);
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
        generation_.fetch_add(1, std::memory_order_release);
    }
    // A sleeper registers under mu_ before it re-checks the generation, so one that missed the
    // new generation is counted here.
    if (sleepers_.load(std::memory_order_acquire) > 0) cv_.notify_all();
    fn(0, std::min(n, chunk), 0);
    while (pending_.load(std::memory_order_acquire) != 0) _mm_pause();
}

void ThreadPool::worker(int index) {
    uint64_t seen = 0;
    for (;;) {
        // Spin first: the next job usually comes within microseconds.
        const auto until = std::chrono::steady_clock::now() + kSpin;
        for (int i = 0; generation_.load(std::memory_order_acquire) == seen; ++i) {
            _mm_pause();
            if ((i & 255) == 255 && std::chrono::steady_clock::now() > until) break;
        }
        const std::function<void(int64_t, int64_t, int)>* job;
        int64_t n, chunk;
        {
            std::unique_lock lock(mu_);
            if (generation_.load(std::memory_order_relaxed) == seen) {
                sleepers_.fetch_add(1, std::memory_order_acq_rel);
                cv_.wait(lock, [&] { return generation_.load(std::memory_order_relaxed) != seen; });
                sleepers_.fetch_sub(1, std::memory_order_acq_rel);
            }
            if (stop_) return;
            seen = generation_.load(std::memory_order_relaxed);
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
