#!/usr/bin/env bash
# The device side of defer_norm_lean.patch (session 52: built, ptxas-checked, never run).
# Here: `git apply bench/experiments/defer_norm_lean.patch && scripts/device.sh pack;
# git apply -R bench/experiments/defer_norm_lean.patch`, then on the device (carry .carry):
# `bench/experiments/defer_norm_lean_run.sh`. About 4 minutes.
# Knobs of the patched binary (off = main's kernel and barriers):
#   DF_CUDA_DEFER_NORM_TAIL  0 main; 1 the second cluster barrier's arrive relaxed (no membar);
#                            2 that arrive right after the remote reads, its wait after the
#                            outputs; 3 = 2 with the first barrier as .aligned release/acquire
#   DF_CUDA_DEFER_NORM_LEAN  1: the instantiation for the case at hand (one unit a warp, an
#                            accumulating single matrix: 108 registers and 955 PTX instructions
#                            against 144 and 2,089)
#   DF_CUDA_DEFER_CONVERT_LEAN 1: down's conversion instantiated for the gate/up pair's output
#                            (103 registers against 112)
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/df-out}; mkdir -p "$out"
scripts/device.sh run info
export LD_LIBRARY_PATH=/tmp/dfbin/lib
T=/tmp/dfbin/test_cuda D=/tmp/dfbin/diskformer p=saluki-27b-iq2mix
lean="DF_CUDA_DEFER_NORM_LEAN=1 DF_CUDA_DEFER_NORM_TAIL=3 DF_CUDA_DEFER_CONVERT_LEAN=1"
for env in "DF_CUDA_DEFER_NORM_TAIL=0" "$lean"; do
    echo "== tests, $env (golden NMSE lines must equal the first run's: the same bits)"
    env $env timeout 150 $T --gtest_brief=1 --gtest_filter='CudaImma.*:CudaModel.*' 2>&1 | tee -a "$out/tests.log" |
        grep -E "PASSED|FAILED|Failure|cuda golden.*(stepwise|chunked)"
done
[ -f "/tmp/$p.gguf" ] || $D synth --preset "$p" --out "/tmp/$p.gguf" | tail -n 1
scripts/ab_decode.sh $p 3 "-" "DF_CUDA_DEFER_NORM_TAIL=1" "DF_CUDA_DEFER_NORM_TAIL=2" "DF_CUDA_DEFER_NORM_TAIL=3" \
    "DF_CUDA_DEFER_NORM_LEAN=1" "DF_CUDA_DEFER_CONVERT_LEAN=1" "$lean" | tee "$out/ab27.log"
for env in "DF_CUDA_DEFER_NORM_TAIL=0" "$lean"; do
    OUT=$out/kp_${env//[ =]/_} env $env KERNEL_PROFILE="$p:1:rmsnorm_deferred:4 $p:1:(^|[^_])deferred_kernel:4" scripts/device.sh run kernel-profile
done
echo "== done at $SECONDS s"
