#!/usr/bin/env bash
# The device side of imma_sel_add.patch (session 54): the IQ2 decoders form the PRMT selector as
# grid codes + sign bits instead of |, so ptxas puts those adds on the FMA pipe (IMAD.IADD): the
# gate/up pair's unit path 309 -> 284 ALU instructions, 126 -> 152 FMA (the same total). Here:
# `scripts/device.sh variant bench/experiments/imma_sel_add.patch add tests`; on the device
# (carry .carry): this script; the baseline is the variant `wide` (d6e96ef's code) beside it in
# .carry/variants.tar.xz. About 3 minutes.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/df-out}; mkdir -p "$out"
scripts/device.sh run info
export LD_LIBRARY_PATH=/tmp/dfbin/lib
p=saluki-27b-iq2mix
[ -f "/tmp/$p.gguf" ] || /tmp/dfbin/diskformer synth --preset "$p" --out "/tmp/$p.gguf" | tail -n 1 &
echo "== add: CUDA kernel tests"
/tmp/dfvar/add/test_cuda --gtest_brief=1 --gtest_filter='-CudaModel.*' 2>&1 | tee "$out/tests_add.log" | grep -E "PASSED|FAILED|Failure" | head -n 20
wait
scripts/ab_decode.sh $p 4 "BIN=/tmp/dfvar/wide/diskformer" "BIN=/tmp/dfvar/add/diskformer" | tee "$out/ab27.log"
echo "== golden lines, main against the variant (the same bits: the same lines)"
for T in /tmp/dfbin/test_cuda /tmp/dfvar/add/test_cuda; do
    $T --gtest_filter='CudaModel.GoldenF32Twin*' 2>&1 | grep -E "cuda golden" >"$out/golden_$(basename "$(dirname "$T")").txt"
done
cmp "$out/golden_dfbin.txt" "$out/golden_add.txt" && echo "add: same golden lines ($(wc -l <"$out/golden_add.txt"))" || echo "add: GOLDEN LINES DIFFER"
echo "== done at $SECONDS s"
