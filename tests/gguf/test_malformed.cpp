// Malformed and hostile GGUF images: every one must give gguf::Error with a message that names
// what was wrong, never a crash or an out-of-bounds read (this suite also runs under ASan+UBSan).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>

#include <unistd.h>

#include "common/golden.h"
#include "gguf/gguf.h"
#include "raw_gguf.h"

namespace {

using df::gguf::File;
using df::gguf::Value;
using df::gguf::ValueType;
using df::quant::Type;
using df::test::expect_gguf_error;
using df::test::RawGguf;

constexpr uint32_t kF32 = 0, kQ4_K = 12, kQ8_0 = 8;

// A small file touching every section: scalar, string, string array, nested array, three
// tensors; the last tensor ends on the alignment, so every strict prefix is malformed.
std::vector<uint8_t> small_file() {
    df::gguf::Writer w(64);
    w.set("general.architecture", Value::str("qwen35"));
    w.set("qwen35.block_count", Value::u32(4));
    w.set("tokenizer.ggml.tokens", Value::strings({"a", "bc", "<|im_end|>"}));
    w.set("nested", Value::array(ValueType::ARRAY, {Value::i32s({1, 2}), Value::i32s({3})}));
    w.set("f", Value::f64(2.5));
    w.add_tensor("a", Type::F32, {3}, std::vector<uint8_t>(12, 1));
    w.add_tensor("b", Type::Q8_0, {32, 2}, std::vector<uint8_t>(68, 2));
    w.add_tensor("c", Type::F32, {16}, std::vector<uint8_t>(64, 3));
    return w.to_bytes();
}

TEST(GgufMalformed, TruncatedAtEveryByte) {
    const auto full = small_file();
    ASSERT_NO_THROW(File::from_bytes(full));
    for (size_t n = 0; n < full.size(); ++n) {
        const std::vector<uint8_t> prefix(full.begin(), full.begin() + n);
        const std::string msg = expect_gguf_error(prefix, {});
        const bool named = msg.find("truncated") != std::string::npos ||
                           msg.find("extends past end of file") != std::string::npos;
        EXPECT_TRUE(named) << "at " << n << ": " << msg;
        if (HasFailure()) break;  // one clear failure, not thousands
    }
}

TEST(GgufMalformed, TruncatedGoldenModelAtRandomPoints) {
    const auto path = df::test::golden_dir() / "models" / "q3_4L_kmix.gguf";
    const auto bytes_c = df::test::read_file(path);
    const std::vector<uint8_t> full(bytes_c.begin(), bytes_c.end());
    const auto f = File::from_bytes(full);
    // Every section boundary of the header: after magic, version, counts, and the tensor table.
    uint64_t data_end = 0;
    for (const auto& t : f->tensors()) data_end = std::max(data_end, f->data_offset() + t.offset + t.bytes);
    std::vector<size_t> cuts = {0, 3, 4, 7, 8, 15, 16, 23, 24, 25, f->data_offset() - 1, f->data_offset(),
                                f->data_offset() + 1, data_end - 1};
    std::mt19937_64 rng(7);
    for (int i = 0; i < 150; ++i) cuts.push_back(rng() % f->data_offset());         // metadata
    for (int i = 0; i < 50; ++i) cuts.push_back(rng() % (full.size() - 32));        // data
    for (size_t n : cuts) {
        const std::vector<uint8_t> prefix(full.begin(), full.begin() + n);
        expect_gguf_error(prefix, {});
        if (HasFailure()) {
            ADD_FAILURE() << "cut at " << n;
            break;
        }
    }
}

// Random byte flips of a valid file: each parses or throws gguf::Error, nothing else.
TEST(GgufMalformed, RandomMutationsNeverCrash) {
    const auto base = small_file();
    std::mt19937_64 rng(11);
    int errors = 0;
    for (int iter = 0; iter < 3000; ++iter) {
        auto b = base;
        const int flips = 1 + static_cast<int>(rng() % 4);
        for (int k = 0; k < flips; ++k) {
            const size_t at = rng() % b.size();
            switch (rng() % 3) {
                case 0: b[at] = static_cast<uint8_t>(rng()); break;
                case 1: b[at] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
                default: b[at] = (rng() & 1) ? 0xff : 0x00; break;
            }
        }
        try {
            const auto f = File::from_bytes(b);
            unsigned sum = 0;  // ASan checks these reads stay inside the copied image
            for (const auto& t : f->tensors()) sum += t.data[0] + t.data[t.bytes - 1];
            EXPECT_LE(sum, 510u * f->tensors().size());
        } catch (const df::gguf::Error& e) {
            ++errors;
            ASSERT_EQ(std::string(e.what()).rfind("gguf: ", 0), 0u);
        }
    }
    EXPECT_GT(errors, 100);
}

TEST(GgufMalformed, Header) {
    expect_gguf_error({}, {"header", "truncated"});
    expect_gguf_error({'G', 'G', 'U'}, {"truncated"});
    expect_gguf_error(RawGguf{{'G', 'G', 'M', 'L', 3, 0, 0, 0}}.b, {"bad magic 'GGML'", "not a GGUF file"});
    expect_gguf_error(RawGguf{}.header(0, 0, 1).b, {"version 1 is not supported"});
    expect_gguf_error(RawGguf{}.header(0, 0, 4).b, {"unsupported version 4"});
    expect_gguf_error(RawGguf{}.header(0, 0, 0x03000000).b, {"big-endian"});
    expect_gguf_error(RawGguf{}.header(uint64_t{1} << 63, 0).b, {"tensor count 9223372036854775808 is over the cap"});
    expect_gguf_error(RawGguf{}.header(0, uint64_t{1} << 40).b, {"key-value count 1099511627776 is over the cap"});
    expect_gguf_error(RawGguf{}.header(0, 1000).b, {"key #0", "truncated"});
    expect_gguf_error(RawGguf{}.header(1000, 0).b, {"tensor #0", "truncated"});
    // A header alone is a valid, empty GGUF.
    const auto f = File::from_bytes(RawGguf{}.header(0, 0).b);
    EXPECT_TRUE(f->kv().empty());
    EXPECT_TRUE(f->tensors().empty());
}

TEST(GgufMalformed, Metadata) {
    expect_gguf_error(RawGguf{}.header(0, 1).u64(uint64_t{1} << 62).b, {"key #0", "key length is 4611686018427387904 bytes, over the cap"});
    expect_gguf_error(RawGguf{}.header(0, 1).u64(1000).str("x").b, {"key #0", "truncated: key length needs 1000 bytes"});
    expect_gguf_error(RawGguf{}.header(0, 1).str("k").u32(13).b, {"key 'k'", "value type 13 is not a GGUF value type"});
    expect_gguf_error(RawGguf{}.header(0, 1).str("k").type(ValueType::STRING).u64(~uint64_t{0}).b,
                      {"key 'k'", "string length is 18446744073709551615 bytes, over the cap"});
    expect_gguf_error(RawGguf{}.header(0, 1).str("k").type(ValueType::U64).u32(1).b, {"key 'k'", "truncated: u64 value"});
    // Arrays: huge counts, counts the file cannot hold, bad element types, deep nesting.
    auto arr = [](ValueType elem, uint64_t n) {
        return std::move(RawGguf{}.header(0, 1).str("k").type(ValueType::ARRAY).type(elem).u64(n));
    };
    expect_gguf_error(arr(ValueType::U8, uint64_t{1} << 40).b, {"key 'k'", "array of 1099511627776 items is over the cap"});
    expect_gguf_error(arr(ValueType::STRING, uint64_t{1} << 40).b, {"over the cap"});
    expect_gguf_error(arr(ValueType::U32, 1000000).u32(1).b, {"key 'k'", "truncated: array of 1000000 u32 items"});
    expect_gguf_error(arr(ValueType::STRING, 2).str("ok").u64(~uint64_t{0} >> 1).b, {"key 'k' item 1", "string length", "over the cap"});
    expect_gguf_error(arr(ValueType::STRING, 2).str("ok").u64(50).b, {"key 'k' item 1", "truncated"});
    expect_gguf_error(RawGguf{}.header(0, 1).str("k").type(ValueType::ARRAY).u32(99).u64(1).b,
                      {"key 'k'", "array element type 99 is not a GGUF value type"});
    {
        RawGguf r;
        r.header(0, 1).str("k").type(ValueType::ARRAY);
        for (int i = 0; i < 5; ++i) r.type(ValueType::ARRAY).u64(1);
        r.type(ValueType::U8).u64(1).u8(0);
        expect_gguf_error(r.b, {"key 'k' item 0 item 0 item 0 item 0", "nested deeper than 4"});
    }
    expect_gguf_error(RawGguf{}.header(0, 2).kv_u32("k", 1).kv_u32("k", 2).b, {"key 'k'", "duplicate key"});
    // Hostile names are quoted on one line.
    expect_gguf_error(RawGguf{}.header(0, 2).kv_u32("a\nb'", 1).kv_u32("a\nb'", 2).b, {"key 'a\\x0ab\\x27'"});
    // Caps are configurable.
    df::gguf::Limits lim;
    lim.max_string = 4;
    lim.max_array = 2;
    lim.max_kv = 1;
    expect_gguf_error(RawGguf{}.header(0, 1).kv_str("toolong", "x").b, {"key length is 7 bytes, over the cap of 4"}, lim);
    expect_gguf_error(arr(ValueType::U8, 3).u8(1).u8(2).u8(3).b, {"array of 3 items is over the cap of 2"}, lim);
    expect_gguf_error(RawGguf{}.header(0, 2).b, {"key-value count 2 is over the cap of 1"}, lim);
}

TEST(GgufMalformed, Alignment) {
    auto with_alignment = [](RawGguf kv) {
        kv.tensor("t", {8}, kF32, 0).pad(32).zeros(32);
        return kv.b;
    };
    expect_gguf_error(with_alignment(std::move(RawGguf{}.header(1, 1).kv_u32("general.alignment", 0))),
                      {"key 'general.alignment'", "alignment 0 is not a nonzero power of two"});
    expect_gguf_error(with_alignment(std::move(RawGguf{}.header(1, 1).kv_u32("general.alignment", 48))),
                      {"alignment 48 is not a nonzero power of two"});
    expect_gguf_error(with_alignment(std::move(RawGguf{}.header(1, 1).kv_str("general.alignment", "32"))),
                      {"key 'general.alignment': expected u32, found string"});
    expect_gguf_error(with_alignment(std::move(RawGguf{}.header(1, 1).str("general.alignment").type(ValueType::I32).i32(-32))),
                      {"key 'general.alignment': value -32 does not fit in u32"});
    expect_gguf_error(with_alignment(std::move(RawGguf{}.header(1, 1).str("general.alignment").type(ValueType::U64).u64(uint64_t{1} << 40))),
                      {"does not fit in u32"});
    // Any integer type holding a power of two is accepted.
    auto ok = with_alignment(std::move(RawGguf{}.header(1, 1).str("general.alignment").type(ValueType::U16).pod<uint16_t>(16)));
    EXPECT_EQ(File::from_bytes(ok)->alignment(), 16u);
}

// A one-tensor file whose table entry the test writes by hand.
std::vector<uint8_t> one_tensor(std::vector<int64_t> shape, uint32_t type, uint64_t offset, size_t data = 256) {
    RawGguf r;
    r.header(1, 0).tensor("blk.3.ffn_up.weight", std::move(shape), type, offset).pad(32).zeros(data);
    return r.b;
}

TEST(GgufMalformed, TensorTable) {
    const std::string_view name = "tensor 'blk.3.ffn_up.weight'";
    expect_gguf_error(one_tensor({}, kF32, 0), {name, "has 0 dimensions (1..4 allowed)"});
    expect_gguf_error(one_tensor({1, 1, 1, 1, 1}, kF32, 0), {name, "has 5 dimensions"});
    expect_gguf_error(one_tensor({8, 0}, kF32, 0), {name, "dimension 1 is 0 (must be >= 1)"});
    expect_gguf_error(one_tensor({-8}, kF32, 0), {name, "dimension 0 is -8"});
    expect_gguf_error(one_tensor({int64_t{1} << 32, int64_t{1} << 32, int64_t{1} << 32}, kF32, 0), {name, "element count overflows"});
    expect_gguf_error(one_tensor({int64_t{1} << 62, 4}, kF32, 0), {name, "overflows"});
    expect_gguf_error(one_tensor({32}, 99, 0), {name, "unknown or unsupported tensor type id 99"});
    expect_gguf_error(one_tensor({32}, 9, 0), {name, "type id 9"});  // Q8_1: never in a GGUF
    expect_gguf_error(one_tensor({100}, kQ4_K, 0), {name, "row length 100 is not a multiple of the Q4_K block size 256"});
    expect_gguf_error(one_tensor({8}, kF32, 16), {name, "data offset 16 is not a multiple of the alignment 32"});
    expect_gguf_error(one_tensor({8}, kF32, 4096), {name, "data [offset 4096, 32 bytes] extends past end of file"});
    expect_gguf_error(one_tensor({128}, kF32, 0), {name, "data [offset 0, 512 bytes] extends past end of file"});
    expect_gguf_error(one_tensor({8}, kF32, ~uint64_t{0} - 31), {name, "extends past end of file"});
    expect_gguf_error(one_tensor({int64_t{1} << 40}, kQ8_0, 0), {name, "extends past end of file"});
    {
        RawGguf r;
        r.header(2, 0).tensor("w", {8}, kF32, 0).tensor("w", {8}, kF32, 32).pad(32).zeros(64);
        expect_gguf_error(r.b, {"tensor 'w': duplicate tensor name"});
    }
    {
        RawGguf r;
        r.header(3, 0).tensor("a", {16}, kF32, 0).tensor("b", {8}, kF32, 128).tensor("c", {8}, kF32, 32).pad(32).zeros(256);
        expect_gguf_error(r.b, {"tensor 'c': data [offset 32, 32 bytes] overlaps tensor 'a' [offset 0, 64 bytes]"});
    }
    {
        RawGguf r;  // same offset twice
        r.header(2, 0).tensor("a", {8}, kF32, 64).tensor("b", {8}, kF32, 64).pad(32).zeros(256);
        expect_gguf_error(r.b, {"overlaps tensor"});
    }
    expect_gguf_error(RawGguf{}.header(1, 0).u64(uint64_t{1} << 60).b, {"tensor #0", "name length", "over the cap"});
    expect_gguf_error(RawGguf{}.header(1, 0).str("t").u32(2).i64(4).b, {"tensor 't'", "truncated: dimension"});
    // Touching tensors are fine; so is a tensor ending exactly at the end of the file.
    RawGguf ok;
    ok.header(2, 0).tensor("a", {8}, kF32, 0).tensor("b", {8}, kF32, 32).pad(32).zeros(64);
    const auto f = File::from_bytes(ok.b);
    EXPECT_EQ(f->tensors()[1].data, f->tensors()[0].data + 32);
}

TEST(GgufMalformed, OpenErrorsNameThePath) {
    try {
        File::open("/nonexistent/model.gguf");
        ADD_FAILURE();
    } catch (const df::gguf::Error& e) {
        EXPECT_NE(std::string(e.what()).find("'/nonexistent/model.gguf': cannot open"), std::string::npos) << e.what();
    }
    EXPECT_THROW(File::open("/tmp"), df::gguf::Error);
    const auto path = (std::filesystem::temp_directory_path() / ("df_gguf_bad_" + std::to_string(::getpid()))).string();
    {
        std::ofstream(path, std::ios::binary) << "";
    }
    EXPECT_THROW(File::open(path), df::gguf::Error);
    {
        const auto b = one_tensor({8}, kF32, 4096);
        std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    }
    try {
        File::open(path);
        ADD_FAILURE();
    } catch (const df::gguf::Error& e) {
        const std::string msg = e.what();
        EXPECT_EQ(msg.rfind("gguf: '" + path + "': tensor 'blk.3.ffn_up.weight': data", 0), 0u) << msg;
    }
    std::filesystem::remove(path);
}

}  // namespace
