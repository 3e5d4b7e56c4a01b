// The golden models loaded once per test binary on the CPU backend (2 threads), by name
// (tests/golden/models/<name>.gguf, or the full set's).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "common/golden.h"
#include "diskformer/diskformer.h"

namespace df::test {

inline std::shared_ptr<diskformer::Model> cpu_golden_model(const std::string& name) {
    static std::map<std::string, std::shared_ptr<diskformer::Model>> loaded;
    auto& m = loaded[name];
    if (!m)
        m = diskformer::Model::load((golden_dir() / "models" / (name + ".gguf")).string(),
                                    {.backend = diskformer::BackendKind::cpu, .threads = 2});
    return m;
}

}  // namespace df::test
