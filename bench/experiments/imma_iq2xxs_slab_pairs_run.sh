#!/usr/bin/env bash
# The device side of imma_iq2xxs_slab_pairs.patch (session 53: built, PTX- and ptxas-checked, not
# run). Here: `scripts/device.sh pack && scripts/device.sh variant
# bench/experiments/imma_iq2xxs_slab_pairs.patch pairs tests`, then move .carry/golden aside (bins,
# the variant and the repo fill the 64 MiB carry); on the device (carry .carry):
# `bench/experiments/imma_iq2xxs_slab_pairs_run.sh`. About 4 minutes.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/df-out}; mkdir -p "$out"
scripts/device.sh run info
export LD_LIBRARY_PATH=/tmp/dfbin/lib
V=/tmp/dfvar/pairs p=saluki-27b-iq2mix
echo "== the variant's CUDA tests"
$V/test_cuda --gtest_brief=1 2>&1 | tee "$out/tests_pairs.log" | grep -E "PASSED|FAILED|Failure" | head -n 20
echo "== golden lines, main against the variant (the same bits: the same lines)"
for T in /tmp/dfbin/test_cuda $V/test_cuda; do
    $T --gtest_filter='CudaModel.GoldenF32Twin*' 2>&1 | grep -E "cuda golden" >"$out/golden_$(basename "$(dirname "$T")").txt"
done
cmp "$out/golden_dfbin.txt" "$out/golden_pairs.txt" && echo "same golden lines" || echo "GOLDEN LINES DIFFER"
[ -f "/tmp/$p.gguf" ] || /tmp/dfbin/diskformer synth --preset "$p" --out "/tmp/$p.gguf" | tail -n 1
scripts/ab_decode.sh $p 3 "-" "BIN=$V/diskformer" | tee "$out/ab27.log"
scripts/device.sh run imma-profile
echo "== done at $SECONDS s"
