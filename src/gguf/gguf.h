// GGUF reader (mmap, validated) and writer.
//
// The reader checks every count, length and offset against caps and against the file before it
// is used, so a corrupt or hostile file yields df::gguf::Error naming the key or tensor and what
// was wrong, never an out-of-bounds read.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
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

// Every message starts with "gguf: " and names the key or tensor and what was wrong; one line.
struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// GGUF metadata value types (ids as stored in the file).
enum class ValueType : uint32_t {
    U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
    STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};
// "u8", "i32", "f32", "bool", "string", "array", ...; "type#N" for an id outside the enum.
std::string_view value_type_name(ValueType t);

struct Value;
struct Array {
    ValueType elem = ValueType::U8;
    std::vector<Value> items;
    bool operator==(const Array&) const;
};

// One metadata value. Scalars keep their stored type so a writer round trip is exact.
// The alternative held follows the type: unsigned ints -> uint64_t, signed -> int64_t,
// F32/F64 -> double, BOOL -> bool, STRING -> std::string, ARRAY -> Array.
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
    static Value bools(const std::vector<bool>& xs);

    bool operator==(const Value&) const = default;
};

struct KeyValue {
    std::string key;
    Value value;
};

// Converts one value to T (the set listed at File::get); `key` only names it in the error.
// Throws Error when the stored type does not convert or an integer does not fit.
template <class T> T value_as(const Value& v, std::string_view key);

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
    uint32_t max_dims = 4;                // GGUF/ggml never has more than 4
    uint32_t max_nesting = 4;             // arrays inside arrays
    int64_t max_elements = int64_t{1} << 42;  // one tensor's elements
};

class Cursor;  // reader's bounds-checked byte cursor (cursor.h)

class File {
public:
    // Maps path read-only (MAP_PRIVATE) and validates it; throws Error naming the path.
    static std::unique_ptr<File> open(const std::string& path, const Limits& limits = {});
    // Parses an in-memory image (copied); used by the fuzzer and tests.
    static std::unique_ptr<File> from_bytes(std::span<const uint8_t> bytes, const Limits& limits = {});
    ~File();
    File(const File&) = delete;
    File& operator=(const File&) = delete;

    uint32_t version() const { return version_; }
    uint64_t alignment() const { return alignment_; }
    uint64_t data_offset() const { return data_offset_; }  // may exceed file_size() with no tensors
    uint64_t file_size() const { return size_; }
    const std::string& path() const { return path_; }  // empty for from_bytes

    // Keys in file order, each unique.
    const std::vector<KeyValue>& kv() const { return kv_; }
    const Value* find(std::string_view key) const;  // nullptr when absent
    bool has(std::string_view key) const { return find(key) != nullptr; }

    // Typed accessors: T is one of uint8_t..uint64_t, int8_t..int64_t, float, double, bool,
    // std::string, std::vector<std::string>, std::vector<int32_t>, std::vector<int64_t>,
    // std::vector<float>, std::vector<bool>. Integers (and integer arrays) convert between widths
    // and signedness when the value fits; float/double accept F32 and F64; std::vector<bool> takes
    // an array of BOOL. A missing key (get) or a wrong type (get, get_opt) throws Error naming the
    // key, the expected and the stored type; get_opt returns nullopt only when the key is absent.
    template <class T> T get(std::string_view key) const;
    template <class T> std::optional<T> get_opt(std::string_view key) const;
    template <class T> T get_or(std::string_view key, T fallback) const {
        auto v = get_opt<T>(key);
        return v ? *v : fallback;
    }

    // Tensors in file order; names unique, data inside the file, no two overlapping.
    const std::vector<TensorInfo>& tensors() const { return tensors_; }
    const TensorInfo* find_tensor(std::string_view name) const;  // nullptr when absent

private:
    File() = default;
    void parse(const Limits& limits);
    void parse_kv(Cursor& c, const Limits& limits, uint64_t n_kv);
    void parse_tensor_infos(Cursor& c, const Limits& limits, uint64_t n_tensors);
    void place_tensors();

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
    std::map<std::string, size_t, std::less<>> kv_index_;      // key -> kv_ index
    std::map<std::string, size_t, std::less<>> tensor_index_;  // name -> tensors_ index
};

// Writes a GGUF v3 file. Tensor data is either given as bytes or produced by a callback that
// streams the tensor's bytes (so synthetic multi-GB models never sit in memory).
class Writer {
public:
    // Fills dst[0, bytes) with the tensor's bytes [offset, offset + bytes). Called in order, in
    // chunks of whole rows (whole blocks when one row exceeds the writer's buffer), once per
    // write()/to_bytes(); it may throw, which aborts the write.
    using Fill = std::function<void(uint64_t offset, uint8_t* dst, uint64_t bytes)>;

    // alignment: a nonzero power of two; general.alignment is written when it is not 32.
    explicit Writer(uint64_t alignment = 32);
    // Adds or replaces a key. Setting general.alignment (an integer, power of two) changes the
    // writer's alignment. Throws Error when the value's type and contents disagree.
    void set(std::string key, Value value);
    // shape in ggml ne order (1..4 dims, each >= 1, row a multiple of the block size); names are
    // unique; bytes must equal the size implied by type and shape. Throws Error otherwise.
    void add_tensor(std::string name, quant::Type type, std::vector<int64_t> shape,
                    std::vector<uint8_t> bytes);
    void add_tensor(std::string name, quant::Type type, std::vector<int64_t> shape, Fill fill);

    // Streams the file through a large buffer; throws Error on I/O failure (and removes the
    // partial file) or when a Fill throws.
    void write(const std::string& path) const;
    std::vector<uint8_t> to_bytes() const;           // for tests and the fuzzer seeds
    uint64_t file_size() const;                      // what write() will produce

    struct Sink;  // writer.cpp: where emitted bytes go

private:
    struct Pending {
        std::string name;
        quant::Type type;
        std::vector<int64_t> shape;
        uint64_t bytes;
        std::vector<uint8_t> data;
        Fill fill;
    };
    uint64_t check_tensor(const std::string& name, quant::Type type,
                          const std::vector<int64_t>& shape) const;
    std::vector<uint8_t> header() const;  // everything before the data section, padded
    void emit(Sink& sink) const;

    uint64_t alignment_;
    std::vector<KeyValue> kv_;
    std::vector<Pending> tensors_;
};

}  // namespace df::gguf
