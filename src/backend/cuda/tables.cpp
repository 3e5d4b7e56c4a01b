#include "backend/cuda/tables.h"

#include <cstring>

#include "quant/grids.h"

namespace df::cuda {

void fill_grid_tables(GridTables& t) {
    std::memcpy(t.iq2xxs, quant::iq2xxs_grid, sizeof t.iq2xxs);
    std::memcpy(t.iq2xs, quant::iq2xs_grid, sizeof t.iq2xs);
    std::memcpy(t.iq2s, quant::iq2s_grid, sizeof t.iq2s);
    std::memcpy(t.iq3xxs, quant::iq3xxs_grid, sizeof t.iq3xxs);
    std::memcpy(t.iq3s, quant::iq3s_grid, sizeof t.iq3s);
    for (int i = 0; i < 16; ++i) t.iq4nl[i] = static_cast<float>(quant::kvalues_iq4nl[i]);
}

namespace {

uint32_t level_codes(uint64_t grid) {
    uint32_t sel = 0;
    for (int j = 0; j < 8; ++j) {
        const auto v = static_cast<uint8_t>(grid >> (8 * j));
        const uint32_t code = v == 8 ? 0 : v == 25 ? 1 : 2;  // IQ2 grids hold only 8, 25, 43
        sel |= code << (4 * j);
    }
    return sel;
}

uint32_t spread_signs(uint32_t s8) {
    uint32_t w = 0;
    for (int j = 0; j < 8; ++j) w |= ((s8 >> j) & 1u) << (4 * j + 2);
    return w;
}

template <int R, class F>
void replicate(uint32_t* dst, int n, F f) {
    for (int i = 0; i < n; ++i) {
        const uint32_t v = f(i);
        for (int r = 0; r < R; ++r) dst[i * R + r] = v;
    }
}

}  // namespace

void fill_imma_tables(ImmaTables& t) {
    using T = ImmaTables;
    replicate<T::kR32>(t.iq2xxs_sel, 256, [](int i) { return level_codes(quant::iq2xxs_grid[i]); });
    replicate<T::kR16>(t.iq2xs_sel, 512, [](int i) { return level_codes(quant::iq2xs_grid[i]); });
    replicate<T::kR8>(t.iq2s_sel, 1024, [](int i) { return level_codes(quant::iq2s_grid[i]); });
    replicate<T::kR32>(t.sign7, 128, [](int i) { return spread_signs(quant::ksigns_iq2xs[i]); });
    replicate<T::kR16>(t.sign8, 256, [](int i) { return spread_signs(static_cast<uint32_t>(i)); });
    replicate<T::kR32>(t.sign7_sel, 128, [](int i) { return spread_signs(quant::ksigns_iq2xs[i]) | 0x32103210u; });
    replicate<T::kR16>(t.sign8_sel, 256, [](int i) { return spread_signs(static_cast<uint32_t>(i)) | 0x32103210u; });
    replicate<T::kR32>(t.iq3xxs, 256, [](int i) { return quant::iq3xxs_grid[i]; });
    replicate<T::kR16>(t.iq3s, 512, [](int i) { return quant::iq3s_grid[i]; });
}

}  // namespace df::cuda
