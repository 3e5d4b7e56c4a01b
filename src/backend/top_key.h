// The order of Backend::top_logits as one unsigned key per entry, the same on the host and on a
// GPU: a larger key is a larger value (-0 as +0, NaN below every number), then a lower index.
// Keys are distinct (the index is in them), so the k largest keys are one set.
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#ifdef __CUDACC__
#define DF_TOP_KEY_FN __host__ __device__ inline
#else
#define DF_TOP_KEY_FN inline
#endif

namespace df {

DF_TOP_KEY_FN uint64_t top_key(float v, int32_t i) {
    uint32_t b;
    const float w = v == 0.f ? 0.f : v;
    std::memcpy(&b, &w, sizeof b);
    const bool nan = (b & 0x7fffffffu) > 0x7f800000u;
    const uint32_t ord = nan ? 0u : (b & 0x80000000u) ? ~b : (b | 0x80000000u);
    return static_cast<uint64_t>(ord) << 32 | static_cast<uint32_t>(~static_cast<uint32_t>(i));
}

DF_TOP_KEY_FN int32_t top_key_index(uint64_t key) { return static_cast<int32_t>(~static_cast<uint32_t>(key)); }

#ifndef __CUDA_ARCH__
// Backend::top_logits's argument contract, checked on the host before any work (extra is
// host-visible).
inline void check_top_logits(int n, int k, const int32_t* extra, int n_extra, int max) {
    if (k < 1 || k > n || k > max)
        throw std::invalid_argument("top_logits: k = " + std::to_string(k) + " outside 1.." + std::to_string(n < max ? n : max));
    if (n_extra < 0 || n_extra > max || (n_extra > 0 && !extra))
        throw std::invalid_argument("top_logits: " + std::to_string(n_extra) + " extra entries (at most " + std::to_string(max) + ")");
    for (int i = 0; i < n_extra; ++i)
        if (extra[i] < 0 || extra[i] >= n)
            throw std::invalid_argument("top_logits: extra index " + std::to_string(extra[i]) + " outside 0.." + std::to_string(n - 1));
}
#endif

}  // namespace df
