// Hugging Face's safetensors weight format, read for drafters that ship only as safetensors
// (DFlash): an 8-byte little-endian header length n, n bytes of JSON naming each tensor's dtype,
// shape and byte range ({"name": {"dtype", "shape", "data_offsets": [begin, end]}, …,
// "__metadata__": {…}}), then the raw row-major data. Every range, dtype and shape is checked, so
// a corrupt or truncated file is a gguf::Error naming the file and the tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace df::model {

struct SafeTensor {
    std::string name;
    std::string dtype;             // "BF16", "F16" or "F32" (others are refused)
    std::vector<int64_t> shape;    // row-major: shape.back() is the contiguous dimension
    const uint8_t* data = nullptr; // aligned to the element size
    size_t bytes = 0;
    int64_t elements() const;
};

class SafeTensors {
public:
    // Reads the file (the data into memory of its own, aligned); throws gguf::Error.
    static std::unique_ptr<SafeTensors> open(const std::string& path);
    static std::unique_ptr<SafeTensors> from_bytes(const std::vector<uint8_t>& bytes, const std::string& name = "(bytes)");

    const std::vector<SafeTensor>& tensors() const { return tensors_; }
    const SafeTensor* find(std::string_view name) const;  // nullptr when absent

private:
    SafeTensors() = default;
    void parse(std::string_view header, uint64_t data_bytes, const std::string& where);
    std::unique_ptr<uint8_t[]> data_;
    std::vector<SafeTensor> tensors_;
};

// A safetensors image of these tensors (names in order; data given as bytes), for tests and tools.
struct SafeTensorData {
    std::string name, dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
};
std::vector<uint8_t> safetensors_bytes(const std::vector<SafeTensorData>& tensors);

}  // namespace df::model
