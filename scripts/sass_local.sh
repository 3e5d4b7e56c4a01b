#!/usr/bin/env bash
# SASS of one CUDA translation unit on this machine (no GPU, no CUDA 13 disassembler): nvcc 13
# builds its cubin with the flags of build-cuda/compile_commands.json, the ELF header is
# rewritten to the pre-CUDA-12.8 form, and Debian's CUDA 11.8 cuobjdump (non-free package
# nvidia-cuda-toolkit, unpacked, not installed: DF_CUOBJDUMP) disassembles it.
#   scripts/sass_local.sh SOURCE_SUFFIX OUT.sass     e.g. gen/quant_IQ2_XXS.cu /tmp/iq2xxs.sass
# then scripts/sass_mix.py OUT.sass REGEX. Setup once (as root):
#   echo 'deb http://deb.debian.org/debian bookworm non-free' >/etc/apt/sources.list.d/nonfree.list
#   apt-get update && cd /tmp && apt-get download nvidia-cuda-toolkit && dpkg -x nvidia-cuda-toolkit_*.deb /tmp/nvdeb/x
set -euo pipefail
cd "$(dirname "$0")/.."
src=$1 out=$2
dump=${DF_CUOBJDUMP:-/tmp/nvdeb/x/usr/bin/cuobjdump}
[ -x "$dump" ] || { echo "no CUDA 11.8 cuobjdump at $dump (see this script's header)" >&2; exit 2; }
cmd=$(python3 - "$src" <<'PY'
import json, sys
for c in json.load(open("build-cuda/compile_commands.json")):
    if c["file"].endswith(sys.argv[1]):
        print(c["command"].replace(" -c ", " -cubin ").rsplit(" -o ", 1)[0]); break
PY
)
[ -n "$cmd" ] || { echo "no compile command for $src in build-cuda" >&2; exit 2; }
cubin=$(mktemp --suffix=.cubin)
trap 'rm -f "$cubin"' EXIT
(cd build-cuda && $cmd -o "$cubin")
python3 - "$cubin" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
b[8] = 7                                   # EI_ABIVERSION: the old header layout
sm = (struct.unpack_from("<I", b, 0x30)[0] >> 8) & 0xff  # the new e_flags keep the SM in bits 8..15
struct.pack_into("<I", b, 0x30, (sm << 16) | 0x500 | sm)  # old: virtual SM << 16 | 64-bit, unified tex | SM
open(sys.argv[1], "wb").write(b)
PY
"$dump" -sass "$cubin" >"$out"
grep -c "Function :" "$out"
