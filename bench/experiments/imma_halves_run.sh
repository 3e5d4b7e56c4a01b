#!/usr/bin/env bash
# The device side of imma_unit_lean.patch and imma_halves.patch (session 54; the second holds
# the first) and imma_halves_iq2s_wide.patch (the second with IQ2_S's one-token rows read a word
# at a time). Here: `scripts/device.sh variant bench/experiments/imma_unit_lean.patch lean tests`,
# `... imma_halves.patch halves tests` and `... imma_halves_iq2s_wide.patch wide tests`; on the
# device (carry .carry): this script. The variants must give main's bits: the golden lines are
# compared (main against wide, which holds the others). About 6 minutes.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/df-out}; mkdir -p "$out"
scripts/device.sh run info
export LD_LIBRARY_PATH=/tmp/dfbin/lib
p=saluki-27b-iq2mix
[ -f "/tmp/$p.gguf" ] || /tmp/dfbin/diskformer synth --preset "$p" --out "/tmp/$p.gguf" | tail -n 1 &
echo "== wide (lean + halves + IQ2_S words): CUDA kernel tests"
/tmp/dfvar/wide/test_cuda --gtest_brief=1 --gtest_filter='-CudaModel.*' 2>&1 | tee "$out/tests_wide.log" | grep -E "PASSED|FAILED|Failure" | head -n 20
wait
scripts/ab_decode.sh $p 3 "-" "BIN=/tmp/dfvar/lean/diskformer" "BIN=/tmp/dfvar/halves/diskformer" "BIN=/tmp/dfvar/wide/diskformer" | tee "$out/ab27.log"
echo "== golden lines, main against the variants (the same bits: the same lines)"
for T in /tmp/dfbin/test_cuda /tmp/dfvar/wide/test_cuda; do
    $T --gtest_filter='CudaModel.GoldenF32Twin*' 2>&1 | grep -E "cuda golden" >"$out/golden_$(basename "$(dirname "$T")").txt"
done
for v in wide; do cmp "$out/golden_dfbin.txt" "$out/golden_$v.txt" && echo "$v: same golden lines ($(wc -l <"$out/golden_$v.txt"))" || echo "$v: GOLDEN LINES DIFFER"; done
echo "== done at $SECONDS s"
