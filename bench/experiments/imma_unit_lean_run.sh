#!/usr/bin/env bash
# The device side of imma_unit_lean.patch (session 54): the imma loop's per-unit overhead trimmed
# (B fragments and exponents loaded without predicates, ring slots by increments); SASS
# checked here with scripts/sass_local.sh (IQ2_XXS one-token unit path 359 -> 303 instructions
# single, 609 -> 568 paired). Here: `scripts/device.sh variant bench/experiments/imma_unit_lean.patch
# lean tests`; on the device (carry .carry): this script. About 5 minutes.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/df-out}; mkdir -p "$out"
scripts/device.sh run info
export LD_LIBRARY_PATH=/tmp/dfbin/lib
V=/tmp/dfvar/lean p=saluki-27b-iq2mix
echo "== the variant's CUDA tests"
$V/test_cuda --gtest_brief=1 2>&1 | tee "$out/tests_lean.log" | grep -E "PASSED|FAILED|Failure" | head -n 20
echo "== golden lines, main against the variant (the same bits: the same lines)"
for T in /tmp/dfbin/test_cuda $V/test_cuda; do
    $T --gtest_filter='CudaModel.GoldenF32Twin*' 2>&1 | grep -E "cuda golden" >"$out/golden_$(basename "$(dirname "$T")").txt"
done
cmp "$out/golden_dfbin.txt" "$out/golden_lean.txt" && echo "same golden lines" || echo "GOLDEN LINES DIFFER"
[ -f "/tmp/$p.gguf" ] || /tmp/dfbin/diskformer synth --preset "$p" --out "/tmp/$p.gguf" | tail -n 1
scripts/ab_decode.sh $p 3 "-" "BIN=$V/diskformer" | tee "$out/ab27.log"
scripts/device.sh run imma-profile
echo "== done at $SECONDS s"
