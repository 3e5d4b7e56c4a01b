// Tensor maps for the bulk tensor copies of tma.cuh, encoded by the driver. The driver function
// is looked up through the runtime, so the library does not link libcuda itself.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdio>

#include "backend/cuda/check.h"
#include "backend/cuda/kernels.h"

namespace df::cuda {

namespace {
PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
    static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
        void* p = nullptr;
        cudaDriverEntryPointQueryResult found{};
        DF_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found));
        DF_CUDA_REQUIRE(found == cudaDriverEntryPointSuccess && p, "the CUDA driver has no cuTensorMapEncodeTiled");
        return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
    }();
    return fn;
}
}  // namespace

CUtensorMap tensor_map_u16_sw128(const void* base, uint64_t cols, uint64_t rows, uint64_t row_bytes, uint32_t box_cols,
                                 uint32_t box_rows) {
    DF_CUDA_REQUIRE(box_cols * 2 <= 128 && box_rows >= 1 && box_rows <= 256 && row_bytes % 16 == 0 &&
                        reinterpret_cast<uintptr_t>(base) % 16 == 0,
                    "tensor map: the box must fit the 128-byte swizzle, rows 16-byte aligned");
    CUtensorMap map;
    const cuuint64_t dims[2] = {cols, rows}, strides[1] = {row_bytes};
    const cuuint32_t box[2] = {box_cols, box_rows}, elem[2] = {1, 1};
    const CUresult r = encode_fn()(&map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, const_cast<void*>(base), dims, strides, box, elem,
                                   CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                   CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) std::fprintf(stderr, "diskformer: cuTensorMapEncodeTiled returned %d\n", static_cast<int>(r));
    DF_CUDA_REQUIRE(r == CUDA_SUCCESS, "tensor map: the driver could not encode it");
    return map;
}

}  // namespace df::cuda
