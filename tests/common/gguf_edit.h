// Copies of golden models changed for a test: keys edited, tensors left out (a truncated model is
// a correlated drafter, and its last hidden state is the full model's state after that layer).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/golden.h"
#include "gguf/gguf.h"

namespace df::test {

inline std::filesystem::path golden_model(const std::string& name) { return golden_dir() / "models" / (name + ".gguf"); }

// A copy of golden model `name` in the temp directory, its keys changed by `edit` and without
// the tensors `drop` names.
template <class Edit, class Drop>
std::filesystem::path rewritten_model(const std::string& name, const std::string& tag, Edit edit, Drop drop) {
    const auto out = std::filesystem::temp_directory_path() /
                     ("df_" + name + "_" + tag + "_" + std::to_string(::getpid()) + ".gguf");
    auto f = gguf::File::open(golden_model(name).string());
    gguf::Writer w(f->alignment());
    for (const auto& kv : f->kv()) w.set(kv.key, kv.value);
    edit(w, *f);
    for (const auto& t : f->tensors())
        if (!drop(t.name)) w.add_tensor(t.name, t.type, t.shape, std::vector<uint8_t>(t.data, t.data + t.bytes));
    w.write(out.string());
    return out;
}

// The model with only its first `layers` layers.
inline std::filesystem::path truncated_model(const std::string& name, int layers) {
    auto f = gguf::File::open(golden_model(name).string());
    const std::string arch = f->get<std::string>("general.architecture");
    const int n = f->get<int>(arch + ".block_count");
    return rewritten_model(
        name, "L" + std::to_string(layers),
        [&](gguf::Writer& w, const gguf::File&) { w.set(arch + ".block_count", gguf::Value::u32(static_cast<uint32_t>(layers))); },
        [&](const std::string& t) {
            for (int i = layers; i < n; ++i)
                if (t.rfind("blk." + std::to_string(i) + ".", 0) == 0) return true;
            return false;
        });
}

}  // namespace df::test
