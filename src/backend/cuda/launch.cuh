// Kernel launches with programmatic dependent launch (PDL, sm_90).
//
// A dependent kernel in the same stream may be scheduled while the one before it is still
// running: it runs its prologue (shared-memory tables, the first weight tiles: data no kernel
// writes) and then blocks in pdl_wait() until its predecessor has completed and its writes are
// visible. Inside a CUDA graph this removes most of the ~2-4 us gap between small dependent
// kernels, which is where a decode step of ~500 launches spent much of its time.
//
// The contract every kernel keeps (device_util.cuh): pdl_trigger() first, and pdl_wait() in every
// thread before its first access to memory that another kernel writes or reads. Because each
// kernel waits for its predecessor's completion, and that predecessor waited for its own, the
// ordering is transitive: a kernel sees everything written before it in the stream.
#pragma once

#include <utility>

#include <cuda_runtime.h>

#include "backend/cuda/check.h"
#include "backend/cuda/kernels.h"

namespace df::cuda {

// kernel<<<grid, block, smem, s>>>(args...) with the PDL attribute when pdl_enabled(); checked.
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, Args&&... args) {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = pdl_enabled() ? 1 : 0;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    DF_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

}  // namespace df::cuda
