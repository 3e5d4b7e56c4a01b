#include "backend/cuda/trace.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cuda/check.h"

namespace df::cuda {
namespace {

struct Trace {
    const char* path = std::getenv("DF_CUDA_TRACE");
    unsigned long long* buf = nullptr;
    std::vector<std::string> lines;  // the launch sequence and marks, in issue order
};

Trace& trace() {
    static Trace t;
    return t;
}

}  // namespace

void* trace_buffer() {
#ifdef DF_CUDA_TRACE
    Trace& t = trace();
    if (!t.path) return nullptr;
    if (!t.buf) {
        const size_t bytes = 16 * (kTraceCap + 1);
        DF_CUDA_CHECK(cudaMalloc(&t.buf, bytes));
        DF_CUDA_CHECK(cudaMemset(t.buf, 0, bytes));
    }
    return t.buf;
#else
    return nullptr;
#endif
}

bool trace_every_block() {
    const char* e = std::getenv("DF_CUDA_TRACE_BLOCKS");
    return e && std::string(e) == "1";
}

void trace_launch(const void* kernel, dim3 grid, dim3 block) {
    Trace& t = trace();
    if (!t.path) return;
    const char* name = "?";
#if CUDART_VERSION >= 12030
    if (cudaFuncGetName(&name, kernel) != cudaSuccess) name = "?";
#else
    (void)kernel;
#endif
    t.lines.push_back("L " + std::to_string(grid.x) + " " + std::to_string(grid.y) + " " + std::to_string(grid.z) + " " +
                      std::to_string(block.x) + " " + name);
}

void trace_mark(const char* what) {
    Trace& t = trace();
    if (t.path) t.lines.push_back(std::string("M ") + what);
}

void trace_dump() {
    Trace& t = trace();
    if (!t.path || !t.buf) return;
    DF_CUDA_CHECK(cudaDeviceSynchronize());
    unsigned long long n = 0;
    DF_CUDA_CHECK(cudaMemcpy(&n, t.buf, sizeof n, cudaMemcpyDeviceToHost));
    if (n > kTraceCap) n = kTraceCap;
    std::vector<unsigned long long> ev(2 * n);
    if (n) DF_CUDA_CHECK(cudaMemcpy(ev.data(), t.buf + 2, 16 * n, cudaMemcpyDeviceToHost));
    FILE* f = std::fopen(t.path, "w");
    if (!f) return;
    for (const std::string& l : t.lines) std::fprintf(f, "%s\n", l.c_str());
    for (unsigned long long i = 0; i < n; ++i) {
        const unsigned long long w = ev[2 * i + 1];
        auto field = [&](int lo, int hi) { return (w >> lo) & ((1ull << (hi - lo)) - 1); };
        const unsigned long long block = field(kTraceBlock, 15);  // bit 15: kTraceEveryBlock
        if (w & kTraceEveryBlock) {  // B t kind block gx gy gz bx by bz smid (the next record holds the last four)
            if (i + 1 >= n) break;
            const unsigned long long where = ev[2 * (i + 1)];
            std::fprintf(f, "B %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu\n", ev[2 * i], field(0, kTraceBlock), block,
                         field(kTraceGridX, kTraceGridY), field(kTraceGridY, kTraceGridZ), w >> kTraceGridZ,
                         where & 0xFFFFFFull, (where >> 24) & 0xFFFFFull, where >> 44, ev[2 * (i + 1) + 1]);
            ++i;
            continue;
        }
        std::fprintf(f, "E %llu %llu %llu %llu %llu %llu\n", ev[2 * i], field(0, kTraceBlock), block,
                     field(kTraceGridX, kTraceGridY), field(kTraceGridY, kTraceGridZ), w >> kTraceGridZ);
    }
    std::fclose(f);
    t.path = nullptr;  // once
}

}  // namespace df::cuda
