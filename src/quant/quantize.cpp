#include "quant/quantize.h"

#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/dequant.h"

namespace df::quant {

void quantize_q8_0(const float* x, void* dst, int64_t n) {
    auto* out = static_cast<block_q8_0*>(dst);
    for (int64_t b = 0; b < n / 32; ++b, x += 32) {
        float amax = 0;
        for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(x[i]));
        const float d = amax / 127.f, id = d != 0 ? 1.f / d : 0.f;
        block_q8_0 blk;
        const uint16_t h = f32_to_f16(d);
        std::memcpy(&blk.d, &h, sizeof h);
        for (int i = 0; i < 32; ++i) blk.qs[i] = static_cast<int8_t>(std::lround(x[i] * id));
        std::memcpy(&out[b], &blk, sizeof blk);
    }
}

}  // namespace df::quant
