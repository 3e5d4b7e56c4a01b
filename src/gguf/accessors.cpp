// Typed access to metadata values: the conversions File::get / get_opt / get_or and value_as allow.
#include <limits>
#include <string>
#include <type_traits>
#include <utility>

#include "gguf/cursor.h"
#include "gguf/gguf.h"

namespace df::gguf {
namespace {

bool is_unsigned(ValueType t) {
    return t == ValueType::U8 || t == ValueType::U16 || t == ValueType::U32 || t == ValueType::U64;
}
bool is_signed(ValueType t) {
    return t == ValueType::I8 || t == ValueType::I16 || t == ValueType::I32 || t == ValueType::I64;
}

template <class T> constexpr std::string_view label() {
    if constexpr (std::is_same_v<T, bool>) return "bool";
    else if constexpr (std::is_same_v<T, uint8_t>) return "u8";
    else if constexpr (std::is_same_v<T, int8_t>) return "i8";
    else if constexpr (std::is_same_v<T, uint16_t>) return "u16";
    else if constexpr (std::is_same_v<T, int16_t>) return "i16";
    else if constexpr (std::is_same_v<T, uint32_t>) return "u32";
    else if constexpr (std::is_same_v<T, int32_t>) return "i32";
    else if constexpr (std::is_same_v<T, uint64_t>) return "u64";
    else if constexpr (std::is_same_v<T, int64_t>) return "i64";
    else if constexpr (std::is_same_v<T, float>) return "f32";
    else if constexpr (std::is_same_v<T, double>) return "f64";
    else if constexpr (std::is_same_v<T, std::string>) return "string";
    else if constexpr (std::is_same_v<T, std::vector<std::string>>) return "array of string";
    else if constexpr (std::is_same_v<T, std::vector<int32_t>>) return "array of integers (i32)";
    else if constexpr (std::is_same_v<T, std::vector<int64_t>>) return "array of integers (i64)";
    else if constexpr (std::is_same_v<T, std::vector<float>>) return "array of f32";
    else if constexpr (std::is_same_v<T, std::vector<bool>>) return "array of bool";
    else static_assert(sizeof(T) == 0, "unsupported GGUF accessor type");
}

std::string found(const Value& v) {
    std::string s(value_type_name(v.type));
    if (const Array* a = std::get_if<Array>(&v.v); a && v.type == ValueType::ARRAY)
        s += " of " + std::string(value_type_name(a->elem));
    return s;
}

std::string where(std::string_view key, int64_t index) {
    std::string s = "gguf: key " + quoted(key);
    if (index >= 0) s += " item " + std::to_string(index);
    return s;
}

[[noreturn]] void wrong_type(std::string_view key, std::string_view expected, const Value& v) {
    throw Error(where(key, -1) + ": expected " + std::string(expected) + ", found " + found(v));
}

// An integer value of any width as I, or an error when it is not an integer or does not fit.
template <class I> I int_as(const Value& v, std::string_view key, int64_t index) {
    if (const auto* u = std::get_if<uint64_t>(&v.v); u && is_unsigned(v.type)) {
        if (std::in_range<I>(*u)) return static_cast<I>(*u);
        throw Error(where(key, index) + ": value " + std::to_string(*u) + " does not fit in " +
                    std::string(label<I>()));
    }
    if (const auto* s = std::get_if<int64_t>(&v.v); s && is_signed(v.type)) {
        if (std::in_range<I>(*s)) return static_cast<I>(*s);
        throw Error(where(key, index) + ": value " + std::to_string(*s) + " does not fit in " +
                    std::string(label<I>()));
    }
    if (index >= 0)
        throw Error(where(key, index) + ": expected an integer, found " + found(v));
    wrong_type(key, label<I>(), v);
}

template <class E> bool elem_ok(ValueType t) {
    if constexpr (std::is_same_v<E, bool>) return t == ValueType::BOOL;
    else if constexpr (std::is_integral_v<E>) return is_signed(t) || is_unsigned(t);
    else if constexpr (std::is_floating_point_v<E>) return t == ValueType::F32 || t == ValueType::F64;
    else return t == ValueType::STRING;
}

template <class E> E item_as(const Value& item, std::string_view key, int64_t index) {
    if constexpr (std::is_integral_v<E> && !std::is_same_v<E, bool>) {
        return int_as<E>(item, key, index);
    } else {
        using Stored = std::conditional_t<std::is_same_v<E, bool>, bool,
                       std::conditional_t<std::is_floating_point_v<E>, double, std::string>>;
        // The array's element type was checked; a hand-built Value may still disagree inside.
        const auto* x = std::get_if<Stored>(&item.v);
        if (!x || !elem_ok<E>(item.type))
            throw Error(where(key, index) + ": expected " + std::string(label<E>()) + ", found " +
                        found(item));
        return static_cast<E>(*x);
    }
}

}  // namespace

template <class T> T value_as(const Value& v, std::string_view key) {
    if constexpr (std::is_same_v<T, bool>) {
        if (const auto* b = std::get_if<bool>(&v.v); b && v.type == ValueType::BOOL) return *b;
        wrong_type(key, label<T>(), v);
    } else if constexpr (std::is_integral_v<T>) {
        return int_as<T>(v, key, -1);
    } else if constexpr (std::is_floating_point_v<T>) {
        const auto* d = std::get_if<double>(&v.v);
        if (d && (v.type == ValueType::F32 || v.type == ValueType::F64)) return static_cast<T>(*d);
        wrong_type(key, label<T>(), v);
    } else if constexpr (std::is_same_v<T, std::string>) {
        if (const auto* s = std::get_if<std::string>(&v.v); s && v.type == ValueType::STRING) return *s;
        wrong_type(key, label<T>(), v);
    } else {
        using E = typename T::value_type;
        const Array* a = v.type == ValueType::ARRAY ? std::get_if<Array>(&v.v) : nullptr;
        if (!a || !elem_ok<E>(a->elem)) wrong_type(key, label<T>(), v);
        T out;
        out.reserve(a->items.size());
        for (size_t i = 0; i < a->items.size(); ++i)
            out.push_back(item_as<E>(a->items[i], key, static_cast<int64_t>(i)));
        return out;
    }
}

template <class T> std::optional<T> File::get_opt(std::string_view key) const {
    const Value* v = find(key);
    if (!v) return std::nullopt;
    return value_as<T>(*v, key);
}

template <class T> T File::get(std::string_view key) const {
    const Value* v = find(key);
    if (!v) throw Error("gguf: key " + quoted(key) + ": missing (expected " + std::string(label<T>()) + ")");
    return value_as<T>(*v, key);
}

#define DF_GGUF_ACCESSOR(T)                                                   \
    template T value_as<T>(const Value&, std::string_view);                   \
    template T File::get<T>(std::string_view) const;                          \
    template std::optional<T> File::get_opt<T>(std::string_view) const;

DF_GGUF_ACCESSOR(uint8_t)
DF_GGUF_ACCESSOR(int8_t)
DF_GGUF_ACCESSOR(uint16_t)
DF_GGUF_ACCESSOR(int16_t)
DF_GGUF_ACCESSOR(uint32_t)
DF_GGUF_ACCESSOR(int32_t)
DF_GGUF_ACCESSOR(uint64_t)
DF_GGUF_ACCESSOR(int64_t)
DF_GGUF_ACCESSOR(float)
DF_GGUF_ACCESSOR(double)
DF_GGUF_ACCESSOR(bool)
DF_GGUF_ACCESSOR(std::string)
DF_GGUF_ACCESSOR(std::vector<std::string>)
DF_GGUF_ACCESSOR(std::vector<int32_t>)
DF_GGUF_ACCESSOR(std::vector<int64_t>)
DF_GGUF_ACCESSOR(std::vector<float>)
DF_GGUF_ACCESSOR(std::vector<bool>)
#undef DF_GGUF_ACCESSOR

}  // namespace df::gguf
