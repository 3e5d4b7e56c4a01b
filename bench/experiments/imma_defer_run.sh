#!/usr/bin/env bash
# imma_defer_fixup.patch on the device, against main, with main's owed bench-models and tests.
# Phases in priority order, each skipped when the call (DL seconds, less a margin) would not hold it.
# The carry (~39 MiB; with the ~23 MiB tree just under the 64 MiB limit), built here:
#   scripts/device.sh pack                       main's bins -> .carry/bins.tar.xz
#   scripts/device.sh variant bench/experiments/imma_defer_fixup.patch defer tests
#   the patch applied, a -DDF_CUDA_TRACE=ON build's diskformer as defer-trace/ in variants.tar.xz
#   main's test_cuda and diskformer moved from bins.tar.xz into variants.tar.xz as main/ (one xz
#   window for all five binaries: 32 MB; bins.tar.xz keeps lib/ only), .carry/golden without
#   q35_8L_q4km; then copy this script to .carry/ and `run` it with carry [".carry"]:
#   DL=560 bash .carry/imma_defer_run.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/df-out}; mkdir -p "$out"
DL=${DL:-590}  # this call's limit, less a margin; the guards below are fractions of it
scripts/device.sh run info
cp /tmp/dfvar/main/test_cuda /tmp/dfvar/main/diskformer /tmp/dfbin/   # main's binaries ride in variants (one xz window)
V=/tmp/dfvar/defer P=saluki-27b-iq2mix
export LD_LIBRARY_PATH=/tmp/dfbin/lib
echo "== [$SECONDS s] defer tests (=1, =2)"
for d in 1 2; do
  DF_CUDA_IMMA_DEFER=$d $V/test_cuda --gtest_brief=1 --gtest_filter='CudaModel.*:CudaMatvec*:CudaBatch*:CudaImma*:-CudaImma.Deferred*' 2>&1 | tee "$out/defer_tests_$d.log" | grep -E "PASSED|FAILED|Failure" | head -8
done
$V/test_cuda --gtest_brief=1 --gtest_filter="CudaImma.Deferred*" 2>&1 | tail -n 6
echo "== [$SECONDS s] A/B 27B decode: main, defer =2, =1, =0"
scripts/ab_decode.sh $P 2 "-" "DF_CUDA_IMMA_DEFER=2 BIN=$V/diskformer" "DF_CUDA_IMMA_DEFER=1 BIN=$V/diskformer" "DF_CUDA_IMMA_DEFER=0 BIN=$V/diskformer" | tee "$out/ab.log"
if (( SECONDS < DL * 50 / 100 )); then
  echo "== [$SECONDS s] main bench-models (owed H200)"; for p in qwen3-4b-q8_0 $P; do [ -f /tmp/$p.gguf ] || /tmp/dfbin/diskformer synth --preset $p --out /tmp/$p.gguf | tail -n 1; /tmp/dfbin/diskformer bench -m /tmp/$p.gguf --backend cuda -p 512,4096 -n 128 --reps 3 --bw 4600 2>&1 | tee "$out/bench_$p.log" | grep -vE "^ *$" | tail -n 6; done
fi
if (( SECONDS < DL * 66 / 100 )); then
  echo "== [$SECONDS s] traced step =1 / =0"
  for d in 1 0; do
    DF_CUDA_IMMA_DEFER=$d DF_CUDA_TRACE=/tmp/t$d.trace /tmp/dfvar/defer-trace/diskformer bench -m /tmp/$P.gguf --backend cuda -p 512 -n 16 --reps 1 --bw 4600 2>&1 | grep -E '^decode'
    python3 scripts/trace_step.py /tmp/t$d.trace --all > "$out/trace_defer$d.txt"; grep -A 40 '^step:' "$out/trace_defer$d.txt" | head -45
  done
fi
if (( SECONDS < DL * 72 / 100 )); then
  echo "== [$SECONDS s] ncu step =2 and =0"
  echo '[1, 2, 3, 4, 5, 6, 7, 8]' > /tmp/step_tokens.json
  for d in 2 0; do
    DF_CUDA_IMMA_DEFER=$d timeout $((DL - 30 - SECONDS)) ncu --metrics gpu__time_duration.sum --csv $V/diskformer eval -m /tmp/$P.gguf --backend cuda \
      --tokens /tmp/step_tokens.json --greedy 3 --ids-out /tmp/step_ids.json > "$out/step_defer$d.csv" 2>/dev/null
    python3 scripts/step_profile.py "$out/step_defer$d.csv" > "$out/step_defer$d.txt" 2>&1; head -30 "$out/step_defer$d.txt"
  done
fi
if (( SECONDS < DL * 88 / 100 )); then
  echo "== [$SECONDS s] main test_cuda (owed H200)"
  timeout $((DL - SECONDS)) /tmp/dfbin/test_cuda --gtest_brief=1 2>&1 | tee "$out/main_tests.log" | grep -E "PASSED|FAILED|Failure|cuda golden" | head -20
fi
echo "== done at $SECONDS s"
