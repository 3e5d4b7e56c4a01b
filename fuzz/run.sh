#!/usr/bin/env bash
# Runs a libFuzzer target for a bounded time; exits nonzero (and keeps the crashing input) on any
# crash, sanitizer report, leak or timeout. Usage: fuzz/run.sh BINARY SECONDS
#
# The corpus lives beside the binary (BINARY.corpus/) so runs accumulate coverage. It is seeded
# with the target's own seeds (DF_FUZZ_WRITE_SEEDS) and, for fuzz_gguf, the first 64 KiB of every
# golden GGUF: the header, metadata and tensor table are where the parser's branches are; whole
# tensors would only make each run slower. A dictionary fuzz/<target without fuzz_>.dict is used
# when there is one.
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 BINARY SECONDS" >&2
  exit 2
fi
bin=$(realpath "$1")
secs=$2
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
corpus="$bin.corpus"
artifacts="$bin.artifacts"
mkdir -p "$corpus" "$artifacts"

name=$(basename "$bin")
DF_FUZZ_WRITE_SEEDS="$corpus" "$bin"
n=0
[ "$name" = fuzz_gguf ] && golden_dirs=("$root/tests/golden" "$root/../shared/golden" /work/shared/golden) || golden_dirs=()
for dir in "${golden_dirs[@]}"; do
  [ -d "$dir" ] || continue
  while IFS= read -r -d '' f; do
    head -c 65536 "$f" > "$corpus/golden_$(basename "$f" .gguf).head"
    n=$((n + 1))
  done < <(find "$dir" -name '*.gguf' -print0)
done
echo "fuzz: $(ls "$corpus" | wc -l) corpus files ($n golden heads), ${secs}s, artifacts in $artifacts/"

dict=()
[ -f "$here/${name#fuzz_}.dict" ] && dict=(-dict="$here/${name#fuzz_}.dict")
"$bin" "$corpus" "${dict[@]}" -max_total_time="$secs" -rss_limit_mb=2048 -max_len=65536 \
  -timeout=25 -print_final_stats=1 -artifact_prefix="$artifacts/"
echo "fuzz: no crash in ${secs}s"
