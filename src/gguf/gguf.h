// GGUF reader (mmap, validated) and writer.
//
// The reader checks every count, length and offset against caps and against the file before it
// is used, so a corrupt or hostile file yields df::gguf::Error naming the key or tensor and what
// was wrong, never an out-of-bounds read.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "quant/types.h"

namespace df::gguf {

struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// GGUF metadata value types (ids as stored in the file).
enum class ValueType : uint32_t {
    U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
    STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};
std::string_view value_type_name(ValueType t);

struct Value;
struct Array {
    ValueType elem = ValueType::U8;
    std::vector<Value> items;
};

// One metadata value. Scalars keep their stored type so a writer round trip is exact.
struct Value {
    ValueType type = ValueType::U32;
    std::variant<uint64_t, int64_t, double, bool, std::string, Array> v;

    static Value u8(uint8_t x) { return {ValueType::U8, uint64_t{x}}; }
    static Value i8(int8_t x) { return {ValueType::I8, int64_t{x}}; }
    static Value u16(uint16_t x) { return {ValueType::U16, uint64_t{x}}; }
    static Value i16(int16_t x) { return {ValueType::I16, int64_t{x}}; }
    static Value u32(uint32_t x) { return {ValueType::U32, uint64_t{x}}; }
    static Value i32(int32_t x) { return {ValueType::I32, int64_t{x}}; }
    static Value u64(uint64_t x) { return {ValueType::U64, x}; }
    static Value i64(int64_t x) { return {ValueType::I64, x}; }
    static Value f32(float x) { return {ValueType::F32, double{x}}; }
    static Value f64(double x) { return {ValueType::F64, x}; }
    static Value boolean(bool x) { return {ValueType::BOOL, x}; }
    static Value str(std::string s) { return {ValueType::STRING, std::move(s)}; }
    static Value array(ValueType elem, std::vector<Value> items) {
        return {ValueType::ARRAY, Array{elem, std::move(items)}};
    }
    static Value strings(const std::vector<std::string>& xs);
    static Value i32s(const std::vector<int32_t>& xs);
    static Value f32s(const std::vector<float>& xs);
};

struct KeyValue {
    std::string key;
    Value value;
};

struct TensorInfo {
    std::string name;
    quant::Type type = quant::Type::F32;
    std::vector<int64_t> shape;  // ggml ne order: shape[0] is the contiguous (row) dimension
    uint64_t offset = 0;         // relative to the start of the data section
    uint64_t bytes = 0;
    const uint8_t* data = nullptr;  // into the mapping (reader only)

    int64_t elements() const;
    int64_t rows() const;  // product of shape[1..]
};

// Caps applied by the reader (generous for real models, small enough to stop a hostile file
// from allocating gigabytes of metadata).
struct Limits {
    uint64_t max_string = 16u << 20;      // one string's bytes
    uint64_t max_array = 1u << 24;        // one array's items (a 248k vocab fits easily)
    uint64_t max_kv = 1u << 16;
    uint64_t max_tensors = 1u << 20;
    uint32_t max_dims = 4;
    uint32_t max_nesting = 4;
    int64_t max_elements = int64_t{1} << 42;
};

class File {
public:
    // Maps and validates path; throws Error.
    static std::unique_ptr<File> open(const std::string& path, const Limits& limits = {});
    // Parses an in-memory image (copied); used by the fuzzer and tests.
    static std::unique_ptr<File> from_bytes(std::span<const uint8_t> bytes, const Limits& limits = {});
    ~File();
    File(const File&) = delete;
    File& operator=(const File&) = delete;

    uint32_t version() const { return version_; }
    uint64_t alignment() const { return alignment_; }
    uint64_t data_offset() const { return data_offset_; }
    uint64_t file_size() const { return size_; }
    const std::string& path() const { return path_; }

    const std::vector<KeyValue>& kv() const { return kv_; }
    const Value* find(std::string_view key) const;
    bool has(std::string_view key) const { return find(key) != nullptr; }

    // Typed accessors: T is one of uint8_t..uint64_t, int8_t..int64_t, float, double, bool,
    // std::string, std::vector<std::string>, std::vector<int32_t>, std::vector<float>,
    // std::vector<bool>. Integer values convert between widths when the value fits; a missing key
    // or a wrong type throws Error naming the key, the expected and the stored type.
    template <class T> T get(std::string_view key) const;
    template <class T> std::optional<T> get_opt(std::string_view key) const;
    template <class T> T get_or(std::string_view key, T fallback) const {
        auto v = get_opt<T>(key);
        return v ? *v : fallback;
    }

    const std::vector<TensorInfo>& tensors() const { return tensors_; }
    const TensorInfo* find_tensor(std::string_view name) const;

private:
    File() = default;
    void parse(const Limits& limits);

    std::string path_;
    const uint8_t* base_ = nullptr;
    uint64_t size_ = 0;
    void* map_ = nullptr;                 // mmap region (nullptr for from_bytes)
    std::vector<uint8_t> owned_;          // from_bytes copy
    uint32_t version_ = 0;
    uint64_t alignment_ = 32;
    uint64_t data_offset_ = 0;
    std::vector<KeyValue> kv_;
    std::vector<TensorInfo> tensors_;
};

// Writes a GGUF v3 file. Tensor data is either given as bytes or produced by a callback that
// streams the tensor's bytes (so synthetic multi-GB models never sit in memory).
class Writer {
public:
    using Fill = std::function<void(uint8_t* dst, uint64_t bytes)>;

    explicit Writer(uint64_t alignment = 32) : alignment_(alignment) {}
    void set(std::string key, Value value);  // replaces an existing key
    // shape in ggml ne order; bytes must equal the size implied by type and shape.
    void add_tensor(std::string name, quant::Type type, std::vector<int64_t> shape,
                    std::vector<uint8_t> bytes);
    void add_tensor(std::string name, quant::Type type, std::vector<int64_t> shape, Fill fill);

    void write(const std::string& path) const;       // throws Error on I/O failure
    std::vector<uint8_t> to_bytes() const;           // for tests and the fuzzer seeds

private:
    struct Pending {
        std::string name;
        quant::Type type;
        std::vector<int64_t> shape;
        uint64_t bytes;
        std::vector<uint8_t> data;
        Fill fill;
    };
    template <class Sink> void emit(Sink& sink) const;

    uint64_t alignment_;
    std::vector<KeyValue> kv_;
    std::vector<Pending> tensors_;
};

}  // namespace df::gguf
