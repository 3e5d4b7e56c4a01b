// Instantiates the kernels of one block type; used by the generated quant_<type>.cu files
// (one type per translation unit keeps a kernel edit's rebuild, and a 2-core CI build, short).
#pragma once

#include "backend/cuda/gemm.cuh"
#include "backend/cuda/gemm_q.cuh"
#include "backend/cuda/gemm_wg.cuh"
#include "backend/cuda/imma.cuh"
#include "backend/cuda/matvec.cuh"

#define DF_CUDA_DEFINE_QUANT_OPS(name)                                                              \
    namespace df::cuda {                                                                            \
    static_assert(quant_consistent<Type::name>(), #name ": decoder disagrees with the type table"); \
    extern const QuantOps kQuantOps_##name;                                                         \
    const QuantOps kQuantOps_##name = {Quant<Type::name>::kUnit, matvec_launch<Type::name>,          \
                                       gemm_launch<Type::name>, embed_launch<Type::name>, \
                                       imma_entry<Type::name>(), qgemm_entry<Type::name>()};           \
    }
