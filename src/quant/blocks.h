// Block layouts of every non-F32 weight type, byte for byte as ggml stores them in a GGUF file.
//
// Fields are little-endian; `f16` fields hold IEEE half bits. The structs have their natural
// (2-byte at most) alignment, but blocks of the "4k+2" types and MXFP4 sit at any address inside
// a row, so code that reads a block from file memory copies it out (std::memcpy) or uses unaligned
// loads instead of dereferencing a block pointer. Each size is tied to the type table row.
#pragma once

#include <cstdint>

#include "quant/types.h"

namespace df::quant {

using f16_bits = uint16_t;

// ---- 16-bit floats (one element per "block") -----------------------------------------------
struct block_f16 { f16_bits v; };
struct block_bf16 { uint16_t v; };

// ---- legacy 32-element blocks ---------------------------------------------------------------
struct block_q4_0 { f16_bits d; uint8_t qs[16]; };                   // low nibbles 0..15, high 16..31
struct block_q4_1 { f16_bits d, m; uint8_t qs[16]; };                // y = d*q + m
struct block_q5_0 { f16_bits d; uint8_t qh[4]; uint8_t qs[16]; };    // qh bit j = 5th bit of elem j
struct block_q5_1 { f16_bits d, m; uint8_t qh[4]; uint8_t qs[16]; };
struct block_q8_0 { f16_bits d; int8_t qs[32]; };

// ---- K-quants: 256-element super-blocks -----------------------------------------------------
struct block_q2_K { uint8_t scales[16]; uint8_t qs[64]; f16_bits d, dmin; };  // scale low 4 bits, min high 4
struct block_q3_K { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; f16_bits d; };
struct block_q4_K { f16_bits d, dmin; uint8_t scales[12]; uint8_t qs[128]; };  // 6-bit scales + mins
struct block_q5_K { f16_bits d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; };
struct block_q6_K { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; f16_bits d; };

// ---- IQ ("importance") quants: lattice grids in grids.h -------------------------------------
struct block_iq1_s { f16_bits d; uint8_t qs[32]; uint16_t qh[8]; };
struct block_iq1_m { uint8_t qs[32]; uint8_t qh[16]; uint8_t scales[8]; };  // f16 scale spread over scales
struct block_iq2_xxs { f16_bits d; uint16_t qs[32]; };
struct block_iq2_xs { f16_bits d; uint16_t qs[32]; uint8_t scales[8]; };
struct block_iq2_s { f16_bits d; uint8_t qs[64]; uint8_t qh[8]; uint8_t scales[8]; };  // qs: 32 idx + 32 signs
struct block_iq3_xxs { f16_bits d; uint8_t qs[96]; };                  // 64 grid idx + 32 scale/sign bytes
struct block_iq3_s { f16_bits d; uint8_t qs[64]; uint8_t qh[8]; uint8_t signs[32]; uint8_t scales[4]; };
struct block_iq4_nl { f16_bits d; uint8_t qs[16]; };
struct block_iq4_xs { f16_bits d; uint16_t scales_h; uint8_t scales_l[4]; uint8_t qs[128]; };

// ---- ternary, FP4 and 1/2-bit types ---------------------------------------------------------
struct block_tq1_0 { uint8_t qs[48]; uint8_t qh[4]; f16_bits d; };    // base-3: 5 trits/byte, 4 in qh
struct block_tq2_0 { uint8_t qs[64]; f16_bits d; };
struct block_mxfp4 { uint8_t e; uint8_t qs[16]; };                     // E8M0 shared exponent
struct block_nvfp4 { uint8_t d[4]; uint8_t qs[32]; };                  // UE4M3 scale per 16 elements
struct block_q1_0 { f16_bits d; uint8_t qs[16]; };                     // 128 sign bits, LSB first
struct block_q2_0 { f16_bits d; uint8_t qs[16]; };                     // 64 two-bit fields, LSB first

// Ties each struct to its table row: a wrong field list or a wrong table entry fails to build.
template <class Block>
constexpr bool block_matches(Type t, uint32_t elems) {
    return sizeof(Block) == type_info(t).block_bytes && type_info(t).block_elems == elems;
}
static_assert(block_matches<block_f16>(Type::F16, 1));
static_assert(block_matches<block_bf16>(Type::BF16, 1));
static_assert(block_matches<block_q4_0>(Type::Q4_0, 32));
static_assert(block_matches<block_q4_1>(Type::Q4_1, 32));
static_assert(block_matches<block_q5_0>(Type::Q5_0, 32));
static_assert(block_matches<block_q5_1>(Type::Q5_1, 32));
static_assert(block_matches<block_q8_0>(Type::Q8_0, 32));
static_assert(block_matches<block_q2_K>(Type::Q2_K, kQK_K));
static_assert(block_matches<block_q3_K>(Type::Q3_K, kQK_K));
static_assert(block_matches<block_q4_K>(Type::Q4_K, kQK_K));
static_assert(block_matches<block_q5_K>(Type::Q5_K, kQK_K));
static_assert(block_matches<block_q6_K>(Type::Q6_K, kQK_K));
static_assert(block_matches<block_iq1_s>(Type::IQ1_S, kQK_K));
static_assert(block_matches<block_iq1_m>(Type::IQ1_M, kQK_K));
static_assert(block_matches<block_iq2_xxs>(Type::IQ2_XXS, kQK_K));
static_assert(block_matches<block_iq2_xs>(Type::IQ2_XS, kQK_K));
static_assert(block_matches<block_iq2_s>(Type::IQ2_S, kQK_K));
static_assert(block_matches<block_iq3_xxs>(Type::IQ3_XXS, kQK_K));
static_assert(block_matches<block_iq3_s>(Type::IQ3_S, kQK_K));
static_assert(block_matches<block_iq4_nl>(Type::IQ4_NL, 32));
static_assert(block_matches<block_iq4_xs>(Type::IQ4_XS, kQK_K));
static_assert(block_matches<block_tq1_0>(Type::TQ1_0, kQK_K));
static_assert(block_matches<block_tq2_0>(Type::TQ2_0, kQK_K));
static_assert(block_matches<block_mxfp4>(Type::MXFP4, 32));
static_assert(block_matches<block_nvfp4>(Type::NVFP4, 64));
static_assert(block_matches<block_q1_0>(Type::Q1_0, 128));
static_assert(block_matches<block_q2_0>(Type::Q2_0, 64));

}  // namespace df::quant
