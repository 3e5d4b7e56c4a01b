// IEEE half and bfloat16 conversions with ggml's results (F16C semantics on x86).
#include <bit>
#include <cstdint>

#include "quant/dequant.h"

namespace df::quant {

float f16_to_f32(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1Fu;
    const uint32_t man = h & 0x3FFu;
    if (exp == 0) {
        // Zero or subnormal: man * 2^-24 is exact in f32.
        const float mag = static_cast<float>(man) * 0x1p-24f;
        return std::bit_cast<float>(std::bit_cast<uint32_t>(mag) | sign);
    }
    if (exp == 31)  // inf, or NaN made quiet as the hardware converter does
        return std::bit_cast<float>(sign | 0x7F800000u | (man ? 0x400000u | (man << 13) : 0u));
    return std::bit_cast<float>(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t f32_to_f16(float f) {
    uint32_t x = std::bit_cast<uint32_t>(f);
    const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
    x &= 0x7FFFFFFFu;
    if (x > 0x7F800000u)  // NaN: quiet, payload truncated
        return static_cast<uint16_t>(sign | 0x7E00u | ((x >> 13) & 0x3FFu));
    if (x >= 0x477FF000u)  // >= 65520 rounds to infinity (and inf stays inf)
        return static_cast<uint16_t>(sign | 0x7C00u);
    if (x < 0x38800000u) {
        // Result is subnormal or zero: adding 0.5 puts the 2^-24 unit at the last mantissa bit, so
        // the f32 addition itself rounds to nearest even.
        const float r = std::bit_cast<float>(x) + 0.5f;
        return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(r) - 0x3F000000u));
    }
    // Normal: rebias, then round the 13 dropped bits to nearest even.
    const uint32_t odd = (x >> 13) & 1u;
    x += 0xC8000FFFu + odd;  // (15 - 127) << 23, plus the rounding increment
    return static_cast<uint16_t>(sign | (x >> 13));
}

float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

uint16_t f32_to_bf16(float f) {
    const uint32_t x = std::bit_cast<uint32_t>(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 64u);  // quiet NaN
    return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace df::quant
