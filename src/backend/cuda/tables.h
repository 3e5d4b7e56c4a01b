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

// Lookup tables of the integer tensor-core matvec (imma.cuh), replicated R times so that lane l
// reads copy l % R at word idx * R + l % R: with R = 32 a warp's gather never has a shared-memory
// bank conflict (random gathers from one copy cost ~4x the wavefronts and bound the kernel).
//   iq2*_sel: the 8 magnitudes of an IQ2 grid entry as level codes 0, 1, 2 (8, 25, 43), one per
//             nibble: with sign bits at bit 2 of each nibble, a PRMT selector of signed bytes.
//   sign7:    the 8 signs of a ksigns index (bit 7 = parity) at bit 4j + 2; sign8 likewise for
//             explicit sign bytes; *_sel the same with 0x3210 in each half (whole selectors).
//   iq3*:     the grid words as they are (4 magnitudes per word).
struct alignas(16) ImmaTables {
    static constexpr int kR32 = 32, kR16 = 16, kR8 = 8;
    uint32_t iq2xxs_sel[256 * kR32];
    uint32_t iq2xs_sel[512 * kR16];
    uint32_t iq2s_sel[1024 * kR8];
    uint32_t sign7[128 * kR32];
    uint32_t sign8[256 * kR16];
    uint32_t sign7_sel[128 * kR32];  // PRMT selectors for signed4(): 0x3210 | 4 per negative byte,
    uint32_t sign8_sel[256 * kR16];  // elements 0..3 in the low half, 4..7 in the high half
    uint32_t iq3xxs[256 * kR32];
    uint32_t iq3s[512 * kR16];
};

void fill_imma_tables(ImmaTables& t);

}  // namespace df::cuda
