// Dispatch from the type table to the scalar reference dequantizers, and type names.
#include <cctype>
#include <stdexcept>
#include <string>

#include "quant/dequant.h"
#include "quant/dequant_impl.h"

namespace df::quant {

namespace {

// nullptr for an id outside the table; every table row has an entry (tests/quant checks).
DequantFn find_dequant(Type type) {
    using namespace detail;
    switch (type) {
        case Type::F32: return dequant_f32;
        case Type::F16: return dequant_f16;
        case Type::BF16: return dequant_bf16;
        case Type::Q4_0: return dequant_q4_0;
        case Type::Q4_1: return dequant_q4_1;
        case Type::Q5_0: return dequant_q5_0;
        case Type::Q5_1: return dequant_q5_1;
        case Type::Q8_0: return dequant_q8_0;
        case Type::Q2_K: return dequant_q2_K;
        case Type::Q3_K: return dequant_q3_K;
        case Type::Q4_K: return dequant_q4_K;
        case Type::Q5_K: return dequant_q5_K;
        case Type::Q6_K: return dequant_q6_K;
        case Type::IQ1_S: return dequant_iq1_s;
        case Type::IQ1_M: return dequant_iq1_m;
        case Type::IQ2_XXS: return dequant_iq2_xxs;
        case Type::IQ2_XS: return dequant_iq2_xs;
        case Type::IQ2_S: return dequant_iq2_s;
        case Type::IQ3_XXS: return dequant_iq3_xxs;
        case Type::IQ3_S: return dequant_iq3_s;
        case Type::IQ4_NL: return dequant_iq4_nl;
        case Type::IQ4_XS: return dequant_iq4_xs;
        case Type::TQ1_0: return dequant_tq1_0;
        case Type::TQ2_0: return dequant_tq2_0;
        case Type::MXFP4: return dequant_mxfp4;
        case Type::NVFP4: return dequant_nvfp4;
        case Type::Q1_0: return dequant_q1_0;
        case Type::Q2_0: return dequant_q2_0;
    }
    return nullptr;
}

std::string type_label(Type type) {
    const TypeInfo* ti = type_info(static_cast<uint32_t>(type));
    return ti ? std::string(ti->name) : "ggml type id " + std::to_string(static_cast<uint32_t>(type));
}

}  // namespace

DequantFn dequant_fn(Type type) {
    DequantFn fn = type_info(static_cast<uint32_t>(type)) ? find_dequant(type) : nullptr;
    if (!fn) throw std::invalid_argument("dequantize: unsupported weight type " + type_label(type));
    return fn;
}

void dequantize_row(Type type, const void* src, float* dst, int64_t n) {
    const DequantFn fn = dequant_fn(type);
    const uint32_t be = type_info(type).block_elems;
    if (n < 0 || n % be != 0)
        throw std::invalid_argument("dequantize: " + std::to_string(n) + " elements is not a multiple of the " +
                                    type_label(type) + " block size " + std::to_string(be));
    fn(src, dst, n);
}

std::optional<Type> type_from_name(std::string_view name) {
    for (const auto& t : kTypeTable) {
        if (t.name.size() != name.size()) continue;
        bool same = true;
        for (size_t i = 0; i < name.size() && same; ++i)
            same = std::toupper(static_cast<unsigned char>(name[i])) == static_cast<unsigned char>(t.name[i]);
        if (same) return t.type;
    }
    return std::nullopt;
}

}  // namespace df::quant
