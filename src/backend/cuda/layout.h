// How the CUDA backend holds a weight matrix in device memory (host and device code share this).
//
// Rows keep ggml's block layout, with two changes made once at load:
//  * every row starts on a 16-byte boundary (rows are padded), so kernels issue 16-byte loads;
//  * for the "4k+2" block types the 2-byte f16 scale (the block's "head") is moved out of each
//    block into an array at the end of the row: the remaining block bodies are then 4k bytes and
//    stay 4-byte (often 16-byte) aligned. A row is [body 0 .. body n-1 | pad | head 0 .. head n-1 | pad].
// Types without a native CUDA decoder are expanded to F32 at load (exact, bigger); see
// native_type().
#pragma once

#include <cstddef>
#include <cstdint>

#include "quant/types.h"

namespace df::cuda {

struct BlockSplit {
    int head = 0;            // bytes moved out of each block (0: block kept whole)
    bool head_last = false;  // where the head sits in ggml's block (start or end)
};

constexpr BlockSplit block_split(quant::Type t) {
    using quant::Type;
    switch (t) {
        case Type::Q4_0: case Type::Q5_0: case Type::Q8_0: case Type::IQ2_XXS: case Type::IQ2_XS:
        case Type::IQ2_S: case Type::IQ3_XXS: case Type::IQ3_S: case Type::IQ4_NL:
            return {2, false};
        case Type::Q3_K: case Type::Q6_K:
            return {2, true};
        default:
            return {0, false};
    }
}

// Types with a CUDA decoder (quant_<type>.cu); the list itself comes from CMake
// (DF_CUDA_QUANT_TYPES) so this switch and the generated translation units cannot drift.
constexpr bool native_type(quant::Type t) {
    switch (t) {
#define DF_X(name) case quant::Type::name: return true;
#include "backend/cuda/quant_types.inc"
#undef DF_X
        default: return false;
    }
}

struct RowLayout {
    size_t body_bytes = 0;   // bytes of the block bodies of one row
    size_t head_off = 0;     // offset of the head array inside a row
    size_t row_stride = 0;   // bytes between rows
};

constexpr size_t round_up16(size_t n) { return (n + 15) / 16 * 16; }

constexpr RowLayout row_layout(quant::Type t, int64_t cols) {
    const auto& ti = quant::type_info(t);
    const size_t blocks = static_cast<size_t>(cols / ti.block_elems);
    RowLayout l;
    if (ti.block_elems == 1) {  // F32/F16/BF16: rows unpadded, so 1-D tensors stay plain arrays
        l.body_bytes = l.head_off = l.row_stride = blocks * ti.block_bytes;
        return l;
    }
    const BlockSplit s = block_split(t);
    l.body_bytes = blocks * (ti.block_bytes - s.head);
    l.head_off = round_up16(l.body_bytes);
    l.row_stride = s.head ? round_up16(l.head_off + blocks * s.head) : l.head_off;
    return l;
}

}  // namespace df::cuda
