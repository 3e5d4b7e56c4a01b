// GGUF v3 writer. Metadata and the tensor table are built in memory (small); tensor data streams
// through one buffer in large chunks, so a multi-GB synthetic model never sits in memory and the
// file is written at disk speed (one write(2) per 16 MiB).
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cstdint>
#include <string>
#include <utility>

#include "gguf/cursor.h"
#include "gguf/gguf.h"

namespace df::gguf {

struct Writer::Sink {
    virtual ~Sink() = default;
    virtual void put(const uint8_t* p, size_t n) = 0;
};

namespace {

constexpr size_t kChunk = 16u << 20;
// llama.cpp's GGML_MAX_NAME is 64 with the NUL: longer names would not load there.
constexpr size_t kMaxTensorName = 63;

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

bool fits_width(const Value& v) {
    switch (v.type) {
        case ValueType::U8: return std::get<uint64_t>(v.v) <= UINT8_MAX;
        case ValueType::U16: return std::get<uint64_t>(v.v) <= UINT16_MAX;
        case ValueType::U32: return std::get<uint64_t>(v.v) <= UINT32_MAX;
        case ValueType::I8: return std::in_range<int8_t>(std::get<int64_t>(v.v));
        case ValueType::I16: return std::in_range<int16_t>(std::get<int64_t>(v.v));
        case ValueType::I32: return std::in_range<int32_t>(std::get<int64_t>(v.v));
        default: return true;
    }
}

// The alternative a Value of type t must hold (see Value).
size_t alternative(ValueType t) {
    switch (t) {
        case ValueType::U8: case ValueType::U16: case ValueType::U32: case ValueType::U64: return 0;
        case ValueType::I8: case ValueType::I16: case ValueType::I32: case ValueType::I64: return 1;
        case ValueType::F32: case ValueType::F64: return 2;
        case ValueType::BOOL: return 3;
        case ValueType::STRING: return 4;
        case ValueType::ARRAY: return 5;
    }
    return 99;
}

// Rejects values the reader would refuse or that would serialize wrongly.
void check_value(const Value& v, const Path& at, uint32_t depth) {
    const Limits lim;
    if (alternative(v.type) != v.v.index())
        fail(at, "value of type " + std::string(value_type_name(v.type)) + " holds the wrong C++ alternative");
    if (!fits_width(v)) fail(at, "value does not fit in " + std::string(value_type_name(v.type)));
    if (v.type == ValueType::STRING && std::get<std::string>(v.v).size() > lim.max_string)
        fail(at, "string is over the reader's cap of " + std::to_string(lim.max_string) + " bytes");
    if (v.type != ValueType::ARRAY) return;
    const Array& a = std::get<Array>(v.v);
    if (alternative(a.elem) == 99) fail(at, "array element type is not a GGUF value type");
    if (depth >= lim.max_nesting) fail(at, "arrays nested deeper than " + std::to_string(lim.max_nesting) + " levels");
    if (a.items.size() > lim.max_array) fail(at, "array is over the reader's cap of " + std::to_string(lim.max_array) + " items");
    for (size_t i = 0; i < a.items.size(); ++i) {
        const Path item{"item", std::nullopt, static_cast<int64_t>(i), &at};
        if (a.items[i].type != a.elem)
            fail(item, "is " + std::string(value_type_name(a.items[i].type)) + " in an array of " +
                           std::string(value_type_name(a.elem)));
        check_value(a.items[i], item, depth + 1);
    }
}

struct Bytes {
    std::vector<uint8_t>& out;
    // resize + memcpy rather than insert: GCC 12 -O3 reports bogus overflows for vector::insert.
    void raw(const void* p, size_t n) {
        const size_t at = out.size();
        out.resize(at + n);
        if (n) std::memcpy(out.data() + at, p, n);
    }
    template <class T> void pod(T x) { raw(&x, sizeof(T)); }
    void str(std::string_view s) {
        pod<uint64_t>(s.size());
        raw(s.data(), s.size());
    }
    void value(const Value& v) {
        switch (v.type) {
            case ValueType::U8: pod(static_cast<uint8_t>(std::get<uint64_t>(v.v))); break;
            case ValueType::I8: pod(static_cast<int8_t>(std::get<int64_t>(v.v))); break;
            case ValueType::U16: pod(static_cast<uint16_t>(std::get<uint64_t>(v.v))); break;
            case ValueType::I16: pod(static_cast<int16_t>(std::get<int64_t>(v.v))); break;
            case ValueType::U32: pod(static_cast<uint32_t>(std::get<uint64_t>(v.v))); break;
            case ValueType::I32: pod(static_cast<int32_t>(std::get<int64_t>(v.v))); break;
            case ValueType::U64: pod(std::get<uint64_t>(v.v)); break;
            case ValueType::I64: pod(std::get<int64_t>(v.v)); break;
            case ValueType::F32: pod(static_cast<float>(std::get<double>(v.v))); break;
            case ValueType::F64: pod(std::get<double>(v.v)); break;
            case ValueType::BOOL: pod<uint8_t>(std::get<bool>(v.v) ? 1 : 0); break;
            case ValueType::STRING: str(std::get<std::string>(v.v)); break;
            case ValueType::ARRAY: {
                const Array& a = std::get<Array>(v.v);
                pod(static_cast<uint32_t>(a.elem));
                pod<uint64_t>(a.items.size());
                for (const auto& item : a.items) value(item);
                break;
            }
        }
    }
};

struct VectorSink : Writer::Sink {
    std::vector<uint8_t> out;
    void put(const uint8_t* p, size_t n) override { out.insert(out.end(), p, p + n); }
};

struct FileSink : Writer::Sink {
    FileSink(std::FILE* file, const std::string& p) : f(file), path(p) {}
    std::FILE* f;
    const std::string& path;
    void put(const uint8_t* p, size_t n) override {
        if (std::fwrite(p, 1, n, f) != n)
            throw Error("gguf: cannot write " + quoted(path) + ": " + std::strerror(errno));
    }
};

}  // namespace

Writer::Writer(uint64_t alignment) : alignment_(alignment) {
    if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > UINT32_MAX)
        throw Error("gguf: writer: alignment " + std::to_string(alignment) + " is not a nonzero power of two");
}

void Writer::set(std::string key, Value value) {
    const Path at{"key", key};
    check_value(value, at, 0);
    if (key == "general.alignment") {
        // The reader takes any integer that fits u32; we write u32, as llama.cpp requires.
        const auto a = value_as<uint32_t>(value, key);
        if (a == 0 || (a & (a - 1)) != 0) fail(at, "alignment " + std::to_string(a) + " is not a nonzero power of two");
        alignment_ = a;
        return;
    }
    for (auto& kv : kv_)
        if (kv.key == key) {
            kv.value = std::move(value);
            return;
        }
    kv_.push_back({std::move(key), std::move(value)});
}

uint64_t Writer::check_tensor(const std::string& name, quant::Type type,
                              const std::vector<int64_t>& shape) const {
    const Path at{"tensor", name};
    if (name.size() > kMaxTensorName)
        fail(at, "name is " + std::to_string(name.size()) + " bytes (llama.cpp allows " + std::to_string(kMaxTensorName) + ")");
    for (const auto& t : tensors_)
        if (t.name == name) fail(at, "duplicate tensor name");
    const quant::TypeInfo* ti = quant::type_info(static_cast<uint32_t>(type));
    if (!ti) fail(at, "unknown tensor type id " + std::to_string(static_cast<uint32_t>(type)));
    if (shape.empty() || shape.size() > 4) fail(at, "has " + std::to_string(shape.size()) + " dimensions (1..4 allowed)");
    const Limits lim;
    int64_t elements = 1;
    for (size_t d = 0; d < shape.size(); ++d) {
        if (shape[d] < 1) fail(at, "dimension " + std::to_string(d) + " is " + std::to_string(shape[d]) + " (must be >= 1)");
        if (shape[d] > lim.max_elements / elements) fail(at, "element count overflows");
        elements *= shape[d];
    }
    if (shape[0] % ti->block_elems != 0)
        fail(at, "row length " + std::to_string(shape[0]) + " is not a multiple of the " + std::string(ti->name) +
                     " block size " + std::to_string(ti->block_elems));
    return static_cast<uint64_t>(elements / ti->block_elems) * ti->block_bytes;
}

void Writer::add_tensor(std::string name, quant::Type type, std::vector<int64_t> shape,
                        std::vector<uint8_t> bytes) {
    const uint64_t n = check_tensor(name, type, shape);
    if (bytes.size() != n)
        fail(Path{"tensor", name}, std::to_string(bytes.size()) + " bytes given, " +
                                       std::string(quant::type_name(type)) + " of this shape needs " + std::to_string(n));
    tensors_.push_back({std::move(name), type, std::move(shape), n, std::move(bytes), nullptr});
}

void Writer::add_tensor(std::string name, quant::Type type, std::vector<int64_t> shape, Fill fill) {
    const uint64_t n = check_tensor(name, type, shape);
    if (!fill) fail(Path{"tensor", name}, "empty fill callback");
    tensors_.push_back({std::move(name), type, std::move(shape), n, {}, std::move(fill)});
}

std::vector<uint8_t> Writer::header() const {
    std::vector<uint8_t> out;
    Bytes b{out};
    const bool write_alignment = alignment_ != 32;
    b.pod<uint32_t>(0x46554747);  // "GGUF" read as a little-endian u32
    b.pod<uint32_t>(3);
    b.pod<uint64_t>(tensors_.size());
    b.pod<uint64_t>(kv_.size() + (write_alignment ? 1 : 0));
    if (write_alignment) {
        b.str("general.alignment");
        b.pod(static_cast<uint32_t>(ValueType::U32));
        b.pod(static_cast<uint32_t>(alignment_));
    }
    for (const auto& kv : kv_) {
        b.str(kv.key);
        b.pod(static_cast<uint32_t>(kv.value.type));
        b.value(kv.value);
    }
    uint64_t offset = 0;
    for (const auto& t : tensors_) {
        offset = align_up(offset, alignment_);
        b.str(t.name);
        b.pod<uint32_t>(static_cast<uint32_t>(t.shape.size()));
        for (int64_t d : t.shape) b.pod<int64_t>(d);
        b.pod(static_cast<uint32_t>(t.type));
        b.pod<uint64_t>(offset);
        offset += t.bytes;
    }
    out.resize(align_up(out.size(), alignment_), 0);
    return out;
}

uint64_t Writer::file_size() const {
    uint64_t data = 0;
    for (const auto& t : tensors_) data = align_up(data, alignment_) + t.bytes;
    return header().size() + align_up(data, alignment_);
}

void Writer::emit(Sink& sink) const {
    const auto head = header();
    sink.put(head.data(), head.size());

    uint64_t data_size = 0;
    for (const auto& t : tensors_) data_size = align_up(data_size, alignment_) + t.bytes;
    data_size = align_up(data_size, alignment_);
    std::vector<uint8_t> buf(std::min<uint64_t>(kChunk, data_size));
    size_t used = 0;
    auto flush = [&] {
        if (used) sink.put(buf.data(), used);
        used = 0;
    };
    auto zeros = [&](uint64_t n) {  // padding is < alignment <= 2^31 bytes
        while (n) {
            if (used == buf.size()) flush();
            const size_t k = std::min<uint64_t>(n, buf.size() - used);
            std::memset(buf.data() + used, 0, k);
            used += k;
            n -= k;
        }
    };

    uint64_t pos = 0;
    for (const auto& t : tensors_) {
        const uint64_t start = align_up(pos, alignment_);
        zeros(start - pos);
        if (!t.fill) {
            flush();
            sink.put(t.data.data(), t.data.size());
        } else {
            // Whole rows per call when a row fits the buffer, else whole blocks, so a generator
            // never has to split a quant block.
            const auto& ti = quant::type_info(t.type);
            const uint64_t row = quant::row_bytes(t.type, t.shape[0]);
            const uint64_t unit = row <= buf.size() ? row : ti.block_bytes;
            const uint64_t chunk = buf.size() / unit * unit;
            for (uint64_t off = 0; off < t.bytes; off += chunk) {
                const uint64_t n = std::min(chunk, t.bytes - off);
                if (buf.size() - used < n) flush();
                t.fill(off, buf.data() + used, n);
                used += n;
            }
        }
        pos = start + t.bytes;
    }
    zeros(align_up(pos, alignment_) - pos);
    flush();
}

std::vector<uint8_t> Writer::to_bytes() const {
    VectorSink sink;
    emit(sink);
    return std::move(sink.out);
}

void Writer::write(const std::string& path) const {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) throw Error("gguf: cannot create " + quoted(path) + ": " + std::strerror(errno));
    std::setvbuf(f, nullptr, _IONBF, 0);  // emit() buffers in 16 MiB chunks already
    try {
        FileSink sink(f, path);
        emit(sink);
    } catch (...) {
        std::fclose(f);
        std::remove(path.c_str());
        throw;
    }
    if (std::fclose(f) != 0) {
        const int err = errno;
        std::remove(path.c_str());
        throw Error("gguf: cannot write " + quoted(path) + ": " + std::strerror(err));
    }
}

}  // namespace df::gguf
