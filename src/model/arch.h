// The architecture registry, keyed by general.architecture. Nothing else in the code switches on
// the architecture: an entry names its tensors (for loading, validation and size accounting) and
// runs its layer program.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/model.h"

namespace df::model {

enum class TensorKind : uint8_t {
    matrix,   // a 2-D weight in any block type the table knows
    f32,      // a norm / bias / conv kernel: must be F32 (used as plain floats)
};

struct TensorSpec {
    std::string name;
    std::vector<int64_t> shape;  // ggml ne order
    TensorKind kind = TensorKind::matrix;
    bool optional = false;       // absent is fine (slot stays empty)
    Weight* slot = nullptr;
};

using TensorVisitor = std::function<void(const TensorSpec&)>;

struct ArchEntry {
    std::string_view name;
    // Names every tensor the layer program reads, with its expected shape and where it goes.
    void (*visit)(const ModelConfig& c, Weights& w, const TensorVisitor& fn);
    // Fixes model quirks once at load (e.g. the tied LM head).
    void (*fixup)(const ModelConfig& c, Weights& w);
    // Runs the lanes' tokens (rows 0 .. total of their T) through the network with scratch
    // `st` (model.h: Lane); one lane over st itself is a lone forward.
    void (*forward)(const Model& m, State& st, std::span<const Lane> lanes, Output out);
};

std::span<const ArchEntry> arch_registry();
const ArchEntry* find_arch(std::string_view name);  // nullptr when unknown

}  // namespace df::model
