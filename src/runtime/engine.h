// One backend's executor, shared by every model and session on it (a drafter beside its target
// included). A backend runs one thing at a time, so sessions used from several threads (the
// server's slots) take turns through the engine; and their one-token steps that come together
// run as one batched pass (continuous batching): each sequence's token is one row of the pass's
// projections, whose weights are then read once for all of them, while its attention and
// recurrent state stay its own (model::Model::forward_lanes). A pass of at most kVerifyRows rows
// gives each row the bits of a lone step (DESIGN.md, numerics), so batching never changes an
// answer.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <mutex>
#include <span>
#include <vector>

namespace df {
class Backend;
}

namespace diskformer {

class Engine {
public:
    explicit Engine(df::Backend& backend);

    // Exclusive use of the backend while alive; not reentrant (a thread holding one must not
    // take another, nor step()).
    class Lock {
    public:
        explicit Lock(Engine& e);
        ~Lock();
        Lock(const Lock&) = delete;
        Lock& operator=(const Lock&) = delete;

    private:
        Engine& e_;
    };

    // One token for one session; `group` names the model whose steps may share a pass.
    struct Step {
        const void* group = nullptr;
        void* session = nullptr;  // Session::Impl
        int32_t token = 0;
        bool done = false;
        std::exception_ptr error;
    };
    // Runs a batch of steps of one group, the backend held (session.cpp).
    using RunSteps = void (*)(std::span<Step* const> batch);

    // Runs `s` (up to kMaxLanes steps of its group in one pass); rethrows what the pass threw.
    void step(Step& s, RunSteps run);

    // A generation loop of `group` that steps one token at a time: while it runs, a batch of
    // that group waits (briefly: a fraction of a pass) for each such loop's next step before
    // it starts, since a loop between steps is only sampling and streaming its last token.
    class Decoding {
    public:
        Decoding(Engine& e, const void* group);
        ~Decoding();
        Decoding(const Decoding&) = delete;
        Decoding& operator=(const Decoding&) = delete;

    private:
        Engine& e_;
        const void* group_;
    };

    // Generation loops of `group` in progress (Decoding). A speculating loop drafts only while
    // it is the one loop of its model: beside others its plain steps share their passes, which
    // serve every loop at once where its verify passes would serve it alone.
    int loops(const void* group) const;

    static constexpr int kMaxLanes = 8;  // model::kVerifyRows

    // Graphs of batched passes (CUDA): a pass is keyed by its lanes, each a state and its length
    // band (Backend::graph_variant), in order. lane_graph says under which backend graph key the
    // pass with this signature is recorded, or 0 when it should run unrecorded: the first time a
    // set of lanes comes together (a set that changes every step would pay a recording per
    // pass), and always when DF_BATCH_GRAPHS=0 (recorded by default: measured faster). At most
    // kLaneGraphs are kept (least recently used dropped). Both with the backend held.
    struct LaneSig {
        const void* state;
        int variant;
        bool operator<(const LaneSig& o) const { return state != o.state ? state < o.state : variant < o.variant; }
        bool operator==(const LaneSig& o) const = default;
    };
    uint64_t lane_graph(const std::vector<LaneSig>& sig);
    void drop_lane_graphs(const void* state);  // before the state's buffers change or go
    static constexpr size_t kLaneGraphs = 64;

    // Passes run with more than one step, and the steps they held (bench, tests).
    struct Counts {
        uint64_t batches = 0, batched_steps = 0, lone_steps = 0;
    };
    Counts counts() const;

private:
    using Clock = std::chrono::steady_clock;
    df::Backend& backend_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    bool busy_ = false;    // the backend is in use (a Lock, or a batch running)
    bool leader_ = false;  // a thread is gathering or running a batch
    std::vector<Step*> pending_;
    std::map<const void*, int> decoding_;  // per group: generation loops in progress
    double pass_ms_ = 0;                   // moving average of a batched pass
    Counts counts_;
    // Lane graphs (backend held): signature -> {key, last use}; keys 0xFE << 56 | n, above any
    // session's graph keys (session_impl.h).
    struct LaneGraph {
        uint64_t key = 0, used = 0;
    };
    bool lane_graphs_ = false;
    std::map<std::vector<LaneSig>, LaneGraph> graphs_;
    std::vector<LaneSig> last_sig_;
    uint64_t graph_uses_ = 0, next_graph_ = 0;
};

}  // namespace diskformer
