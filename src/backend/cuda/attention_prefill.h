// Prefill attention on the tensor cores (attention_prefill.cu), used by launch_attention for
// chunks of more than 8 tokens.
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/kernels.h"

namespace df::cuda {

bool attention_prefill_supported(int head_dim);
// `group` query heads of one KV head share a block (it divides heads / kv_heads).
void launch_attention_prefill(const AttnArgs& a, int group, cudaStream_t s);

// The wgmma form (attention_prefill_wg.cu): 128-wide heads over an f16 cache on sm_90a, used by
// launch_attention_prefill where able. DF_CUDA_ATTN_WG=0 (or the setter, for tests) keeps the
// mma.sync kernel.
bool attention_prefill_wg_able(const AttnArgs& a);
void launch_attention_prefill_wg(const AttnArgs& a, int group, cudaStream_t s);
int attn_prefill_wg();
void set_attn_prefill_wg(int on);

}  // namespace df::cuda
