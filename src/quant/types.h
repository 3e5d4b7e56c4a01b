// The one table of GGML block formats a GGUF tensor can hold.
//
// Loader size checks, CPU dispatch, CUDA traits and the test lists all come from kTypeTable;
// a new type is one row here, one block struct in blocks.h, one scalar reference in dequant.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace df::quant {

// Values are the GGUF/ggml type ids, so a file's type field converts directly.
enum class Type : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    IQ2_XXS = 16,
    IQ2_XS = 17,
    IQ3_XXS = 18,
    IQ1_S = 19,
    IQ4_NL = 20,
    IQ3_S = 21,
    IQ2_S = 22,
    IQ4_XS = 23,
    IQ1_M = 29,
    BF16 = 30,
    TQ1_0 = 34,
    TQ2_0 = 35,
    MXFP4 = 39,
    NVFP4 = 40,
    Q1_0 = 41,
    Q2_0 = 42,
};

struct TypeInfo {
    Type type;
    std::string_view name;   // ggml's name, upper case ("Q4_K")
    uint32_t block_elems;    // weights per block
    uint32_t block_bytes;    // bytes per block
};

inline constexpr uint32_t kQK_K = 256;

inline constexpr TypeInfo kTypeTable[] = {
    {Type::F32, "F32", 1, 4},
    {Type::F16, "F16", 1, 2},
    {Type::BF16, "BF16", 1, 2},
    {Type::Q4_0, "Q4_0", 32, 18},
    {Type::Q4_1, "Q4_1", 32, 20},
    {Type::Q5_0, "Q5_0", 32, 22},
    {Type::Q5_1, "Q5_1", 32, 24},
    {Type::Q8_0, "Q8_0", 32, 34},
    {Type::Q2_K, "Q2_K", 256, 84},
    {Type::Q3_K, "Q3_K", 256, 110},
    {Type::Q4_K, "Q4_K", 256, 144},
    {Type::Q5_K, "Q5_K", 256, 176},
    {Type::Q6_K, "Q6_K", 256, 210},
    {Type::IQ1_S, "IQ1_S", 256, 50},
    {Type::IQ1_M, "IQ1_M", 256, 56},
    {Type::IQ2_XXS, "IQ2_XXS", 256, 66},
    {Type::IQ2_XS, "IQ2_XS", 256, 74},
    {Type::IQ2_S, "IQ2_S", 256, 82},
    {Type::IQ3_XXS, "IQ3_XXS", 256, 98},
    {Type::IQ3_S, "IQ3_S", 256, 110},
    {Type::IQ4_NL, "IQ4_NL", 32, 18},
    {Type::IQ4_XS, "IQ4_XS", 256, 136},
    {Type::TQ1_0, "TQ1_0", 256, 54},
    {Type::TQ2_0, "TQ2_0", 256, 66},
    {Type::MXFP4, "MXFP4", 32, 17},
    {Type::NVFP4, "NVFP4", 64, 36},
    {Type::Q1_0, "Q1_0", 128, 18},
    {Type::Q2_0, "Q2_0", 64, 18},
};

// nullptr when the id is not a weight type we know (the loader turns that into an error naming it).
constexpr const TypeInfo* type_info(uint32_t id) {
    for (const auto& t : kTypeTable)
        if (static_cast<uint32_t>(t.type) == id) return &t;
    return nullptr;
}
constexpr const TypeInfo& type_info(Type t) { return *type_info(static_cast<uint32_t>(t)); }
constexpr std::string_view type_name(Type t) { return type_info(t).name; }
std::optional<Type> type_from_name(std::string_view name);  // case-insensitive

// Bytes of one row of n elements; n must be a multiple of the block size (checked by callers).
constexpr size_t row_bytes(Type t, int64_t n) {
    const auto& ti = type_info(t);
    return static_cast<size_t>(n / ti.block_elems) * ti.block_bytes;
}

}  // namespace df::quant
