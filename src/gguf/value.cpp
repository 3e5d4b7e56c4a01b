#include <string>

#include "gguf/gguf.h"

namespace df::gguf {

std::string_view value_type_name(ValueType t) {
    switch (t) {
        case ValueType::U8: return "u8";
        case ValueType::I8: return "i8";
        case ValueType::U16: return "u16";
        case ValueType::I16: return "i16";
        case ValueType::U32: return "u32";
        case ValueType::I32: return "i32";
        case ValueType::F32: return "f32";
        case ValueType::BOOL: return "bool";
        case ValueType::STRING: return "string";
        case ValueType::ARRAY: return "array";
        case ValueType::U64: return "u64";
        case ValueType::I64: return "i64";
        case ValueType::F64: return "f64";
    }
    return "unknown type";
}

bool Array::operator==(const Array& o) const { return elem == o.elem && items == o.items; }

Value Value::strings(const std::vector<std::string>& xs) {
    std::vector<Value> items;
    items.reserve(xs.size());
    for (const auto& x : xs) items.push_back(str(x));
    return array(ValueType::STRING, std::move(items));
}

Value Value::i32s(const std::vector<int32_t>& xs) {
    std::vector<Value> items;
    items.reserve(xs.size());
    for (int32_t x : xs) items.push_back(i32(x));
    return array(ValueType::I32, std::move(items));
}

Value Value::f32s(const std::vector<float>& xs) {
    std::vector<Value> items;
    items.reserve(xs.size());
    for (float x : xs) items.push_back(f32(x));
    return array(ValueType::F32, std::move(items));
}

Value Value::bools(const std::vector<bool>& xs) {
    std::vector<Value> items;
    items.reserve(xs.size());
    for (bool x : xs) items.push_back(boolean(x));
    return array(ValueType::BOOL, std::move(items));
}

}  // namespace df::gguf
