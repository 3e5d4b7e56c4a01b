// A fixed pool of worker threads for data-parallel loops.
//
// parallel_for splits [0, n) into contiguous ranges, one per participating thread, and blocks
// until all are done; the calling thread takes a share, so a pool of N threads keeps N - 1
// workers. Work per call is small (one matmul: a decode step makes hundreds of calls of tens of
// microseconds), so a worker spins on the job counter for a while after each job before it
// sleeps on the condition variable: a futex wake-up costs about as much as the job itself.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace df::cpu {

class ThreadPool {
public:
    explicit ThreadPool(int threads);  // threads <= 0: one per hardware thread
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return static_cast<int>(workers_.size()) + 1; }

    // Calls fn(begin, end, thread_index) over a partition of [0, n) into at most size() ranges
    // whose sizes are multiples of `grain` (except the last). Not reentrant.
    void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t, int)>& fn);

private:
    void worker(int index);

    std::vector<std::thread> workers_;
    std::mutex mu_;
    std::condition_variable cv_;
    const std::function<void(int64_t, int64_t, int)>* job_ = nullptr;
    int64_t n_ = 0, chunk_ = 0;
    std::atomic<uint64_t> generation_{0};  // written under mu_, read by spinning workers without it
    std::atomic<int> sleepers_{0};         // workers blocked on cv_ (the caller notifies only then)
    std::atomic<int> pending_{0};
    bool stop_ = false;
};

}  // namespace df::cpu
