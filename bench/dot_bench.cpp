// Single-thread throughput of cpu::row_dot per weight type: a 4096 x 4096 matrix times one
// activation vector (T = 1, decode) and times 8 and 32 (speculative verify / prefill tiles).
// Reports GB/s of weight bytes read. "warm" reuses one matrix (on a 32 MB L3 most of it stays
// cached); "cold" cycles through enough matrices to exceed 96 MB, so reads come from DRAM.
// Usage: dot_bench [TYPE ...]   (default: every type in the table)
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/dot.h"
#include "common/random_blocks.h"
#include "quant/types.h"

namespace {

using df::quant::Type;
constexpr int64_t kRows = 4096, kCols = 4096;

// CPU time of this thread: the shared 2-core machine is often busy, and wall time would count
// the time other processes hold the core.
double thread_seconds() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Best-of-reps seconds for one pass of all matrices with T tokens (best-of filters out the
// passes another process interrupted).
double time_pass(Type t, const std::vector<std::vector<uint8_t>>& mats, const std::vector<float>& x, int T,
                 std::vector<float>& out, int reps) {
    const size_t rb = df::quant::row_bytes(t, kCols);
    double best = 1e30;
    for (int rep = 0; rep < reps; ++rep) {
        const double t0 = thread_seconds();
        for (const auto& m : mats)
            for (int64_t r = 0; r < kRows; ++r)
                df::cpu::row_dot(t, m.data() + r * rb, kCols, x.data(), kCols, T, out.data() + r, kRows);
        best = std::min(best, thread_seconds() - t0);
    }
    return best;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<Type> types;
    for (int i = 1; i < argc; ++i) {
        const auto t = df::quant::type_from_name(argv[i]);
        if (!t) {
            std::fprintf(stderr, "unknown type %s\n", argv[i]);
            return 2;
        }
        types.push_back(*t);
    }
    if (types.empty())
        for (const auto& ti : df::quant::kTypeTable) types.push_back(ti.type);

    std::mt19937 rng(5);
    std::vector<float> x(kCols * 32);
    std::normal_distribution<float> normal;
    for (auto& v : x) v = normal(rng);
    std::vector<float> out(kRows * 32);

    std::printf("%-8s %9s %11s %11s %11s %11s %12s\n", "type", "MB", "T=1 warm", "T=1 cold", "T=8 warm", "T=32 warm",
                "Gw/s T=1");
    for (Type t : types) {
        const size_t bytes = df::quant::row_bytes(t, kCols) * kRows;
        std::vector<std::vector<uint8_t>> mats(std::max<size_t>(2, (96u << 20) / bytes + 1));
        for (auto& m : mats) {
            m.resize(bytes);
            const auto row = df::test::random_row(t, kCols, rng);  // one random row, repeated
            for (int64_t r = 0; r < kRows; ++r) std::copy(row.begin(), row.end(), m.begin() + r * row.size());
        }
        const std::vector<std::vector<uint8_t>> one(mats.begin(), mats.begin() + 1);
        const double gb = bytes / 1e9;
        const double warm1 = time_pass(t, one, x, 1, out, 15);
        const double cold1 = time_pass(t, mats, x, 1, out, 3) / mats.size();
        const double warm8 = time_pass(t, one, x, 8, out, 5);
        const double warm32 = time_pass(t, one, x, 32, out, 3);
        std::printf("%-8s %9.1f %8.1f GB/s %6.1f GB/s %6.1f GB/s %6.1f GB/s %9.2f\n",
                    std::string(df::quant::type_name(t)).c_str(), bytes / 1e6, gb / warm1, gb / cold1, gb / warm8,
                    gb / warm32, kRows * kCols / warm1 / 1e9);
    }
}
