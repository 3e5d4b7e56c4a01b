// Kernel launches with programmatic dependent launch (PDL, sm_90).
//
// A dependent kernel in the same stream may be scheduled while the one before it is still
// running: it runs its prologue (shared-memory tables, the first weight tiles: data no kernel
// writes) and then blocks in pdl_wait() until its predecessor has completed and its writes are
// visible. Inside a CUDA graph this removes most of the ~2-4 us gap between small dependent
// kernels, which is where a decode step of ~500 launches spent much of its time.
//
// The contract every kernel keeps (device_util.cuh): pdl_trigger() first, and pdl_wait() in every
// thread before its first access to memory that another kernel writes or reads (reads of what
// only the host's stream-ordered copies write, such as weights and tables, may come before: every
// kernel starts after the copies before it completed; so may reads of Step::pos, which otherwise
// only the previous forward's last kernel writes: launch_after_all). Because each
// kernel waits for its predecessor's completion, and that predecessor waited for its own, the
// ordering is transitive: a kernel sees everything written before it in the stream.
#pragma once

#include <utility>

#include <cuda_runtime.h>

#include "backend/cuda/check.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/trace.h"

namespace df::cuda {

#ifdef DF_CUDA_TRACE
// Each translation unit has its own df_trace_buf (device_util.cuh): launch() and this are kept
// local to the unit (an anonymous namespace), so a unit's launches set its own copy.
namespace {
inline void trace_bind_unit() {
    static bool bound = false;
    if (bound) return;
    bound = true;
    if (void* p = trace_buffer()) {
        DF_CUDA_CHECK(cudaMemcpyToSymbol(df_trace_buf, &p, sizeof p));
        const int every = trace_every_block() ? 1 : 0;
        DF_CUDA_CHECK(cudaMemcpyToSymbol(df_trace_blocks, &every, sizeof every));
    }
}
#endif

// kernel<<<grid, block, smem, s>>>(args...) with the PDL attribute when pdl_enabled() and `pdl`,
// the decode carveout while decode launches are on (kernels.h) and, with cluster_x > 0, in thread
// block clusters of cluster_x blocks along x; checked.
template <typename... Params, typename... Args>
void launch_with(bool pdl, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                 int cluster_x, Args&&... args) {
    cudaLaunchAttribute attr[3];
    int n = 0;
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n++].val.programmaticStreamSerializationAllowed = pdl && pdl_enabled() ? 1 : 0;
    if (cluster_x > 0) {
        attr[n].id = cudaLaunchAttributeClusterDimension;
        attr[n].val.clusterDim.x = static_cast<unsigned>(cluster_x);
        attr[n].val.clusterDim.y = 1;
        attr[n++].val.clusterDim.z = 1;
    }
    if (const int carveout = launch_carveout(); carveout >= 0) {
        attr[n].id = cudaLaunchAttributePreferredSharedMemoryCarveout;
        attr[n++].val.sharedMemCarveout = static_cast<unsigned>(carveout);
    }
#ifdef DF_CUDA_TRACE
    trace_bind_unit();
    trace_launch(reinterpret_cast<const void*>(kernel), grid, block);
#endif
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cfg.attrs = attr;
    cfg.numAttrs = static_cast<unsigned>(n);
    DF_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

template <typename... Params, typename... Args>
void launch_cluster(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, int cluster_x,
                    Args&&... args) {
    launch_with(true, kernel, grid, block, smem, s, cluster_x, std::forward<Args>(args)...);
}

template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, Args&&... args) {
    launch_with(true, kernel, grid, block, smem, s, 0, std::forward<Args>(args)...);
}

// Without PDL: the kernel starts only after everything before it in the stream has completed.
// A forward's first kernel (the embedding) launches so, since the previous forward's last kernel
// may have written Step::tokens and Step::pos (Backend::argmax's feed), which later kernels read
// before their pdl_wait().
template <typename... Params, typename... Args>
void launch_after_all(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, Args&&... args) {
    launch_with(false, kernel, grid, block, smem, s, 0, std::forward<Args>(args)...);
}
#ifdef DF_CUDA_TRACE
}  // namespace
#endif

}  // namespace df::cuda
