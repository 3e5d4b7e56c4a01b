// Instantiates the kernels of one block type; used by the generated quant_<type>.cu files
// (one type per translation unit keeps a kernel edit's rebuild, and a 2-core CI build, short).
#pragma once

#include "backend/cuda/gemm.cuh"
#include "backend/cuda/gemm_q.cuh"
#include "backend/cuda/gemm_wg.cuh"
#include "backend/cuda/imma.cuh"
#include "backend/cuda/matvec.cuh"

namespace df::cuda {
template <Type TY>
int decode_smem_per_sm(bool imma, bool pair) {
    if constexpr (Imma<TY>::kSupported)
        if (imma) return kImmaBlocksPerSm * ((pair ? imma_smem_bytes<Imma<TY>, 2>() : imma_smem_bytes<Imma<TY>, 1>()) + 1024);
    constexpr int kStatic = static_cast<int>(table_smem_bytes<Quant<TY>>()) + 1024;  // tables; reductions (< 1 KB)
    const int ring = matvec_ring_type<TY>() ? matvec_ring() : 0;
    const int dyn = ring > 0 ? static_cast<int>(matvec_ring_bytes<matvec_rows<1>()>(ring)) : 0;
    return matvec_min_blocks<TY, 1>() * (dyn + kStatic + 1024);
}
}  // namespace df::cuda

#define DF_CUDA_DEFINE_QUANT_OPS(name)                                                              \
    namespace df::cuda {                                                                            \
    static_assert(quant_consistent<Type::name>(), #name ": decoder disagrees with the type table"); \
    extern const QuantOps kQuantOps_##name;                                                         \
    const QuantOps kQuantOps_##name = {Quant<Type::name>::kUnit, matvec_launch<Type::name>,          \
                                       gemm_launch<Type::name>, embed_launch<Type::name>, \
                                       imma_entry<Type::name>(), qgemm_entry<Type::name>(),            \
                                       decode_smem_per_sm<Type::name>};                                \
    }

// The exact-f16 GEMM of a type (GemmQ<T>) in its own translation unit: quant_<T>.cu declares its
// launchers (DF_CUDA_EXTERN_QGEMM) and qgemm_<T>.cu instantiates them (DF_CUDA_DEFINE_QGEMM).
#if defined(DF_CUDA_WGMMA)
#define DF_CUDA_QGEMM_WG_INSTANCE(prefix, name) prefix template void qgemm_wg_launch<Type::name>(const QGemmArgs&, cudaStream_t);
#else
#define DF_CUDA_QGEMM_WG_INSTANCE(prefix, name)
#endif
#define DF_CUDA_EXTERN_QGEMM(name)                                                       \
    namespace df::cuda {                                                                  \
    extern template void qgemm_launch<Type::name>(const QGemmArgs&, cudaStream_t);        \
    DF_CUDA_QGEMM_WG_INSTANCE(extern, name)                                              \
    }
#define DF_CUDA_DEFINE_QGEMM(name)                                                              \
    namespace df::cuda {                                                                         \
    static_assert(GemmQ<Type::name>::kSupported, #name ": no exact-f16 GEMM decoder (CMakeLists)"); \
    template void qgemm_launch<Type::name>(const QGemmArgs&, cudaStream_t);                      \
    DF_CUDA_QGEMM_WG_INSTANCE(, name)                                                           \
    }
