#!/usr/bin/env bash
# The device side of session 55's imma variants (built here with `scripts/device.sh variant
# PATCH NAME tests`; README.md in this folder lists the patches): `add` (imma_sel_add.patch),
# `addodd2` (imma_add_odd2.patch), `hscale` (the one-token IQ2_XS / IQ2_S halves' scales by
# word, landed as 4ff0539) and `all` (imma_all55.patch), against `wide` (d6e96ef's kernels, main's
# before 4ff0539). VARIANTS="..." picks the A/B's variants, TESTS="..." those whose kernel tests
# run (default: the same); carry .carry; about 4 minutes.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/df-out}; mkdir -p "$out"
scripts/device.sh run info
export LD_LIBRARY_PATH=/tmp/dfbin/lib
p=saluki-27b-iq2mix
[ -f "/tmp/$p.gguf" ] || /tmp/dfbin/diskformer synth --preset "$p" --out "/tmp/$p.gguf" | tail -n 1 &
for v in ${TESTS:-${VARIANTS:-add hscale}}; do
    echo "== $v: CUDA kernel tests"
    /tmp/dfvar/$v/test_cuda --gtest_brief=1 --gtest_filter='-CudaModel.*' 2>&1 | tee "$out/tests_$v.log" |
        grep -E "PASSED|FAILED|Failure" | head -n 20
done
wait
args=("BIN=/tmp/dfvar/wide/diskformer")
for v in ${VARIANTS:-add hscale}; do args+=("BIN=/tmp/dfvar/$v/diskformer"); done
scripts/ab_decode.sh $p 4 "${args[@]}" | tee "$out/ab27.log"
echo "== golden lines, wide against each variant (the same bits: the same lines)"
for v in wide ${VARIANTS:-add hscale}; do
    /tmp/dfvar/$v/test_cuda --gtest_filter='CudaModel.GoldenF32Twin*' 2>&1 | grep -E "cuda golden" >"$out/golden_$v.txt"
    [ $v = wide ] || { cmp "$out/golden_wide.txt" "$out/golden_$v.txt" && echo "$v: same golden lines ($(wc -l <"$out/golden_$v.txt"))" || echo "$v: GOLDEN LINES DIFFER"; }
done
echo "== done at $SECONDS s"
