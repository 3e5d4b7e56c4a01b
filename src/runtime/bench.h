// Helpers for `diskformer bench` that need more of a model than the public API shows.
//
// Batch-1 decode is bound by memory traffic, so the benchmark's headline is bytes per token and
// the bandwidth they imply, set against a measured floor.
#pragma once

#include <cstddef>

#include "diskformer/diskformer.h"

namespace diskformer::bench {

// Bytes one decoded token moves through memory. Weights: every tensor once, except that the
// embedding lookup reads one row of token_embd (a tied LM head still reads all of it); state:
// each GDN layer's recurrent and conv state read and written; kv: K and V of every attention
// layer read over `depth` cached positions.
struct DecodeTraffic {
    double weights = 0, state = 0, kv = 0;
    double total() const { return weights + state + kv; }
};
DecodeTraffic decode_traffic(const Model& model, int depth, KvType kv_type);

// Host memory copy bandwidth in GB/s, counting bytes read + written (STREAM "copy"), best of a
// few passes over a buffer much larger than the caches, split over `threads` (0: all cores).
double host_copy_gbs(int threads);

}  // namespace diskformer::bench
