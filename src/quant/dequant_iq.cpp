// Scalar reference dequantization of the IQ types (lattice grids in grids.h) and IQ4 codebooks.
//
// Each value is (block scale) * (grid byte) with an exact sign, in ggml's order of products;
// only IQ4_XS's (d * (ls - 32)) * codebook product can round, and it is formed the same way.
#include "quant/dequant_impl.h"
#include "quant/grids.h"

namespace df::quant::detail {

namespace {

// 8 values db * grid[j], negated where bit j of `signs` is set.
inline void put8_signed(float* y, float db, uint64_t grid, uint8_t signs) {
    for (int j = 0; j < 8; ++j)
        y[j] = db * static_cast<float>(grid_byte(grid, j)) * (signs & kmask_iq2xs[j] ? -1.f : 1.f);
}

}  // namespace

void dequant_iq2_xxs(const void* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n / 256; ++i) {
        const auto b = load_block<block_iq2_xxs>(src, i);
        const float d = f16_to_f32(b.d);
        for (int ib = 0; ib < 8; ++ib) {
            // Per 32 values, two u32: four grid indices (bytes), then four 7-bit sign indices + scale.
            const uint32_t idx = b.qs[4 * ib] | static_cast<uint32_t>(b.qs[4 * ib + 1]) << 16;
            const uint32_t aux = b.qs[4 * ib + 2] | static_cast<uint32_t>(b.qs[4 * ib + 3]) << 16;
            const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.25f;
            for (int l = 0; l < 4; ++l, dst += 8)
                put8_signed(dst, db, iq2xxs_grid[(idx >> (8 * l)) & 0xFF], ksigns_iq2xs[(aux >> (7 * l)) & 127]);
        }
    }
}

void dequant_iq2_xs(const void* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n / 256; ++i) {
        const auto b = load_block<block_iq2_xs>(src, i);
        const float d = f16_to_f32(b.d);
        for (int ib = 0; ib < 8; ++ib) {
            const float db[2] = {d * (0.5f + static_cast<float>(b.scales[ib] & 0xF)) * 0.25f,
                                 d * (0.5f + static_cast<float>(b.scales[ib] >> 4)) * 0.25f};
            for (int l = 0; l < 4; ++l, dst += 8) {
                const uint16_t q = b.qs[4 * ib + l];  // 9-bit grid index, 7-bit sign index
                put8_signed(dst, db[l / 2], iq2xs_grid[q & 511], ksigns_iq2xs[q >> 9]);
            }
        }
    }
}

void dequant_iq2_s(const void* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n / 256; ++i) {
        const auto b = load_block<block_iq2_s>(src, i);
        const float d = f16_to_f32(b.d);
        const uint8_t* signs = b.qs + 32;  // explicit 8-bit sign masks
        for (int ib = 0; ib < 8; ++ib) {
            const float db[2] = {d * (0.5f + static_cast<float>(b.scales[ib] & 0xF)) * 0.25f,
                                 d * (0.5f + static_cast<float>(b.scales[ib] >> 4)) * 0.25f};
            for (int l = 0; l < 4; ++l, dst += 8) {
                const int idx = b.qs[4 * ib + l] | ((b.qh[ib] << (8 - 2 * l)) & 0x300);
                put8_signed(dst, db[l / 2], iq2s_grid[idx], signs[4 * ib + l]);
            }
        }
    }
}

void dequant_iq3_xxs(const void* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n / 256; ++i) {
        const auto b = load_block<block_iq3_xxs>(src, i);
        const float d = f16_to_f32(b.d);
        for (int ib = 0; ib < 8; ++ib) {
            const uint32_t aux = load_u32(b.qs + 64 + 4 * ib);  // 4 x 7-bit sign index + 4-bit scale
            const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.5f;
            for (int l = 0; l < 4; ++l, dst += 8) {
                const uint8_t signs = ksigns_iq2xs[(aux >> (7 * l)) & 127];
                const uint64_t grid = iq3xxs_grid[b.qs[8 * ib + 2 * l]] |
                                      static_cast<uint64_t>(iq3xxs_grid[b.qs[8 * ib + 2 * l + 1]]) << 32;
                put8_signed(dst, db, grid, signs);
            }
        }
    }
}

void dequant_iq3_s(const void* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n / 256; ++i) {
        const auto b = load_block<block_iq3_s>(src, i);
        const float d = f16_to_f32(b.d);
        for (int ib = 0; ib < 8; ++ib) {
            const int s = ib % 2 ? b.scales[ib / 2] >> 4 : b.scales[ib / 2] & 0xF;
            const float db = d * static_cast<float>(1 + 2 * s);
            const uint8_t* qs = b.qs + 8 * ib;
            for (int l = 0; l < 4; ++l, dst += 8) {
                // 9-bit indices: the 9th bit of grid index 2l+m is bit 2l+m of qh[ib].
                const int i0 = qs[2 * l] | ((b.qh[ib] << (8 - 2 * l)) & 256);
                const int i1 = qs[2 * l + 1] | ((b.qh[ib] << (7 - 2 * l)) & 256);
                const uint64_t grid = iq3s_grid[i0] | static_cast<uint64_t>(iq3s_grid[i1]) << 32;
                put8_signed(dst, db, grid, b.signs[4 * ib + l]);
            }
        }
    }
}

void dequant_iq1_s(const void* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n / 256; ++i) {
        const auto b = load_block<block_iq1_s>(src, i);
        const float d = f16_to_f32(b.d);
        for (int ib = 0; ib < 8; ++ib) {
            const uint16_t h = b.qh[ib];  // 3 high index bits per group, 3-bit scale, delta sign
            const float dl = d * static_cast<float>(2 * ((h >> 12) & 7) + 1);
            const float delta = h & 0x8000 ? -kIq1Delta : kIq1Delta;
            for (int l = 0; l < 4; ++l, dst += 8) {
                const uint64_t grid = iq1s_grid[b.qs[4 * ib + l] | (((h >> (3 * l)) & 7) << 8)];
                for (int j = 0; j < 8; ++j)
                    dst[j] = dl * (static_cast<float>(static_cast<int8_t>(grid_byte(grid, j))) + delta);
            }
        }
    }
}

void dequant_iq1_m(const void* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n / 256; ++i) {
        const auto b = load_block<block_iq1_m>(src, i);
        uint16_t sc[4];
        std::memcpy(sc, b.scales, 8);
        // The f16 super-scale is spread over the top nibbles of the four scale words.
        const auto dbits = static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) |
                                                 (sc[3] & 0xF000));
        const float d = f16_to_f32(dbits);
        for (int ib = 0; ib < 8; ++ib) {
            const int sh = 6 * (ib % 2);
            const float dl1 = d * static_cast<float>(2 * ((sc[ib / 2] >> sh) & 7) + 1);
            const float dl2 = d * static_cast<float>(2 * ((sc[ib / 2] >> (sh + 3)) & 7) + 1);
            const uint8_t* qs = b.qs + 4 * ib;
            const uint8_t* qh = b.qh + 2 * ib;
            const int idx[4] = {qs[0] | ((qh[0] << 8) & 0x700), qs[1] | ((qh[0] << 4) & 0x700),
                                qs[2] | ((qh[1] << 8) & 0x700), qs[3] | ((qh[1] << 4) & 0x700)};
            const float delta[4] = {qh[0] & 0x08 ? -kIq1Delta : kIq1Delta, qh[0] & 0x80 ? -kIq1Delta : kIq1Delta,
                                    qh[1] & 0x08 ? -kIq1Delta : kIq1Delta, qh[1] & 0x80 ? -kIq1Delta : kIq1Delta};
            for (int l = 0; l < 4; ++l, dst += 8) {
                const float dl = l < 2 ? dl1 : dl2;
                const uint64_t grid = iq1s_grid[idx[l]];
                for (int j = 0; j < 8; ++j)
                    dst[j] = dl * (static_cast<float>(static_cast<int8_t>(grid_byte(grid, j))) + delta[l]);
            }
        }
    }
}

void dequant_iq4_nl(const void* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n / 32; ++i, dst += 32) {
        const auto b = load_block<block_iq4_nl>(src, i);
        const float d = f16_to_f32(b.d);
        for (int j = 0; j < 16; ++j) {
            dst[j] = d * static_cast<float>(kvalues_iq4nl[b.qs[j] & 0xF]);
            dst[j + 16] = d * static_cast<float>(kvalues_iq4nl[b.qs[j] >> 4]);
        }
    }
}

void dequant_iq4_xs(const void* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n / 256; ++i) {
        const auto b = load_block<block_iq4_xs>(src, i);
        const float d = f16_to_f32(b.d);
        for (int ib = 0; ib < 8; ++ib, dst += 32) {
            const int ls = ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((b.scales_h >> (2 * ib)) & 3) << 4);
            const float dl = d * static_cast<float>(ls - 32);
            const uint8_t* qs = b.qs + 16 * ib;
            for (int j = 0; j < 16; ++j) {
                dst[j] = dl * static_cast<float>(kvalues_iq4nl[qs[j] & 0xF]);
                dst[j + 16] = dl * static_cast<float>(kvalues_iq4nl[qs[j] >> 4]);
            }
        }
    }
}

}  // namespace df::quant::detail
