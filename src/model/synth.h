// Synthetic GGUF models with real shapes: the tensor names, shapes, block types, metadata and
// vocabulary of a preset (presets.h), filled with random but valid blocks whose dequantized
// weights have realistic statistics, so activations stay finite and O(1) through every layer
// (the weight recipe of shared/golden/README.md). Speed depends on shapes and bytes, not values,
// so benchmarks run on these files; llama.cpp loads them too.
//
// Deterministic: tensor bytes depend only on (seed, tensor name, offset), never on threads or on
// how the writer chunks its calls.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gguf/gguf.h"
#include "model/presets.h"

namespace df::model::synth {

// How a tensor's values are drawn.
enum class Init : uint8_t {
    linear,   // N(0, (gain / sqrt(fan_in))^2); quantized types: block scales calibrated to that std
    norm,     // 1 + 0.1 N(0, 1)
    conv,     // U(-0.5, 0.5)
    ssm_a,    // -U(1, 16)  (the GGUF holds -exp(A_log))
    dt_bias,  // softplus^-1(dt), dt log-uniform in [1e-3, 0.1]
};

struct TensorSpec {
    std::string name;
    quant::Type type = quant::Type::F32;
    std::vector<int64_t> shape;  // ggml ne order: shape[0] is the row length (fan-in)
    Init init = Init::linear;
    float gain = 1.f;            // linear only
    uint64_t bytes = 0;

    // Standard deviation of the dequantized weights the generator aims at (linear only).
    float target_std() const;
};

struct Options {
    std::string preset;
    uint64_t seed = 0;
    int layers = 0;  // > 0: keep the first `layers` layers (block_count N, same attention pattern)
};

struct Layout {
    std::string preset;
    std::string arch;
    uint64_t seed = 0;
    int n_layer = 0;
    int n_vocab = 0;
    std::vector<gguf::KeyValue> kv;       // metadata, tokenizer included
    std::vector<TensorSpec> tensors;      // in file order

    uint64_t tensor_bytes() const;
    // Bytes of tensor data per block type, largest first.
    std::vector<std::pair<quant::Type, uint64_t>> bytes_by_type() const;
};

// Resolves a preset into its full layout without generating any data. Throws std::invalid_argument
// naming the preset (and listing the known ones) or the bad layer count.
Layout plan(const Options& options);

// Human-readable summary: preset, tensor count, total and per-type tensor bytes, file size (what
// --dry-run prints).
std::string summary(const Layout& layout);

// Size of the GGUF file write() produces (header, metadata, tensor data, alignment padding).
uint64_t file_size(const Layout& layout);

struct WriteStats {
    uint64_t bytes = 0;     // file size
    double seconds = 0;
};

// Writes layout to path as GGUF v3, generating tensor data on the fly with `threads` workers
// (0 = hardware concurrency). Throws gguf::Error on I/O failure.
WriteStats write(const Layout& layout, const std::string& path, int threads = 0);

// ---- the generator, exposed for tests and for callers that stream elsewhere ----

// Seed of one tensor's stream: mixes the model seed with the tensor name.
uint64_t tensor_seed(uint64_t seed, std::string_view name);

// Fills dst with bytes [offset, offset + n) of tensor t's data for the given tensor seed.
// Any split of a tensor into calls yields the same bytes. threads > 1 splits large calls.
void fill(const TensorSpec& t, uint64_t seed, uint64_t offset, uint8_t* dst, uint64_t n,
          int threads = 1);

// Std of dequantized weights of `type` per unit block scale, with the zero-mean min ratio used
// (measured once per type with quant::dequantize_row on random blocks; cached).
struct Calibration {
    double unit_std = 1;   // std of weights with d = 1 (and min = min_ratio)
    double min_ratio = 0;  // min field / d that makes the mean zero (types with a min field)
};
Calibration calibration(quant::Type type);

// The vocabulary every preset carries (see synth_vocab.cpp): byte-level BPE of n_vocab tokens.
std::vector<gguf::KeyValue> vocab_kv(int n_vocab, std::string_view pre);

}  // namespace df::model::synth
