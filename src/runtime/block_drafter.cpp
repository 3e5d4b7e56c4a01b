// diskformer::BlockDrafter: a DFlash drafter (model/dflash.h) fed by its target session's hidden
// states as the session evaluates tokens.
#include <algorithm>

#include "diskformer/diskformer.h"
#include "model/dflash.h"
#include "runtime/session_impl.h"

namespace diskformer {

struct BlockDrafter::Impl {
    Session* target = nullptr;
    std::unique_ptr<df::model::Dflash> net;
    std::unique_ptr<df::model::Dflash::State, void (*)(df::model::Dflash::State*)> state{nullptr, nullptr};
    // Leading positions of the target's cache whose context rows the drafter holds.
    int synced = 0;
};

BlockDrafter::BlockDrafter(const std::string& dir, Session& target) : impl_(std::make_unique<Impl>()) {
    auto& I = *impl_;
    auto& T = *target.impl_;
    I.target = &target;
    if (T.on_taps) throw Error("this session already has a block drafter");
    try {
        Engine::Lock hold(*T.engine);
        I.net = df::model::Dflash::load(dir, *T.m);
        I.state = I.net->new_state(target.n_ctx(), target.n_chunk());
        T.drop_graphs();  // the recorded steps do not keep the hidden states
        T.m->enable_taps(*T.st, I.net->config().target_layers);
    } catch (const Error&) {
        throw;
    } catch (const std::exception& e) {
        throw Error(e.what());
    }
    target.reset();  // the drafter must see every token the cache holds
    const int chunk = target.n_chunk();
    T.on_taps = [this, chunk](const float* taps, int n, int pos0) {
        auto& J = *impl_;
        J.net->inject(*J.state, taps, chunk, n, pos0);
        if (pos0 <= J.synced) J.synced = pos0 + n;  // rows after those are stale
    };
}

BlockDrafter::~BlockDrafter() {
    auto& T = *impl_->target->impl_;
    Engine::Lock hold(*T.engine);
    T.on_taps = nullptr;
    T.drop_graphs();
    T.m->enable_taps(*T.st, {});
    impl_->state.reset();  // their backend buffers, with the backend held
    impl_->net.reset();
}

std::vector<int32_t> BlockDrafter::draft(int32_t last, int max_tokens) {
    auto& I = *impl_;
    const int start = I.target->n_cached();
    if (max_tokens <= 0 || I.synced < start) return {};
    Engine::Lock hold(*I.target->impl_->engine);
    std::vector<int32_t> guess = I.net->draft(*I.state, last, start);
    I.synced = std::min(I.synced, start);  // the block's own rows now sit after `start`
    if (guess.size() > static_cast<size_t>(max_tokens)) guess.resize(static_cast<size_t>(max_tokens));
    return guess;
}

int BlockDrafter::block_size() const { return impl_->net->config().block_size; }
size_t BlockDrafter::weight_bytes() const { return impl_->net->weight_bytes(); }
const Session& BlockDrafter::target() const { return *impl_->target; }

}  // namespace diskformer
