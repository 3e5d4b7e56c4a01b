// Lookup tables the IQ decoders read on the device: one copy in device memory, filled once from
// quant/grids.h, passed to kernels by pointer (no relocatable device code needed).
#pragma once

#include <cstdint>

namespace df::cuda {

struct alignas(16) GridTables {
    uint64_t iq2xxs[256];
    uint64_t iq2xs[512];
    uint64_t iq2s[1024];
    uint32_t iq3xxs[256];
    uint32_t iq3s[512];
    float iq4nl[16];
};

// Fills a host copy (the backend uploads it).
void fill_grid_tables(GridTables& t);

}  // namespace df::cuda
