// Seeds for the fuzz targets: run with DF_FUZZ_WRITE_SEEDS=DIR, a target writes its seed inputs
// into DIR and exits (fuzz/run.sh starts each corpus so).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace df::fuzz {

// DIR/name holds `bytes` afterwards; exits 1 when it cannot be written.
inline void write_seed(const std::string& dir, const std::string& name, std::string_view bytes) {
    const std::string path = dir + "/" + name;
    std::FILE* out = std::fopen(path.c_str(), "wb");
    const bool ok = out && std::fwrite(bytes.data(), 1, bytes.size(), out) == bytes.size();
    if (out) std::fclose(out);
    if (!ok) {
        std::fprintf(stderr, "fuzz: cannot write %s\n", path.c_str());
        std::exit(1);
    }
}

// LLVMFuzzerInitialize's work: write_seeds(DIR) and exit when DF_FUZZ_WRITE_SEEDS names DIR.
inline int seed_or_run(void (*write_seeds)(const std::string& dir)) {
    if (const char* dir = std::getenv("DF_FUZZ_WRITE_SEEDS")) {
        write_seeds(dir);
        std::exit(0);
    }
    return 0;
}

}  // namespace df::fuzz
