#include "gguf/cursor.h"

namespace df::gguf {

std::string quoted(std::string_view name) {
    constexpr size_t kMax = 120;  // enough for any real tensor or key name
    std::string out = "'";
    for (size_t i = 0; i < name.size() && i < kMax; ++i) {
        const auto c = static_cast<unsigned char>(name[i]);
        if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
            out += static_cast<char>(c);
        } else {
            static constexpr char kHex[] = "0123456789abcdef";
            out += "\\x";
            out += kHex[c >> 4];
            out += kHex[c & 15];
        }
    }
    if (name.size() > kMax) out += "...";
    out += "'";
    if (name.size() > kMax) out += " (" + std::to_string(name.size()) + " bytes)";
    return out;
}

std::string Path::str() const {
    std::string s = parent ? parent->str() + " " : std::string();
    s += label;
    if (name) {
        s += ' ';
        s += quoted(*name);
    }
    else if (index >= 0) {
        s += label == "item" ? " " : " #";
        s += std::to_string(index);
    }
    return s;
}

void fail(const Path& at, const std::string& what) {
    throw Error("gguf: " + at.str() + ": " + what);
}

std::string_view Cursor::string(const Path& at, const char* field, uint64_t max_len) {
    const auto n = read<uint64_t>(at, field);
    if (n > max_len)
        fail(at, std::string(field) + " is " + std::to_string(n) + " bytes, over the cap of " +
                     std::to_string(max_len));
    need(n, at, field);
    std::string_view s(reinterpret_cast<const char*>(p_ + pos_), n);
    pos_ += n;
    return s;
}

void Cursor::truncated(uint64_t n, const Path& at, const char* field) const {
    fail(at, std::string("file truncated: ") + field + " needs " + std::to_string(n) +
                 " bytes at offset " + std::to_string(pos_) + ", only " +
                 std::to_string(remaining()) + " left (file is " + std::to_string(size_) + " bytes)");
}

}  // namespace df::gguf
