// GGUF reader: header, metadata and tensor table, each count, length and offset checked against
// the Limits and the file before use.
//
// Layout (v2 and v3; v1 had 32-bit counts and is rejected):
//   "GGUF" u32 version, u64 tensor count, u64 kv count,
//   kv:     string key, u32 value type, value   (string = u64 length + bytes;
//                                                array = u32 elem type, u64 count, items)
//   tensor: string name, u32 n_dims, i64 ne[n_dims], u32 ggml type, u64 offset,
//   padding to general.alignment (default 32), then the data section that offsets count from.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/cursor.h"
#include "gguf/gguf.h"

namespace df::gguf {
namespace {

constexpr uint32_t kMaxValueType = static_cast<uint32_t>(ValueType::F64);

// Fewest bytes one value of type t occupies in the file; bounds array counts by what is left,
// so a hostile count cannot make us reserve memory the file could never fill.
uint64_t min_size(ValueType t) {
    switch (t) {
        case ValueType::U8: case ValueType::I8: case ValueType::BOOL: return 1;
        case ValueType::U16: case ValueType::I16: return 2;
        case ValueType::U32: case ValueType::I32: case ValueType::F32: return 4;
        case ValueType::U64: case ValueType::I64: case ValueType::F64: return 8;
        case ValueType::STRING: return 8;
        case ValueType::ARRAY: return 12;
    }
    return 1;
}

ValueType read_type(Cursor& c, const Path& at, const char* field) {
    const auto id = c.read<uint32_t>(at, field);
    if (id > kMaxValueType) fail(at, std::string(field) + " " + std::to_string(id) + " is not a GGUF value type (0..12)");
    return static_cast<ValueType>(id);
}

Value read_value(Cursor& c, ValueType t, const Path& at, const Limits& lim, uint32_t depth) {
    switch (t) {
        case ValueType::U8: return Value::u8(c.read<uint8_t>(at, "u8 value"));
        case ValueType::I8: return Value::i8(c.read<int8_t>(at, "i8 value"));
        case ValueType::U16: return Value::u16(c.read<uint16_t>(at, "u16 value"));
        case ValueType::I16: return Value::i16(c.read<int16_t>(at, "i16 value"));
        case ValueType::U32: return Value::u32(c.read<uint32_t>(at, "u32 value"));
        case ValueType::I32: return Value::i32(c.read<int32_t>(at, "i32 value"));
        case ValueType::U64: return Value::u64(c.read<uint64_t>(at, "u64 value"));
        case ValueType::I64: return Value::i64(c.read<int64_t>(at, "i64 value"));
        case ValueType::F32: return Value::f32(c.read<float>(at, "f32 value"));
        case ValueType::F64: return Value::f64(c.read<double>(at, "f64 value"));
        case ValueType::BOOL: return Value::boolean(c.read<uint8_t>(at, "bool value") != 0);
        case ValueType::STRING: return Value::str(std::string(c.string(at, "string length", lim.max_string)));
        case ValueType::ARRAY: break;
    }
    if (depth >= lim.max_nesting)
        fail(at, "arrays nested deeper than " + std::to_string(lim.max_nesting) + " levels");
    const ValueType elem = read_type(c, at, "array element type");
    const auto n = c.read<uint64_t>(at, "array length");
    if (n > lim.max_array)
        fail(at, "array of " + std::to_string(n) + " items is over the cap of " + std::to_string(lim.max_array));
    if (n > c.remaining() / min_size(elem))
        fail(at, "file truncated: array of " + std::to_string(n) + " " + std::string(value_type_name(elem)) +
                     " items needs at least " + std::to_string(n * min_size(elem)) + " bytes, only " +
                     std::to_string(c.remaining()) + " left");
    Array a{elem, {}};
    a.items.reserve(n);
    for (uint64_t i = 0; i < n; ++i) {
        const Path item{"item", std::nullopt, static_cast<int64_t>(i), &at};
        a.items.push_back(read_value(c, elem, item, lim, depth + 1));
    }
    return {ValueType::ARRAY, std::move(a)};
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

std::string span_str(uint64_t offset, uint64_t bytes) {
    return "[offset " + std::to_string(offset) + ", " + std::to_string(bytes) + " bytes]";
}

}  // namespace

int64_t TensorInfo::elements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

int64_t TensorInfo::rows() const {
    int64_t n = 1;
    for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
    return n;
}

std::unique_ptr<File> File::open(const std::string& path, const Limits& limits) {
    auto sys_fail = [&](const char* what) {
        throw Error("gguf: " + quoted(path) + ": " + what + ": " + std::strerror(errno));
    };
    std::unique_ptr<File> f(new File());
    f->path_ = path;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) sys_fail("cannot open");
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        ::close(fd);
        sys_fail("cannot stat");
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        throw Error("gguf: " + quoted(path) + ": not a regular file");
    }
    f->size_ = static_cast<uint64_t>(st.st_size);
    if (f->size_ > 0) {
        void* m = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            ::close(fd);
            sys_fail("cannot map");
        }
        f->map_ = m;
        f->base_ = static_cast<const uint8_t*>(m);
    }
    ::close(fd);  // the mapping keeps the file alive
    try {
        f->parse(limits);
    } catch (const Error& e) {
        // "gguf: <detail>" -> "gguf: '<path>': <detail>", still one line.
        throw Error("gguf: " + quoted(path) + ": " + std::string(e.what()).substr(6));
    }
    return f;
}

std::unique_ptr<File> File::from_bytes(std::span<const uint8_t> bytes, const Limits& limits) {
    std::unique_ptr<File> f(new File());
    f->owned_.assign(bytes.begin(), bytes.end());
    f->base_ = f->owned_.data();
    f->size_ = f->owned_.size();
    f->parse(limits);
    return f;
}

File::~File() {
    if (map_) ::munmap(map_, size_);
}

const Value* File::find(std::string_view key) const {
    auto it = kv_index_.find(key);
    return it == kv_index_.end() ? nullptr : &kv_[it->second].value;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
    auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

void File::parse(const Limits& lim) {
    Cursor c(base_, size_);
    const Path header{"header"};
    if (size_ < 4 || std::memcmp(base_, "GGUF", 4) != 0)
        fail(header, size_ < 4 ? "file truncated: " + std::to_string(size_) + " bytes, not a GGUF file"
                               : "bad magic " + quoted(std::string_view(reinterpret_cast<const char*>(base_), 4)) +
                                     " (expected 'GGUF'; not a GGUF file)");
    c.read<uint32_t>(header, "magic");
    version_ = c.read<uint32_t>(header, "version");
    if (version_ == 1)
        fail(header, "version 1 is not supported (it has 32-bit counts; only versions 2 and 3 are read)");
    if (version_ != 2 && version_ != 3)
        fail(header, "unsupported version " + std::to_string(version_) +
                         (version_ > 0xffff ? " (a big-endian file?)" : "") + "; only versions 2 and 3 are read");
    const auto n_tensors = c.read<uint64_t>(header, "tensor count");
    const auto n_kv = c.read<uint64_t>(header, "key-value count");
    if (n_tensors > lim.max_tensors)
        fail(header, "tensor count " + std::to_string(n_tensors) + " is over the cap of " + std::to_string(lim.max_tensors));
    if (n_kv > lim.max_kv)
        fail(header, "key-value count " + std::to_string(n_kv) + " is over the cap of " + std::to_string(lim.max_kv));

    parse_kv(c, lim, n_kv);
    if (const Value* a = find("general.alignment")) {
        const auto align = value_as<uint32_t>(*a, "general.alignment");
        if (align == 0 || (align & (align - 1)) != 0)
            fail(Path{"key", "general.alignment"}, "alignment " + std::to_string(align) + " is not a nonzero power of two");
        alignment_ = align;
    }
    parse_tensor_infos(c, lim, n_tensors);
    data_offset_ = align_up(c.pos(), alignment_);
    place_tensors();
}

void File::parse_kv(Cursor& c, const Limits& lim, uint64_t n_kv) {
    // Each pair takes at least 13 bytes (key length, type, a one-byte value).
    kv_.reserve(std::min<uint64_t>(n_kv, c.remaining() / 13));
    for (uint64_t i = 0; i < n_kv; ++i) {
        const Path numbered{"key", std::nullopt, static_cast<int64_t>(i)};
        std::string key(c.string(numbered, "key length", lim.max_string));
        const Path at{"key", key};
        if (kv_index_.count(key)) fail(at, "duplicate key");
        const ValueType t = read_type(c, at, "value type");
        Value v = read_value(c, t, at, lim, 0);
        kv_index_.emplace(key, kv_.size());
        kv_.push_back({std::move(key), std::move(v)});
    }
}

void File::parse_tensor_infos(Cursor& c, const Limits& lim, uint64_t n_tensors) {
    // Each entry takes at least 32 bytes (name length, n_dims, one dim, type, offset).
    tensors_.reserve(std::min<uint64_t>(n_tensors, c.remaining() / 32));
    const uint32_t max_dims = std::min<uint32_t>(lim.max_dims, 4);
    for (uint64_t i = 0; i < n_tensors; ++i) {
        const Path numbered{"tensor", std::nullopt, static_cast<int64_t>(i)};
        TensorInfo t;
        t.name = std::string(c.string(numbered, "name length", lim.max_string));
        const Path at{"tensor", t.name};
        if (tensor_index_.count(t.name)) fail(at, "duplicate tensor name");

        const auto n_dims = c.read<uint32_t>(at, "dimension count");
        if (n_dims == 0 || n_dims > max_dims)
            fail(at, "has " + std::to_string(n_dims) + " dimensions (1.." + std::to_string(max_dims) + " allowed)");
        int64_t elements = 1;
        for (uint32_t d = 0; d < n_dims; ++d) {
            const auto ne = c.read<int64_t>(at, "dimension");
            if (ne < 1) fail(at, "dimension " + std::to_string(d) + " is " + std::to_string(ne) + " (must be >= 1)");
            if (ne > lim.max_elements / elements)
                fail(at, "element count overflows: more than " + std::to_string(lim.max_elements) + " elements");
            elements *= ne;
            t.shape.push_back(ne);
        }

        const auto type_id = c.read<uint32_t>(at, "type");
        const quant::TypeInfo* ti = quant::type_info(type_id);
        if (!ti) fail(at, "unknown or unsupported tensor type id " + std::to_string(type_id));
        t.type = ti->type;
        if (t.shape[0] % ti->block_elems != 0)
            fail(at, "row length " + std::to_string(t.shape[0]) + " is not a multiple of the " +
                         std::string(ti->name) + " block size " + std::to_string(ti->block_elems));
        // elements <= 2^42 and block_bytes < 2^8, so this cannot overflow.
        t.bytes = static_cast<uint64_t>(elements / ti->block_elems) * ti->block_bytes;

        t.offset = c.read<uint64_t>(at, "data offset");
        if (t.offset % alignment_ != 0)
            fail(at, "data offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
                         std::to_string(alignment_));
        tensor_index_.emplace(t.name, tensors_.size());
        tensors_.push_back(std::move(t));
    }
}

// Checks every tensor's bytes lie inside the file and no two overlap, then points data at them.
void File::place_tensors() {
    for (auto& t : tensors_) {
        const uint64_t room = data_offset_ <= size_ ? size_ - data_offset_ : 0;
        if (t.offset > room || t.bytes > room - t.offset)
            fail(Path{"tensor", t.name}, "data " + span_str(t.offset, t.bytes) + " extends past end of file (" +
                                             std::to_string(size_) + " bytes, data section at " +
                                             std::to_string(data_offset_) + ")");
        t.data = base_ + data_offset_ + t.offset;
    }
    std::vector<const TensorInfo*> by_offset;
    by_offset.reserve(tensors_.size());
    for (const auto& t : tensors_) by_offset.push_back(&t);
    std::sort(by_offset.begin(), by_offset.end(),
              [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < by_offset.size(); ++i) {
        const TensorInfo& a = *by_offset[i - 1];
        const TensorInfo& b = *by_offset[i];
        if (b.offset < a.offset + a.bytes)
            fail(Path{"tensor", b.name}, "data " + span_str(b.offset, b.bytes) + " overlaps tensor " +
                                             quoted(a.name) + " " + span_str(a.offset, a.bytes));
    }
}

}  // namespace df::gguf
