#!/usr/bin/env bash
# Where the 27B's gate/up pair (IQ2_XXS, one token) waits, by SASS instruction: ncu's source page
# (stall samples per instruction) as CSV, for NOTES' "as of session 55" lead (a). Binary: the
# variant `hscale` (main 4ff0539's kernels: the same SASS) in .carry/variants.tar.xz, or DF_BIN.
# Carry .carry; ~2 minutes.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/df-out}; mkdir -p "$out"
scripts/device.sh run info >/dev/null
export LD_LIBRARY_PATH=/tmp/dfbin/lib
D=${DF_BIN:-/tmp/dfvar/hscale/diskformer}
p=saluki-27b-iq2mix
[ -f "/tmp/$p.gguf" ] || $D synth --preset "$p" --out "/tmp/$p.gguf" | tail -n 1
# A one-token prompt runs the decode kernels: imma_kernel's launch 1 is layer 0's gate/up pair.
ncu --clock-control none --section SourceCounters --section WarpStateStats --import-source no \
    -k "regex:(^|[^_])imma_kernel" --launch-skip 1 --launch-count 1 -f -o /tmp/gu \
    $D bench -m "/tmp/$p.gguf" --backend cuda -p 1 -n 1 --reps 1 >"$out/ncu_run.log" 2>&1
tail -n 3 "$out/ncu_run.log"
ncu -i /tmp/gu.ncu-rep --page source --csv --print-source sass >"$out/gu_source.csv" 2>"$out/gu_source.err" ||
    ncu -i /tmp/gu.ncu-rep --page source --csv >"$out/gu_source.csv" 2>>"$out/gu_source.err"
wc -l "$out/gu_source.csv"; head -c 600 "$out/gu_source.csv"; echo; cat "$out/gu_source.err" | head -5
echo "== done at $SECONDS s"
