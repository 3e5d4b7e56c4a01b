#!/usr/bin/env bash
# A/B decode runs on the device, variants alternating within one lease (clocks and neighbours
# drift between leases). Run after `scripts/device.sh run` unpacked the binaries:
#   scripts/ab_decode.sh PRESET ROUNDS "ENV=VALUE ..." "ENV=VALUE ..." ...
# ("-" for no variables; BIN=PATH runs another diskformer binary, e.g. a baseline build unpacked
# beside /tmp/dfbin; a value with spaces is quoted inside the argument, as in the shell:
# "DF_X='a b' BIN=/tmp/dfvar/x/diskformer"). Prints one decode tok/s line per variant and round.
set -uo pipefail
p=$1 rounds=$2
shift 2
D=/tmp/dfbin/diskformer
export LD_LIBRARY_PATH=/tmp/dfbin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[ -f "/tmp/$p.gguf" ] || $D synth --preset "$p" --out "/tmp/$p.gguf" | tail -n 1
for ((r = 0; r < rounds; ++r)); do
    for v in "$@"; do
        vars=()
        [ "$v" = "-" ] || eval "vars=($v)"  # the shell's own word splitting and quotes
        bin=$D
        for i in "${!vars[@]}"; do
            case ${vars[$i]} in BIN=*) bin=${vars[$i]#BIN=}; unset "vars[$i]" ;; esac
        done
        tps=$(env "${vars[@]}" "$bin" bench -m "/tmp/$p.gguf" --backend cuda -p 512 -n 64 --reps 2 --bw 4600 2>&1 |
            awk '/^decode/ {print $4, $6, $7}')
        echo "$p round $r [$v]: decode tok/s $tps"
    done
done
