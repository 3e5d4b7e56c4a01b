// Internal to the GGUF reader: a bounds-checked little-endian cursor over untrusted bytes, and
// the "where am I" path that every error message is built from.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "gguf/gguf.h"

namespace df::gguf {

static_assert(std::endian::native == std::endian::little, "GGUF is little-endian; so is every target we build for");

// 'name' quoted for a one-line message: control and non-ASCII bytes as \xNN, long names cut,
// because names come from the (possibly hostile) file.
std::string quoted(std::string_view name);

// Where in the file a value sits, as a chain: "key 'a.b' item 3". Lives on the stack of the
// parser, so formatting it costs nothing until an error is thrown.
struct Path {
    std::string_view label;                  // "header", "key", "tensor", "item"
    std::optional<std::string_view> name = std::nullopt;  // key / tensor name once read
    int64_t index = -1;                      // key/tensor number before the name, or item index
    const Path* parent = nullptr;

    std::string str() const;
};

[[noreturn]] void fail(const Path& at, const std::string& what);  // throws Error("gguf: <at>: <what>")

class Cursor {
public:
    Cursor(const uint8_t* p, uint64_t size) : p_(p), size_(size) {}
    uint64_t pos() const { return pos_; }
    uint64_t remaining() const { return size_ - pos_; }

    // Throws "truncated" naming `at` and `field` unless n more bytes are present.
    void need(uint64_t n, const Path& at, const char* field) const {
        if (n > remaining()) truncated(n, at, field);
    }
    template <class T> T read(const Path& at, const char* field) {
        need(sizeof(T), at, field);
        T x;
        std::memcpy(&x, p_ + pos_, sizeof(T));
        pos_ += sizeof(T);
        return x;
    }
    // A GGUF string: u64 length, then that many bytes (not NUL-terminated), capped at max_len.
    std::string_view string(const Path& at, const char* field, uint64_t max_len);

private:
    [[noreturn]] void truncated(uint64_t n, const Path& at, const char* field) const;

    const uint8_t* p_;
    uint64_t size_;
    uint64_t pos_ = 0;
};

}  // namespace df::gguf
