// Lookup tables of the IQ and FP4 formats, as data (values in grids.cpp).
//
// A grid entry packs 8 (u64) or 4 (u32) unsigned byte magnitudes, element j in byte j
// (little-endian); iq1s_grid bytes are int8 in {-1, 0, 1}. Signs come separately: a 7-bit index
// into ksigns_iq2xs gives an 8-bit mask whose bit 7 makes the parity even. The arrays are plain
// extern const so the CUDA backend can copy them into constant memory as they are.
#pragma once

#include <cstdint>

namespace df::quant {

inline constexpr int kIq1sGridSize = 2048;
inline constexpr float kIq1Delta = 0.125f;  // IQ1_S / IQ1_M shift of the {-1,0,1} lattice

extern const uint8_t kmask_iq2xs[8];        // 1 << j
extern const uint8_t ksigns_iq2xs[128];     // 7-bit index -> 8-bit sign mask (bit j set: element j negative)
extern const int8_t kvalues_iq4nl[16];      // IQ4_NL / IQ4_XS codebook
extern const int8_t kvalues_fp4[16];        // 2 x E2M1, shared by MXFP4 and NVFP4

extern const uint64_t iq2xxs_grid[256];     // bytes in {8, 25, 43}
extern const uint64_t iq2xs_grid[512];      // bytes in {8, 25, 43}
extern const uint64_t iq2s_grid[1024];      // bytes in {8, 25, 43}
extern const uint32_t iq3xxs_grid[256];     // bytes in {4, 12, ..., 52, 62}
extern const uint32_t iq3s_grid[512];       // bytes odd, 1..15
extern const uint64_t iq1s_grid[kIq1sGridSize];  // int8 bytes in {-1, 0, 1}

// Byte j of a packed grid entry.
constexpr uint8_t grid_byte(uint64_t entry, int j) { return static_cast<uint8_t>(entry >> (8 * j)); }

}  // namespace df::quant
