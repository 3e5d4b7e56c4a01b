// Decode timeline (build option DF_CUDA_TRACE; off in normal builds): with DF_CUDA_TRACE=<file> in
// the environment, block 0 of every kernel stamps %globaltimer when it starts (pdl_trigger) and
// when its predecessor's writes are visible (pdl_wait), and the host keeps the launch sequence;
// scripts/trace_step.py turns the two into a per-kernel timeline of one graph replay. ncu times
// kernels one at a time and nsys does not run on the lent device, so this is the only view of
// how kernels overlap inside a replayed decode step.
#pragma once

#include <cuda_runtime.h>

namespace df::cuda {

inline constexpr unsigned long long kTraceCap = 1ull << 23;  // records kept (16 bytes each)

// An event is (%globaltimer, word); the word packs the kind (0 started, 1 past pdl_wait, 2 + k
// phase k of the kernel: trace_phase) and the
// launch's shape: kind | block.x << kTraceBlock | grid.x << kTraceGridX | grid.y << kTraceGridY |
// grid.z << kTraceGridZ. Written by trace_event (device_util.cuh), read by trace_dump.
inline constexpr int kTraceBlock = 4, kTraceGridX = 16, kTraceGridY = 40, kTraceGridZ = 56;
// Bit 15 (above any block size) marks an every-block record (DF_CUDA_TRACE_BLOCKS=1), which the
// next record completes with the block's index and SM.
inline constexpr unsigned long long kTraceEveryBlock = 1ull << 15;
// Kind 15: a block's end (trace_block_end), stamped by every block of the kernels that call it.
inline constexpr unsigned kTraceEnd = 15;

void* trace_buffer();  // the device buffer ([count, -, events...]), or nullptr when not tracing
bool trace_every_block();  // DF_CUDA_TRACE_BLOCKS=1: every block stamps its start and release
void trace_launch(const void* kernel, dim3 grid, dim3 block);
void trace_mark(const char* what);  // e.g. graph capture begin / end, in the launch sequence
void trace_dump();                  // writes the events and the launch sequence (the file is named once)

}  // namespace df::cuda
