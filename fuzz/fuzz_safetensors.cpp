// libFuzzer target for the safetensors reader (DFlash drafters' weights). Any input must either
// parse or throw gguf::Error; a parsed file's tensors lie inside its data, at distinct ranges,
// with sizes that match their dtype and shape, and survive a writer round trip.
//
// DF_FUZZ_WRITE_SEEDS=DIR fuzz_safetensors  writes seed files into DIR and exits (fuzz/run.sh).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/safetensors.h"
#include "seeds.h"

namespace {

using df::model::SafeTensorData;
using df::model::SafeTensors;

[[noreturn]] void mismatch(const char* what) {
    std::fprintf(stderr, "fuzz_safetensors: %s\n", what);
    std::abort();
}

void write_seeds(const std::string& dir) {
    const std::vector<std::vector<SafeTensorData>> seeds = {
        {{"a", "BF16", {2, 3}, std::vector<uint8_t>(12, 1)}, {"b", "F32", {4}, std::vector<uint8_t>(16, 2)}},
        {{"layers.0.mlp.up_proj.weight", "F16", {4, 8}, std::vector<uint8_t>(64, 3)}},
        {},
    };
    int i = 0;
    for (const auto& s : seeds) {
        const auto bytes = df::model::safetensors_bytes(s);
        df::fuzz::write_seed(dir, "seed" + std::to_string(i++), std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
    }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) { return df::fuzz::seed_or_run(write_seeds); }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::unique_ptr<SafeTensors> st;
    try {
        st = SafeTensors::from_bytes(std::vector<uint8_t>(data, data + size));
    } catch (const df::gguf::Error&) {
        return 0;
    }
    std::vector<SafeTensorData> copy;
    for (const auto& t : st->tensors()) {
        if (t.bytes != static_cast<size_t>(t.elements()) * (t.dtype == "F32" ? 4 : 2)) mismatch("size and shape disagree");
        copy.push_back({t.name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.bytes)});  // ASan checks the range
    }
    const auto again = SafeTensors::from_bytes(df::model::safetensors_bytes(copy));
    if (again->tensors().size() != copy.size()) mismatch("round trip lost tensors");
    for (const auto& t : copy) {
        const auto* u = again->find(t.name);
        if (!u || u->dtype != t.dtype || u->shape != t.shape || std::vector<uint8_t>(u->data, u->data + u->bytes) != t.bytes)
            mismatch("round trip changed a tensor");
    }
    return 0;
}
