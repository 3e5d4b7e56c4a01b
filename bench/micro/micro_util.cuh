// Helpers of the CUDA micro-benchmarks that link the engine: standalone.cuh's, and kernels
// launched with the engine's launch() (launch.cuh: programmatic dependent launch, checked).
#pragma once

#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

#include "backend/cuda/launch.cuh"
#include "standalone.cuh"

using df::cuda::launch;

