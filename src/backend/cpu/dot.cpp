// row_dot / decode_row: one kernel per type chosen from the quant table, plus float-row tails.
#include "backend/cpu/dot.h"

#include <array>
#include <stdexcept>
#include <string>

#include "backend/cpu/dot_kernel.h"
#include "quant/dequant.h"

namespace df::cpu {

namespace {

using detail::Kernel;

constexpr uint32_t kMaxTypeId = 64;

struct Entry {
    Kernel kernel;
    const quant::TypeInfo* info = nullptr;  // null: not a weight type
};

// Built once, indexed by type id, so a call costs no search (rows can be as short as 1024
// elements). Every table type must have a kernel (test_backend walks the table).
const std::array<Entry, kMaxTypeId>& entries() {
    static const auto table = [] {
        std::array<Entry, kMaxTypeId> e{};
        for (const auto& ti : quant::kTypeTable) {
            for (auto find : {detail::kernel_float, detail::kernel_legacy, detail::kernel_k, detail::kernel_iq,
                              detail::kernel_low, detail::kernel_scalar}) {
                const Kernel c = find(ti.type);
                if (c.dot) {
                    e[static_cast<uint32_t>(ti.type)] = {c, &ti};
                    break;
                }
            }
        }
        return e;
    }();
    return table;
}

// The kernel for `type`, after checking the row length; throws naming what is wrong.
const Kernel& kernel_for(quant::Type type, int64_t n, const char* what) {
    const auto id = static_cast<uint32_t>(type);
    const Entry* e = id < kMaxTypeId ? &entries()[id] : nullptr;
    if (!e || !e->info)
        throw std::invalid_argument(std::string(what) + ": unsupported weight type id " + std::to_string(id));
    if (n < 0 || n % e->info->block_elems != 0)
        throw std::invalid_argument(std::string(what) + ": " + std::to_string(n) + " elements is not a multiple of the " +
                                    std::string(e->info->name) + " block size " + std::to_string(e->info->block_elems));
    return e->kernel;
}

}  // namespace

void row_dot(quant::Type type, const void* row, int64_t n, const float* x, int64_t x_stride, int T, float* out,
             int64_t out_stride) {
    const Kernel& k = kernel_for(type, n, "row_dot");
    if (T <= 0) return;
    const auto* r = static_cast<const uint8_t*>(row);
    const int64_t nb = n / k.block_elems;
    k.dot(r, nb, x, x_stride, T, out, out_stride);
    const int64_t tail = n - nb * k.block_elems;  // only float rows have one (their block is 32)
    if (tail == 0) return;
    float w[32];
    quant::dequantize_row(type, r + nb * k.block_bytes, w, tail);
    for (int t = 0; t < T; ++t) {
        const float* xt = x + t * x_stride + nb * k.block_elems;
        float s = out[t * out_stride];
        for (int64_t i = 0; i < tail; ++i) s += w[i] * xt[i];
        out[t * out_stride] = s;
    }
}

void decode_row(quant::Type type, const void* row, int64_t n, float* dst) {
    const Kernel& k = kernel_for(type, n, "decode_row");
    const auto* r = static_cast<const uint8_t*>(row);
    const int64_t nb = n / k.block_elems;
    k.decode(r, nb, dst);
    if (n > nb * k.block_elems) quant::dequantize_row(type, r + nb * k.block_bytes, dst + nb * k.block_elems, n - nb * k.block_elems);
}

}  // namespace df::cpu
