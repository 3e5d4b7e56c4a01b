// Error checks for CUDA calls and kernel launches.
//
// CUDA faults are programming faults (a bad launch, an illegal address, a call out of order):
// they abort with file:line and the failing call, never return an error to the caller. Only
// device-memory exhaustion in Backend::alloc is recoverable (it throws; see backend_cuda.cpp).
#pragma once

#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

namespace df::cuda {

[[noreturn]] inline void cuda_fail(cudaError_t e, const char* call, const char* file, int line) {
    std::fprintf(stderr, "diskformer: CUDA error %s (%s) at %s:%d in `%s`\n", cudaGetErrorName(e),
                 cudaGetErrorString(e), file, line, call);
    std::abort();
}

[[noreturn]] inline void contract_fail(const char* what, const char* file, int line) {
    std::fprintf(stderr, "diskformer: CUDA backend contract violated at %s:%d: %s\n", file, line, what);
    std::abort();
}

}  // namespace df::cuda

// Aborts with the failing call when a CUDA runtime call does not return cudaSuccess.
#define DF_CUDA_CHECK(call)                                                          \
    do {                                                                             \
        const cudaError_t df_cuda_err_ = (call);                                     \
        if (df_cuda_err_ != cudaSuccess)                                             \
            ::df::cuda::cuda_fail(df_cuda_err_, #call, __FILE__, __LINE__);          \
    } while (0)

// After a <<<...>>> launch: catches bad configurations (the launch itself is asynchronous, so
// faults inside the kernel surface at the next synchronizing call, which is checked too).
#define DF_CUDA_LAUNCH_CHECK() DF_CUDA_CHECK(cudaGetLastError())

// Argument checks of op launchers: a violated contract is a bug in the caller.
#define DF_CUDA_REQUIRE(cond, what)                                                  \
    do {                                                                             \
        if (!(cond)) ::df::cuda::contract_fail(what " (" #cond ")", __FILE__, __LINE__); \
    } while (0)
