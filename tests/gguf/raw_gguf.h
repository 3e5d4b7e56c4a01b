// Byte-level GGUF builder for the reader tests: writes exactly the fields it is told to, so a test
// can produce any malformed file (wrong counts, lengths, types, offsets) the Writer would refuse.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "gguf/gguf.h"

namespace df::test {

struct RawGguf {
    std::vector<uint8_t> b;

    template <class T> RawGguf& pod(T x) {
        const size_t at = b.size();
        b.resize(at + sizeof(T));
        std::memcpy(b.data() + at, &x, sizeof(T));
        return *this;
    }
    RawGguf& u8(uint8_t x) { return pod(x); }
    RawGguf& u32(uint32_t x) { return pod(x); }
    RawGguf& i32(int32_t x) { return pod(x); }
    RawGguf& u64(uint64_t x) { return pod(x); }
    RawGguf& i64(int64_t x) { return pod(x); }
    RawGguf& str(std::string_view s) {
        u64(s.size());
        b.insert(b.end(), s.begin(), s.end());
        return *this;
    }
    RawGguf& type(gguf::ValueType t) { return u32(static_cast<uint32_t>(t)); }

    RawGguf& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
        b.insert(b.end(), {'G', 'G', 'U', 'F'});
        return u32(version).u64(n_tensors).u64(n_kv);
    }
    RawGguf& kv_u32(std::string_view key, uint32_t v) { return str(key).type(gguf::ValueType::U32).u32(v); }
    RawGguf& kv_str(std::string_view key, std::string_view v) {
        return str(key).type(gguf::ValueType::STRING).str(v);
    }
    RawGguf& tensor(std::string_view name, std::vector<int64_t> shape, uint32_t type_id, uint64_t offset) {
        str(name).u32(static_cast<uint32_t>(shape.size()));
        for (int64_t d : shape) i64(d);
        return u32(type_id).u64(offset);
    }
    RawGguf& pad(size_t alignment) {
        b.resize((b.size() + alignment - 1) / alignment * alignment, 0);
        return *this;
    }
    RawGguf& zeros(size_t n) {
        b.resize(b.size() + n, 0);
        return *this;
    }
};

// Expects parsing `bytes` to throw gguf::Error whose message starts with "gguf: " and contains
// every one of `parts`; returns the message.
inline std::string expect_gguf_error(const std::vector<uint8_t>& bytes,
                                     std::initializer_list<std::string_view> parts,
                                     const gguf::Limits& limits = {}) {
    try {
        gguf::File::from_bytes(bytes, limits);
    } catch (const gguf::Error& e) {
        const std::string msg = e.what();
        EXPECT_EQ(msg.rfind("gguf: ", 0), 0u) << msg;
        EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
        for (auto p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "missing '" << p << "' in: " << msg;
        return msg;
    }
    ADD_FAILURE() << "no gguf::Error";
    return {};
}

}  // namespace df::test
