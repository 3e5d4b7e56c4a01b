// Prefill attention on the tensor cores (attention_prefill.cu), used by launch_attention for
// chunks of more than 8 tokens.
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/kernels.h"

namespace df::cuda {

bool attention_prefill_supported(int head_dim);
// `group` query heads of one KV head share a block (it divides heads / kv_heads).
void launch_attention_prefill(const AttnArgs& a, int group, cudaStream_t s);

}  // namespace df::cuda
