#include "model/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <fstream>

#include "gguf/gguf.h"

namespace df::model {
namespace {

constexpr uint64_t kMaxHeader = 100u << 20;  // the format's own limit
constexpr size_t kMaxDims = 8;

[[noreturn]] void fail(const std::string& where, const std::string& what) {
    throw gguf::Error("safetensors " + where + ": " + what);
}

size_t dtype_bytes(const std::string& d) {
    if (d == "BF16" || d == "F16") return 2;
    if (d == "F32") return 4;
    return 0;
}

uint64_t read_u64le(const uint8_t* p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
    return v;
}

}  // namespace

int64_t SafeTensor::elements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

std::unique_ptr<SafeTensors> SafeTensors::open(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) fail(path, "cannot open");
    f.seekg(0, std::ios::end);
    const auto size = static_cast<uint64_t>(f.tellg());
    f.seekg(0);
    uint8_t len[8];
    if (size < 8 || !f.read(reinterpret_cast<char*>(len), 8)) fail(path, "shorter than its 8-byte header length");
    const uint64_t n = read_u64le(len);
    if (n > kMaxHeader || n > size - 8) fail(path, "header length " + std::to_string(n) + " does not fit the file of " + std::to_string(size) + " bytes");
    std::string header(n, '\0');
    if (!f.read(header.data(), static_cast<std::streamsize>(n))) fail(path, "cannot read the header");
    std::unique_ptr<SafeTensors> st(new SafeTensors());
    const uint64_t data_bytes = size - 8 - n;
    st->data_ = std::make_unique<uint8_t[]>(std::max<uint64_t>(data_bytes, 1));  // new[]: aligned for any scalar
    if (data_bytes && !f.read(reinterpret_cast<char*>(st->data_.get()), static_cast<std::streamsize>(data_bytes)))
        fail(path, "cannot read the data");
    st->parse(header, data_bytes, path);
    return st;
}

std::unique_ptr<SafeTensors> SafeTensors::from_bytes(const std::vector<uint8_t>& bytes, const std::string& name) {
    if (bytes.size() < 8) fail(name, "shorter than its 8-byte header length");
    const uint64_t n = read_u64le(bytes.data());
    if (n > kMaxHeader || n > bytes.size() - 8) fail(name, "header length " + std::to_string(n) + " does not fit the file of " + std::to_string(bytes.size()) + " bytes");
    std::unique_ptr<SafeTensors> st(new SafeTensors());
    const uint64_t data_bytes = bytes.size() - 8 - n;
    st->data_ = std::make_unique<uint8_t[]>(std::max<uint64_t>(data_bytes, 1));
    std::memcpy(st->data_.get(), bytes.data() + 8 + n, data_bytes);
    st->parse(std::string_view(reinterpret_cast<const char*>(bytes.data() + 8), n), data_bytes, name);
    return st;
}

void SafeTensors::parse(std::string_view header, uint64_t data_bytes, const std::string& where) {
    const auto h = nlohmann::json::parse(header, nullptr, /*allow_exceptions=*/false);
    if (h.is_discarded() || !h.is_object()) fail(where, "the header is not a JSON object");
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    for (auto it = h.begin(); it != h.end(); ++it) {
        if (it.key() == "__metadata__") continue;
        const std::string at = where + ": tensor '" + it.key() + "'";
        const auto& v = it.value();
        if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
            fail(at, "needs dtype, shape and data_offsets");
        SafeTensor t;
        t.name = it.key();
        if (!v["dtype"].is_string()) fail(at, "dtype must be a string");
        t.dtype = v["dtype"].get<std::string>();
        const size_t elem = dtype_bytes(t.dtype);
        if (!elem) fail(at, "dtype " + t.dtype + " is not supported (BF16, F16, F32)");
        const auto& shape = v["shape"];
        if (!shape.is_array() || shape.size() > kMaxDims) fail(at, "shape must be an array of at most 8 sizes");
        uint64_t count = 1;
        for (const auto& d : shape) {
            if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t{1} << 40)) fail(at, "shape holds a bad size");
            t.shape.push_back(d.get<int64_t>());
            count *= d.get<uint64_t>();
            if (count > (uint64_t{1} << 40)) fail(at, "too many elements");
        }
        const auto& off = v["data_offsets"];
        if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
            fail(at, "data_offsets must be two byte offsets");
        const uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
        if (b > e || e > data_bytes)
            fail(at, "bytes [" + std::to_string(b) + ", " + std::to_string(e) + ") lie outside the data's " + std::to_string(data_bytes) + " (truncated file?)");
        if (e - b != count * elem)
            fail(at, "holds " + std::to_string(e - b) + " bytes, its shape and dtype need " + std::to_string(count * elem));
        if (b % elem) fail(at, "its data is not aligned to its element size");
        t.data = data_.get() + b;
        t.bytes = e - b;
        ranges.emplace_back(b, e);
        tensors_.push_back(std::move(t));
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i)
        if (ranges[i].first < ranges[i - 1].second) fail(where, "two tensors share bytes");
}

const SafeTensor* SafeTensors::find(std::string_view name) const {
    for (const auto& t : tensors_)
        if (t.name == name) return &t;
    return nullptr;
}

std::vector<uint8_t> safetensors_bytes(const std::vector<SafeTensorData>& tensors) {
    nlohmann::ordered_json h = nlohmann::ordered_json::object();
    uint64_t at = 0;
    for (const auto& t : tensors) {
        h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {at, at + t.bytes.size()}}};
        at += t.bytes.size();
    }
    std::string text = h.dump();
    while ((8 + text.size()) % 8) text += ' ';  // the data starts 8-byte aligned, as HF's writer pads it
    std::vector<uint8_t> out(8 + text.size() + at);
    for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<uint8_t>(text.size() >> (8 * i));
    std::memcpy(out.data() + 8, text.data(), text.size());
    size_t o = 8 + text.size();
    for (const auto& t : tensors) {
        if (!t.bytes.empty()) std::memcpy(out.data() + o, t.bytes.data(), t.bytes.size());
        o += t.bytes.size();
    }
    return out;
}

}  // namespace df::model
