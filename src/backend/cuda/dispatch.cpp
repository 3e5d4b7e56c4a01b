// Block type -> kernels of its generated translation unit.
#include "backend/cuda/kernels.h"

namespace df::cuda {

#define DF_X(name) extern const QuantOps kQuantOps_##name;
#include "backend/cuda/quant_types.inc"
#undef DF_X

const QuantOps* quant_ops(quant::Type t) {
    switch (t) {
#define DF_X(name) \
    case quant::Type::name: return &kQuantOps_##name;
#include "backend/cuda/quant_types.inc"
#undef DF_X
        default: return nullptr;
    }
}

}  // namespace df::cuda
