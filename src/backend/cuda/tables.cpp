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

}  // namespace df::cuda
