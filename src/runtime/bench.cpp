#include "runtime/bench.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "model/model.h"
#include "runtime/model_impl.h"

namespace diskformer::bench {

DecodeTraffic decode_traffic(const Model& model, int depth, KvType kv_type) {
    const df::model::Model& m = *model.impl().model;
    const df::model::ModelConfig& c = m.config();
    const df::Weight& embd = m.weights().tok_embd;
    DecodeTraffic t;
    t.weights = static_cast<double>(m.weight_bytes());
    if (!c.tied_output && embd.rows > 0) t.weights -= static_cast<double>(embd.bytes) * (1.0 - 1.0 / embd.rows);
    const double state_layer = 4.0 * (static_cast<double>(c.ssm_v_heads) * c.ssm_state * c.ssm_state +
                                      static_cast<double>(c.ssm_conv - 1) * c.ssm_channels());
    t.state = 2.0 * state_layer * c.n_recurrent();
    const double kv_elem = kv_type == KvType::f16 ? 2 : 4;
    t.kv = 2.0 * kv_elem * c.kv_dim() * static_cast<double>(depth) * c.n_attention();
    return t;
}

double host_copy_gbs(int threads) {
    if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    constexpr size_t kBytes = size_t{256} << 20;  // well past any last-level cache
    std::unique_ptr<char[]> src(new char[kBytes]), dst(new char[kBytes]);
    std::memset(src.get(), 1, kBytes);  // touch every page before timing
    std::memset(dst.get(), 2, kBytes);
    double best = 0;
    for (int pass = 0; pass < 4; ++pass) {
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<std::thread> pool;
        const size_t per = kBytes / threads;
        for (int i = 0; i < threads; ++i) {
            const size_t off = per * i, n = i + 1 == threads ? kBytes - off : per;
            pool.emplace_back([&, off, n] { std::memcpy(dst.get() + off, src.get() + off, n); });
        }
        for (auto& th : pool) th.join();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = std::max(best, 2.0 * kBytes / s / 1e9);
    }
    return best;
}

}  // namespace diskformer::bench
