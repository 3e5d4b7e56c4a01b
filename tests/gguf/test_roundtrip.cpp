// Writer -> reader round trips: every value type, nested arrays, alignments, tensors given as
// bytes and streamed through Fill, file and in-memory output.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <cstring>
#include <random>
#include <stdexcept>

#include <unistd.h>

#include "gguf/gguf.h"

namespace {

using df::gguf::File;
using df::gguf::Value;
using df::gguf::ValueType;
using df::gguf::Writer;
using df::quant::Type;

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> v(n);
    for (auto& x : v) x = static_cast<uint8_t>(rng());
    return v;
}

uint64_t tensor_bytes(Type t, const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    const auto& ti = df::quant::type_info(t);
    return static_cast<uint64_t>(n / ti.block_elems) * ti.block_bytes;
}

// Every value type, its extremes, and arrays of each, nested up to the cap.
std::vector<df::gguf::KeyValue> all_values() {
    std::vector<df::gguf::KeyValue> kv = {
        {"general.architecture", Value::str("qwen35")},
        {"t.u8", Value::u8(255)},
        {"t.i8", Value::i8(-128)},
        {"t.u16", Value::u16(65535)},
        {"t.i16", Value::i16(-32768)},
        {"t.u32", Value::u32(4294967295u)},
        {"t.i32", Value::i32(std::numeric_limits<int32_t>::min())},
        {"t.u64", Value::u64(std::numeric_limits<uint64_t>::max())},
        {"t.i64", Value::i64(std::numeric_limits<int64_t>::min())},
        {"t.f32", Value::f32(1e-6f)},
        {"t.f32.inf", Value::f32(-std::numeric_limits<float>::infinity())},
        {"t.f32.denorm", Value::f32(std::numeric_limits<float>::denorm_min())},
        {"t.f64", Value::f64(1e300)},
        {"t.bool.t", Value::boolean(true)},
        {"t.bool.f", Value::boolean(false)},
        {"t.str", Value::str("h\xc3\xa9llo \xe4\xb8\x96\xe7\x95\x8c")},
        {"t.str.empty", Value::str("")},
        {"t.str.nul", Value::str(std::string("a\0b", 3))},
        {"", Value::str("empty key")},
        {"t.arr.str", Value::strings({"a", "", "<|im_start|>", std::string(1000, 'x')})},
        {"t.arr.i32", Value::i32s({1, -2, 3})},
        {"t.arr.f32", Value::f32s({0.5f, -1.f})},
        {"t.arr.bool", Value::bools({true, false, true})},
        {"t.arr.empty", Value::array(ValueType::U64, {})},
        {"t.arr.u8", Value::array(ValueType::U8, {Value::u8(0), Value::u8(255)})},
        {"t.arr.i64", Value::array(ValueType::I64, {Value::i64(-1), Value::i64(1ll << 60)})},
        {"t.arr.f64", Value::array(ValueType::F64, {Value::f64(0.1)})},
        {"t.arr.u16", Value::array(ValueType::U16, {Value::u16(7)})},
        {"t.arr.i16", Value::array(ValueType::I16, {Value::i16(-7)})},
        {"t.arr.u32", Value::array(ValueType::U32, {Value::u32(7)})},
        {"t.arr.i8", Value::array(ValueType::I8, {Value::i8(-7)})},
    };
    // [[1, 2], [], [3]] and a 4-deep nest (the reader's cap).
    kv.push_back({"t.nested2", Value::array(ValueType::ARRAY, {Value::i32s({1, 2}), Value::i32s({}), Value::i32s({3})})});
    Value deep = Value::strings({"leaf"});
    for (int i = 0; i < 3; ++i) deep = Value::array(ValueType::ARRAY, {deep, deep});
    kv.push_back({"t.nested4", deep});
    return kv;
}

TEST(GgufRoundTrip, EveryValueType) {
    Writer w;
    const auto kv = all_values();
    for (const auto& [k, v] : kv) w.set(k, v);
    const auto bytes = w.to_bytes();
    const auto f = File::from_bytes(bytes);
    EXPECT_EQ(f->version(), 3u);
    ASSERT_EQ(f->kv().size(), kv.size());
    for (size_t i = 0; i < kv.size(); ++i) {
        EXPECT_EQ(f->kv()[i].key, kv[i].key);  // file order kept
        EXPECT_TRUE(f->kv()[i].value == kv[i].value) << kv[i].key;
        ASSERT_NE(f->find(kv[i].key), nullptr);
    }
    EXPECT_EQ(f->get<std::string>("t.str.nul"), std::string("a\0b", 3));
    EXPECT_EQ(f->get<uint64_t>("t.u64"), std::numeric_limits<uint64_t>::max());
    EXPECT_EQ(f->get<float>("t.f32"), 1e-6f);
    EXPECT_EQ(f->get<float>("t.f32.denorm"), std::numeric_limits<float>::denorm_min());
    EXPECT_EQ(f->get<double>("t.f64"), 1e300);
    EXPECT_EQ(f->get<std::vector<std::string>>("t.arr.str")[2], "<|im_start|>");
    EXPECT_EQ(f->get<std::vector<bool>>("t.arr.bool"), (std::vector<bool>{true, false, true}));
    EXPECT_TRUE(f->tensors().empty());
    // Re-writing what was read gives the same bytes.
    Writer w2;
    for (const auto& [k, v] : f->kv()) w2.set(k, v);
    EXPECT_EQ(w2.to_bytes(), bytes);
}

TEST(GgufRoundTrip, SetReplacesKey) {
    Writer w;
    w.set("a", Value::u32(1));
    w.set("b", Value::u32(2));
    w.set("a", Value::str("x"));
    const auto f = File::from_bytes(w.to_bytes());
    ASSERT_EQ(f->kv().size(), 2u);
    EXPECT_EQ(f->kv()[0].key, "a");
    EXPECT_EQ(f->get<std::string>("a"), "x");
}

struct TensorCase {
    std::string name;
    Type type;
    std::vector<int64_t> shape;
};

const std::vector<TensorCase> kTensors = {
    {"token_embd.weight", Type::Q4_K, {256, 3}},
    {"blk.0.attn_norm.weight", Type::F32, {7}},
    {"blk.0.ssm_a", Type::F16, {5}},
    {"blk.0.ffn_up.weight", Type::IQ2_XXS, {512, 2, 1}},
    {"x.4d", Type::Q8_0, {64, 2, 3, 2}},
    {"x.nvfp4", Type::NVFP4, {128, 3}},
    {"x.q1", Type::Q1_0, {128, 1}},
};

class GgufAlignment : public ::testing::TestWithParam<uint64_t> {};

TEST_P(GgufAlignment, TensorsRoundTrip) {
    const uint64_t align = GetParam();
    Writer w(align);
    w.set("general.architecture", Value::str("qwen3"));
    std::vector<std::vector<uint8_t>> data;
    for (size_t i = 0; i < kTensors.size(); ++i) {
        const auto& t = kTensors[i];
        data.push_back(random_bytes(tensor_bytes(t.type, t.shape), static_cast<uint32_t>(i)));
        w.add_tensor(t.name, t.type, t.shape, data.back());
    }
    const auto bytes = w.to_bytes();
    EXPECT_EQ(bytes.size(), w.file_size());
    EXPECT_EQ(bytes.size() % align, 0u);
    const auto f = File::from_bytes(bytes);
    EXPECT_EQ(f->alignment(), align);
    EXPECT_EQ(f->has("general.alignment"), align != 32);
    if (align != 32) {
        EXPECT_EQ(f->get<uint32_t>("general.alignment"), align);
    }
    EXPECT_EQ(f->data_offset() % align, 0u);
    ASSERT_EQ(f->tensors().size(), kTensors.size());
    for (size_t i = 0; i < kTensors.size(); ++i) {
        const auto& t = f->tensors()[i];
        EXPECT_EQ(t.name, kTensors[i].name);
        EXPECT_EQ(t.type, kTensors[i].type);
        EXPECT_EQ(t.shape, kTensors[i].shape);
        EXPECT_EQ(t.offset % align, 0u);
        ASSERT_EQ(t.bytes, data[i].size());
        EXPECT_EQ(std::vector<uint8_t>(t.data, t.data + t.bytes), data[i]) << t.name;
        EXPECT_EQ(f->find_tensor(t.name), &t);
    }
    EXPECT_EQ(f->find_tensor("nope"), nullptr);
    EXPECT_EQ(f->tensors()[3].elements(), 1024);
    EXPECT_EQ(f->tensors()[3].rows(), 2);
}

INSTANTIATE_TEST_SUITE_P(Alignments, GgufAlignment, ::testing::Values(1, 2, 8, 32, 64, 128, 4096));

TEST(GgufRoundTrip, AlignmentViaSet) {
    Writer w;
    w.set("general.alignment", Value::u64(256));
    w.add_tensor("a", Type::F32, {3}, std::vector<uint8_t>(12, 1));
    w.add_tensor("b", Type::F32, {3}, std::vector<uint8_t>(12, 2));
    const auto f = File::from_bytes(w.to_bytes());
    EXPECT_EQ(f->alignment(), 256u);
    EXPECT_EQ(f->find("general.alignment")->type, ValueType::U32);  // written as u32, like llama.cpp
    EXPECT_EQ(f->find_tensor("b")->offset, 256u);
}

TEST(GgufRoundTrip, Version2ReadsLikeVersion3) {
    Writer w;
    w.set("k", Value::strings({"x", "y"}));
    w.add_tensor("t", Type::Q8_0, {32, 2}, random_bytes(68, 1));
    auto bytes = w.to_bytes();
    bytes[4] = 2;
    const auto f = File::from_bytes(bytes);
    EXPECT_EQ(f->version(), 2u);
    EXPECT_EQ(f->get<std::vector<std::string>>("k").size(), 2u);
    EXPECT_EQ(f->tensors().at(0).bytes, 68u);
}

// A generator that depends only on the absolute byte position, like synth's.
uint8_t gen(uint64_t pos) { return static_cast<uint8_t>((pos * 2654435761u) >> 13); }

TEST(GgufRoundTrip, FillStreamsWholeRowsToFile) {
    const auto dir = std::filesystem::temp_directory_path();
    const auto path = (dir / ("df_gguf_fill_" + std::to_string(::getpid()) + ".gguf")).string();
    Writer w(64);
    w.set("general.architecture", Value::str("qwen3"));
    // 20 MiB of F32 rows of 4 KiB (many rows per chunk), then one Q8_0 row of 17 MiB (bigger
    // than the writer's 16 MiB buffer, so chunks fall back to whole blocks).
    struct Seen { std::vector<std::pair<uint64_t, uint64_t>> calls; };
    Seen rows, blocks;
    const std::vector<int64_t> s1 = {1024, 5120}, s2 = {32 * (1 << 19), 1};
    const uint64_t b1 = tensor_bytes(Type::F32, s1), b2 = tensor_bytes(Type::Q8_0, s2);
    w.add_tensor("rows", Type::F32, s1, [&](uint64_t off, uint8_t* dst, uint64_t n) {
        rows.calls.emplace_back(off, n);
        for (uint64_t i = 0; i < n; ++i) dst[i] = gen(off + i);
    });
    w.add_tensor("blocks", Type::Q8_0, s2, [&](uint64_t off, uint8_t* dst, uint64_t n) {
        blocks.calls.emplace_back(off, n);
        for (uint64_t i = 0; i < n; ++i) dst[i] = gen(off + i + 7);
    });
    w.write(path);
    const auto f = File::open(path);
    EXPECT_EQ(f->file_size(), w.file_size());
    EXPECT_EQ(f->path(), path);
    const auto* t1 = f->find_tensor("rows");
    const auto* t2 = f->find_tensor("blocks");
    ASSERT_TRUE(t1 && t2);
    ASSERT_EQ(t1->bytes, b1);
    ASSERT_EQ(t2->bytes, b2);
    uint64_t wrong = 0;
    for (uint64_t i = 0; i < b1; ++i) wrong += t1->data[i] != gen(i);
    for (uint64_t i = 0; i < b2; ++i) wrong += t2->data[i] != gen(i + 7);
    EXPECT_EQ(wrong, 0u);
    // Calls cover the tensor in order, in whole rows (4096 B) or whole blocks (34 B).
    for (auto* seen : {&rows, &blocks}) {
        uint64_t next = 0;
        for (auto [off, n] : seen->calls) {
            EXPECT_EQ(off, next);
            EXPECT_EQ(n % (seen == &rows ? 4096 : 34), 0u);
            next += n;
        }
        EXPECT_EQ(next, seen == &rows ? b1 : b2);
        EXPECT_GT(seen->calls.size(), 1u);
    }
    // The in-memory image is the same file.
    const auto mem = w.to_bytes();
    ASSERT_EQ(mem.size(), f->file_size());
    EXPECT_EQ(std::memcmp(mem.data(), t1->data - f->data_offset() - t1->offset, mem.size()), 0);
    std::filesystem::remove(path);
}

TEST(GgufRoundTrip, FillErrorRemovesPartialFile) {
    const auto path = (std::filesystem::temp_directory_path() / ("df_gguf_err_" + std::to_string(::getpid()) + ".gguf")).string();
    Writer w;
    w.add_tensor("t", Type::F32, {4}, [](uint64_t, uint8_t*, uint64_t) { throw std::runtime_error("generator failed"); });
    EXPECT_THROW(w.write(path), std::runtime_error);
    EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(GgufWriter, RejectsWhatTheReaderWould) {
    Writer w;
    auto expect_error = [](auto&& fn, std::string_view part) {
        try {
            fn();
            ADD_FAILURE() << "no error, expected " << part;
        } catch (const df::gguf::Error& e) {
            EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
        }
    };
    expect_error([&] { w.add_tensor("t", Type::F32, {4}, std::vector<uint8_t>(15)); }, "15 bytes given, F32 of this shape needs 16");
    expect_error([&] { w.add_tensor("t", Type::Q4_K, {100}, std::vector<uint8_t>(144)); }, "not a multiple of the Q4_K block size 256");
    expect_error([&] { w.add_tensor("t", Type::F32, {}, std::vector<uint8_t>()); }, "0 dimensions");
    expect_error([&] { w.add_tensor("t", Type::F32, {1, 1, 1, 1, 1}, std::vector<uint8_t>(4)); }, "5 dimensions");
    expect_error([&] { w.add_tensor("t", Type::F32, {4, 0}, std::vector<uint8_t>()); }, "dimension 1 is 0");
    expect_error([&] { w.add_tensor("t", Type::F32, {1 << 30, 1 << 30}, std::vector<uint8_t>()); }, "overflows");
    expect_error([&] { w.add_tensor(std::string(64, 'n'), Type::F32, {1}, std::vector<uint8_t>(4)); }, "llama.cpp allows 63");
    expect_error([&] { w.add_tensor("t", static_cast<Type>(9), {32}, std::vector<uint8_t>(36)); }, "unknown tensor type id 9");
    w.add_tensor("t", Type::F32, {1}, std::vector<uint8_t>(4));
    expect_error([&] { w.add_tensor("t", Type::F32, {1}, std::vector<uint8_t>(4)); }, "tensor 't': duplicate");
    expect_error([&] { w.set("k", Value{ValueType::U8, uint64_t{300}}); }, "key 'k': value does not fit in u8");
    expect_error([&] { w.set("k", Value{ValueType::I32, uint64_t{3}}); }, "wrong C++ alternative");
    expect_error([&] { w.set("k", Value::array(ValueType::I32, {Value::u32(1)})); }, "key 'k' item 0: is u32 in an array of i32");
    expect_error([&] { w.set("general.alignment", Value::u32(48)); }, "48 is not a nonzero power of two");
    expect_error([&] { w.set("general.alignment", Value::str("32")); }, "expected u32, found string");
    Value deep = Value::i32s({1});
    for (int i = 0; i < 4; ++i) deep = Value::array(ValueType::ARRAY, {deep});
    expect_error([&] { w.set("k", deep); }, "nested deeper than 4");
    EXPECT_THROW(Writer(3), df::gguf::Error);
    EXPECT_THROW(Writer(0), df::gguf::Error);
    expect_error([&] { w.write("/nonexistent-dir/x.gguf"); }, "cannot create '/nonexistent-dir/x.gguf'");
}

}  // namespace
