// Typed accessors: which stored types convert to which C++ types, and the errors otherwise.
#include <gtest/gtest.h>

#include <limits>

#include "gguf/gguf.h"

namespace {

using df::gguf::File;
using df::gguf::Value;
using df::gguf::ValueType;

std::unique_ptr<File> file_with(std::vector<df::gguf::KeyValue> kv) {
    df::gguf::Writer w;
    for (auto& [k, v] : kv) w.set(k, v);
    return File::from_bytes(w.to_bytes());
}

template <class F> std::string error_of(F&& fn) {
    try {
        fn();
    } catch (const df::gguf::Error& e) {
        return e.what();
    }
    ADD_FAILURE() << "no gguf::Error";
    return {};
}

TEST(GgufAccessors, IntegersConvertWhenTheyFit) {
    const auto f = file_with({{"u8", Value::u8(200)},
                              {"i8", Value::i8(-5)},
                              {"u32", Value::u32(4096)},
                              {"u64", Value::u64(1ull << 40)},
                              {"i64", Value::i64(-1)},
                              {"i32", Value::i32(7)}});
    EXPECT_EQ(f->get<uint32_t>("u8"), 200u);
    EXPECT_EQ(f->get<int16_t>("u8"), 200);
    EXPECT_EQ(f->get<int8_t>("i8"), -5);
    EXPECT_EQ(f->get<int64_t>("i8"), -5);
    EXPECT_EQ(f->get<uint16_t>("u32"), 4096);
    EXPECT_EQ(f->get<int32_t>("u32"), 4096);
    EXPECT_EQ(f->get<uint64_t>("u64"), 1ull << 40);
    EXPECT_EQ(f->get<int64_t>("u64"), int64_t{1} << 40);
    EXPECT_EQ(f->get<uint32_t>("i32"), 7u);  // a non-negative signed value fits an unsigned type
    EXPECT_EQ(f->get<int64_t>("i64"), -1);

    EXPECT_EQ(error_of([&] { f->get<int8_t>("u8"); }), "gguf: key 'u8': value 200 does not fit in i8");
    EXPECT_EQ(error_of([&] { f->get<uint8_t>("u32"); }), "gguf: key 'u32': value 4096 does not fit in u8");
    EXPECT_EQ(error_of([&] { f->get<uint32_t>("u64"); }), "gguf: key 'u64': value 1099511627776 does not fit in u32");
    EXPECT_EQ(error_of([&] { f->get<uint32_t>("i64"); }), "gguf: key 'i64': value -1 does not fit in u32");
    EXPECT_EQ(error_of([&] { f->get<uint64_t>("i8"); }), "gguf: key 'i8': value -5 does not fit in u64");
}

TEST(GgufAccessors, WrongTypesNameKeyExpectedAndFound) {
    const auto f = file_with({{"qwen35.block_count", Value::str("64")},
                              {"f", Value::f32(1.5f)},
                              {"b", Value::boolean(true)},
                              {"u", Value::u32(1)},
                              {"strs", Value::strings({"a"})},
                              {"ints", Value::i32s({1})}});
    EXPECT_EQ(error_of([&] { f->get<uint32_t>("qwen35.block_count"); }),
              "gguf: key 'qwen35.block_count': expected u32, found string");
    EXPECT_EQ(error_of([&] { f->get<int32_t>("f"); }), "gguf: key 'f': expected i32, found f32");
    EXPECT_EQ(error_of([&] { f->get<float>("u"); }), "gguf: key 'u': expected f32, found u32");
    EXPECT_EQ(error_of([&] { f->get<uint32_t>("b"); }), "gguf: key 'b': expected u32, found bool");
    EXPECT_EQ(error_of([&] { f->get<bool>("u"); }), "gguf: key 'u': expected bool, found u32");
    EXPECT_EQ(error_of([&] { f->get<std::string>("strs"); }), "gguf: key 'strs': expected string, found array of string");
    EXPECT_EQ(error_of([&] { f->get<std::vector<int32_t>>("strs"); }),
              "gguf: key 'strs': expected array of integers (i32), found array of string");
    EXPECT_EQ(error_of([&] { f->get<std::vector<std::string>>("ints"); }),
              "gguf: key 'ints': expected array of string, found array of i32");
    EXPECT_EQ(error_of([&] { f->get<std::vector<bool>>("ints"); }),
              "gguf: key 'ints': expected array of bool, found array of i32");
    EXPECT_EQ(error_of([&] { f->get<std::vector<float>>("u"); }), "gguf: key 'u': expected array of f32, found u32");
    EXPECT_EQ(error_of([&] { f->get<uint32_t>("missing.key"); }), "gguf: key 'missing.key': missing (expected u32)");
    // get_opt: absent is nullopt, present with a wrong type still throws.
    EXPECT_FALSE(f->get_opt<uint32_t>("missing.key"));
    EXPECT_THROW(f->get_opt<uint32_t>("f"), df::gguf::Error);
    EXPECT_EQ(f->get_or<uint32_t>("missing.key", 4u), 4u);
    EXPECT_EQ(f->get_or<uint32_t>("u", 4u), 1u);
    EXPECT_THROW(f->get_or<uint32_t>("f", 4u), df::gguf::Error);
}

TEST(GgufAccessors, FloatsBoolsStrings) {
    const auto f = file_with({{"f32", Value::f32(1e-6f)},
                              {"f64", Value::f64(0.1)},
                              {"b", Value::boolean(true)},
                              {"s", Value::str("gpt2")}});
    EXPECT_EQ(f->get<float>("f32"), 1e-6f);
    EXPECT_EQ(f->get<double>("f32"), static_cast<double>(1e-6f));
    EXPECT_EQ(f->get<float>("f64"), 0.1f);
    EXPECT_EQ(f->get<double>("f64"), 0.1);
    EXPECT_TRUE(f->get<bool>("b"));
    EXPECT_EQ(f->get<std::string>("s"), "gpt2");
}

TEST(GgufAccessors, Arrays) {
    const auto f = file_with({
        {"u8s", Value::array(ValueType::U8, {Value::u8(1), Value::u8(255)})},
        {"u64s", Value::array(ValueType::U64, {Value::u64(1), Value::u64(1ull << 40)})},
        {"i64s", Value::array(ValueType::I64, {Value::i64(-3), Value::i64(4)})},
        {"f64s", Value::array(ValueType::F64, {Value::f64(0.5)})},
        {"recurrent", Value::bools({true, true, true, false})},
        {"empty", Value::array(ValueType::U32, {})},
        {"nested", Value::array(ValueType::ARRAY, {Value::i32s({1})})},
    });
    EXPECT_EQ(f->get<std::vector<int32_t>>("u8s"), (std::vector<int32_t>{1, 255}));
    EXPECT_EQ(f->get<std::vector<int32_t>>("i64s"), (std::vector<int32_t>{-3, 4}));
    EXPECT_EQ(f->get<std::vector<int64_t>>("u64s"), (std::vector<int64_t>{1, int64_t{1} << 40}));
    EXPECT_EQ(error_of([&] { f->get<std::vector<int32_t>>("u64s"); }),
              "gguf: key 'u64s' item 1: value 1099511627776 does not fit in i32");
    EXPECT_EQ(f->get<std::vector<float>>("f64s"), (std::vector<float>{0.5f}));
    EXPECT_EQ(f->get<std::vector<bool>>("recurrent"), (std::vector<bool>{true, true, true, false}));
    EXPECT_TRUE(f->get<std::vector<int32_t>>("empty").empty());
    EXPECT_EQ(error_of([&] { f->get<std::vector<int32_t>>("nested"); }),
              "gguf: key 'nested': expected array of integers (i32), found array of array");
}

TEST(GgufAccessors, ValueAsOnHandBuiltValues) {
    // A Value whose alternative disagrees with its type is an error, not a crash.
    EXPECT_THROW(df::gguf::value_as<uint32_t>(Value{ValueType::U32, std::string("x")}, "k"), df::gguf::Error);
    EXPECT_THROW(df::gguf::value_as<std::vector<std::string>>(
                     Value::array(ValueType::STRING, {Value::u32(1)}), "k"),
                 df::gguf::Error);
    EXPECT_EQ(df::gguf::value_as<int32_t>(Value::u16(9), "k"), 9);
}

}  // namespace
