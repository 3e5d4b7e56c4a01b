// Where the golden data lives: the full set from ../shared/golden when it is beside the checkout
// (CI), else the compact copy committed under tests/golden. Each test binary says which it used.
#pragma once

#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace df::test {

inline bool golden_full_available() {
    return std::filesystem::exists(std::filesystem::path(DF_GOLDEN_FULL) / "models" / "index.json");
}

// Root of the golden set in use, announced once per process.
inline std::filesystem::path golden_dir() {
    static const std::filesystem::path dir = [] {
        std::filesystem::path d = golden_full_available() ? DF_GOLDEN_FULL : DF_GOLDEN_REPO;
        std::fprintf(stderr, "[golden] using %s set: %s\n",
                     golden_full_available() ? "FULL (../shared/golden)" : "COMPACT (tests/golden)",
                     d.c_str());
        return d;
    }();
    return dir;
}

inline std::vector<char> read_file(const std::filesystem::path& p) {
    std::ifstream f(p, std::ios::binary);
    if (!f) throw std::runtime_error("cannot open " + p.string());
    return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}

inline std::vector<float> read_f32(const std::filesystem::path& p) {
    auto b = read_file(p);
    std::vector<float> v(b.size() / sizeof(float));
    std::memcpy(v.data(), b.data(), v.size() * sizeof(float));
    return v;
}

}  // namespace df::test
