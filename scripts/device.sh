#!/usr/bin/env bash
# CUDA runs on the lent GPU machine (the device tool), built here and carried there.
#
#   scripts/device.sh pack            here: build test_cuda + diskformer (sm_90) and pack them,
#                                     with the extra golden models, into .carry/ (ignored)
#   scripts/device.sh variant PATCH NAME [tests]
#                                     here: build main with PATCH applied (then reverted) and add its
#                                     diskformer (and test_cuda with "tests") to .carry/variants.tar.xz
#                                     as NAME/; `run` unpacks it to /tmp/dfvar, for A/B runs with
#                                     scripts/ab_decode.sh PRESET N "-" "BIN=/tmp/dfvar/NAME/diskformer"
#                                     (DF_VARIANTS_DROP="A B" drops older variants from the file)
#   scripts/device.sh run [PHASES]    there: unpack and run phases (default: all)
#        phases: info tests sanitize golden eval bench-kernels profile bench-models step-profile prefill-profile
#                kernel-profile trace (the decode timeline; pack with DF_PACK_TRACE=1)
#                imma-profile (ncu of the 27B's decode imma kernels with source-level stall sampling:
#                ssm_out, the gate/up pair, the q/k/v + z pair; IMMA_PROFILE="regex:skip ..." overrides)
#                serve (the HTTP server on CUDA, checked by scripts/serve_check.py)
#                spec (speculative decoding by prompt lookup: same text, rate with drafts 0 / 3 / 7)
#                sampling (sampled answers on the 4B layout: device top-k vs the whole row copied)
#                cli (run's decode rate by answer length against bench: a fixed cost per answer)
#                dflash (a random 4B-shaped DFlash drafter: ms per draft and per round of 8)
#                short-prefill (prompts of 12..100 tokens, the GEMM's narrow token tiles on and off)
#                parallel (continuous batching: 2 / 4 / 8 generations at once, decode tok/s in all,
#                per-sequence ops in one launch over all lanes and one per lane: DF_CUDA_LANES=1 / 0)
#                (comma separated; step-profile: ncu time of each kernel of one decode step;
#                prefill-profile: of a 2048-token (4B) / 1024-token (27B) prefill, default chunk;
#                PREFILL_PROFILE="preset:tokens ..." overrides)
#
# The device has CUDA 13 but no build dependencies (fmt, CLI11, gtest, ...): binaries are built
# on this machine and carried (about 20 MB compressed). Logs go to $OUT (the device tool fetches it).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

pack() {
    set -e
    cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DDF_CUDA=ON -DDF_WERROR=ON >/dev/null
    cmake --build build-cuda -j2 --target test_cuda diskformer
    mkdir -p .carry/golden
    local tmp
    tmp=$(mktemp -d)
    cp build-cuda/tests/test_cuda build-cuda/app/diskformer "$tmp/"
    strip "$tmp/test_cuda" "$tmp/diskformer"
    rm -rf .carry/golden/*
    local extra=""
    if [ "${DF_PACK_TRACE:-0}" = 1 ]; then  # the timeline build too (phase trace)
        cmake -S . -B build-trace -G Ninja -DCMAKE_BUILD_TYPE=Release -DDF_CUDA=ON -DDF_WERROR=ON -DDF_CUDA_TRACE=ON >/dev/null
        cmake --build build-trace -j2 --target diskformer
        cp build-trace/app/diskformer "$tmp/diskformer-trace"
        strip "$tmp/diskformer-trace"
        extra=diskformer-trace
    fi
    # Shared libraries the device's image lacks (the server's cpp-httplib and what it needs);
    # `run` puts them on LD_LIBRARY_PATH.
    mkdir -p "$tmp/lib"
    for l in libcpp-httplib.so.0.11 libbrotlidec.so.1 libbrotlienc.so.1 libbrotlicommon.so.1; do
        cp -L "/usr/lib/x86_64-linux-gnu/$l" "$tmp/lib/"
    done
    # One long-window stream: the two binaries share most of their code (~20 MB instead of ~31).
    tar cf - -C "$tmp" test_cuda diskformer lib $extra | xz -9e --lzma2=dict=256MiB -T1 >.carry/bins.tar.xz
    rm -rf "$tmp"
    # Golden models beyond the compact copy in tests/golden (only the f32-twin references); the
    # device tool carries at most 64 MiB with the working tree, so not q3_4L_q8_0 (Q8_0 runs in
    # the kernel tests and in q3_4L_kmix).
    local full=../shared/golden/models
    if [ -d "$full" ]; then
        for m in q35_8L_q4km q35_2L_f16_bf16; do
            cp "$full/$m.gguf" "$full/$m.logits_f32w.f32" "$full/$m.greedy_f32w.json" \
               "$full/$m.greedy_f32w_logits.f32" .carry/golden/
        done
    fi
    du -sh .carry
}

variant() {
    set -e
    local patch=$1 name=$2 with_tests=${3:-}
    [ -f "$patch" ] && [ -n "$name" ] || { echo "usage: scripts/device.sh variant PATCH NAME [tests]" >&2; exit 2; }
    git apply --check "$patch"
    git apply "$patch"
    trap "git apply -R '$patch'" EXIT  # main's sources back whatever happens (expanded now: a local)
    local targets=(diskformer)
    [ "$with_tests" = tests ] && targets+=(test_cuda)
    cmake --build build-cuda -j2 --target "${targets[@]}"
    local tmp
    tmp=$(mktemp -d)
    [ -f .carry/variants.tar.xz ] && tar xJf .carry/variants.tar.xz -C "$tmp"
    rm -rf "${tmp:?}/$name"
    for d in ${DF_VARIANTS_DROP:-}; do rm -rf "${tmp:?}/$d"; done  # variants no longer needed
    mkdir -p "$tmp/$name"
    cp build-cuda/app/diskformer "$tmp/$name/"
    [ "$with_tests" = tests ] && cp build-cuda/tests/test_cuda "$tmp/$name/"
    strip "$tmp/$name"/*
    # One long-window stream: a variant's binary is nearly its siblings', so each one after the
    # first costs ~0.2 MB instead of ~12 (the carry's 64 MiB hold bins + several variants).
    # Written aside and moved in at the end: a device call made while this packs (minutes) still
    # carries the previous, whole file.
    tar cf - -C "$tmp" . | xz -9e --lzma2=dict=256MiB -T1 >"$tmp.xz"
    mv "$tmp.xz" .carry/variants.tar.xz
    rm -rf "$tmp"
    tar tJf .carry/variants.tar.xz | grep -v '/$'
    du -h .carry/variants.tar.xz
}

# One kernel launch under ncu with the sections the profile phases read (plus $5) and the
# stall-reason and pipe metrics (plus $6, a ",..." list): ncu_launch FILE REGEX SKIP COUNT
# EXTRA_SECTIONS EXTRA_METRICS COMMAND...
ncu_launch() {
    local file=$1 k=$2 skip=$3 cnt=$4 sec=$5 met=$6
    shift 6
    ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
        --section Occupancy --section LaunchStats --section SchedulerStats --section ComputeWorkloadAnalysis \
        --section InstructionStats $sec \
        --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__pipe_.*_cycles_active\.avg\.pct_of_peak_sustained_active$met" \
        -k "regex:$k" --launch-skip "$skip" --launch-count "$cnt" "$@" >"$file" 2>&1
}

# What ncu_launch's report says first: the top stall reasons and busiest pipes, then the headline lines.
ncu_summary() {
    grep -E "stalled_.*ratio +(inst +)?[0-9.]*[1-9]" "$1" | sort -k3 -gr | head -n 8
    grep -E "pipe_.*pct.* [1-9][0-9]*\.[0-9]+$" "$1" | sort -k3 -gr | head -n 8
    grep -E "Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Registers Per|Achieved Occupancy|Theoretical Occupancy|Issued Ipc|No Eligible|Warp Cycles Per Issued|inst_executed|L1/TEX Hit|L2 Hit|Shared|Bank" "$1" | head -n 30
}

run() {
    local phases=${1:-info,tests,golden,eval,bench-kernels,bench-models}
    local out=${OUT:-/tmp/df-out}
    mkdir -p "$out" /tmp/dfbin
    # Without bins.tar.xz the binaries already in /tmp/dfbin run (e.g. a variant's, copied there).
    [ -f .carry/bins.tar.xz ] && tar xJf .carry/bins.tar.xz -C /tmp/dfbin
    export LD_LIBRARY_PATH=/tmp/dfbin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    if [ -f .carry/variants.tar.xz ]; then mkdir -p /tmp/dfvar && tar xJf .carry/variants.tar.xz -C /tmp/dfvar; fi
    # The binaries look for golden data at the paths of the build machine.
    mkdir -p /work /work/shared/golden/models
    [ -e /work/main ] || ln -s "$ROOT" /work/main
    cp -r tests/golden/quant /work/shared/golden/
    cp tests/golden/models/* /work/shared/golden/models/
    cp .carry/golden/* /work/shared/golden/models/ 2>/dev/null || true
    # The tests call whatever lies there the FULL set: say which models it holds.
    echo "golden models here: $(cd /work/shared/golden/models && ls -- *.gguf | sed 's/\.gguf$//' | tr '\n' ' ')"
    local T=/tmp/dfbin/test_cuda D=/tmp/dfbin/diskformer
    case ",$phases," in *,info,*)
        nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,memory.total,power.limit --format=csv
        ;; esac
    case ",$phases," in *,tests,*)
        echo "== CUDA kernel tests"
        $T --gtest_brief=1 --gtest_filter='-CudaModel.*' 2>&1 | tee "$out/tests.log" | tail -n 40
        ;; esac
    case ",$phases," in *,sanitize,*)
        # The kernel tests (55 s under memcheck, session 53). Not the model tests: with them the
        # run did not end in the ~5 minutes a call had left, and CudaModel.BatchedStepsEqualLoneSteps
        # (threads' steps must meet in a pass: timing) saw none on 5 of its 6 models there.
        echo "== compute-sanitizer memcheck over the CUDA kernel tests (about a minute)"
        "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer" --error-exitcode 1 --print-limit 10 $T --gtest_brief=1 \
            --gtest_filter='-CudaModel.*:CudaBench.*' \
            2>&1 | tee "$out/sanitize.log" | grep -vE "^.cuda golden" | tail -n 15
        ;; esac
    case ",$phases," in *,golden,*)
        echo "== golden models on CUDA (kv f32)"
        $T --gtest_filter='CudaModel.*' 2>&1 | tee "$out/golden.log" | grep -E "cuda golden|OK|FAILED|Failure|error|Expected|Which" | head -n 60
        ;; esac
    case ",$phases," in *,eval,*)
        echo "== golden models through diskformer eval (--backend cuda --kv-type f32)"
        local g=/work/shared/golden/models m
        for f in "$g"/*.logits_f32w.f32; do
            m=$(basename "$f" .logits_f32w.f32)
            $D eval -m "$g/$m.gguf" --backend cuda --kv-type f32 --tokens "$g/$m.greedy_f32w.json" \
                --logits-out "/tmp/$m.eval.f32" --greedy 64 --ids-out "/tmp/$m.ids.json" 2>>"$out/eval.log"
            python3 - "$g" "$m" <<'PY' | tee -a "$out/eval.log"
import json, sys
import numpy as np
g, m = sys.argv[1], sys.argv[2]
ref = np.fromfile(f"{g}/{m}.logits_f32w.f32", dtype=np.float32).reshape(100, -1).astype(np.float64)
got = np.fromfile(f"/tmp/{m}.eval.f32", dtype=np.float32).reshape(100, -1).astype(np.float64)
nmse = ((got - ref) ** 2).sum(1) / (ref ** 2).sum(1)
top1 = int((got.argmax(1) == ref.argmax(1)).sum())
want = json.load(open(f"{g}/{m}.greedy_f32w.json"))["generated"]
ids = json.load(open(f"/tmp/{m}.ids.json"))
same = next((i for i, (a, b) in enumerate(zip(ids, want)) if a != b), len(want))
print(f"{m:18s} prompt NMSE max {nmse.max():.2e}  max|dlogit| {np.abs(got - ref).max():.2e}  top-1 {top1}/100  greedy {same}/{len(want)}")
PY
        done
        ;; esac
    case ",$phases," in *,serve,*)
        local p srv
        for p in ${SERVE_PRESETS:-qwen3-4b-q8_0 saluki-27b-iq2mix}; do
            echo "== diskformer serve on CUDA ($p, 2 slots): scripts/serve_check.py"
            [ -f "/tmp/$p.gguf" ] || $D synth --preset "$p" --out "/tmp/$p.gguf" | tail -n 1
            $D serve -m "/tmp/$p.gguf" --backend cuda --slots 2 --port 18080 2>"$out/serve-$p.log" &
            srv=$!
            python3 scripts/serve_check.py http://127.0.0.1:18080 128 2>&1 | tee "$out/serve_check-$p.log"
            kill -TERM $srv
            wait $srv
            echo "serve exited with $? (0: a clean stop)"
            tail -n 12 "$out/serve-$p.log"
        done
        ;; esac
    case ",$phases," in *,spec,*)
        # Random weights fall into loops: prompt lookup drafts them well (a best case, not a forecast).
        local p d
        for p in ${SPEC_PRESETS:-qwen3-4b-q8_0 saluki-27b-iq2mix}; do
            echo "== speculative decoding by prompt lookup on CUDA ($p): the same text, the rate"
            [ -f "/tmp/$p.gguf" ] || $D synth --preset "$p" --out "/tmp/$p.gguf" | tail -n 1
            $D bench -m "/tmp/$p.gguf" --backend cuda -p 512 -n 64 --reps 3 --bw 4600 --verify 2,4,8 2>&1 |
                grep -E "^(decode|verify)" | tee -a "$out/spec-bench.log"
            # Greedy, then sampled (the same seed: the same text with drafts or without).
            local how
            for how in "--temp 0" "--temp 0.7 --top-k 3 --seed 5"; do
                for d in 0 3 7; do
                    $D run -m "/tmp/$p.gguf" --backend cuda --no-think -p "one two three, one two three, one two" -n 512 \
                        $how --draft $d >"/tmp/spec-$d.txt" 2>"$out/spec-$p-$d.log"
                    echo "$how, draft $d: $(tail -n 1 "$out/spec-$p-$d.log")"
                    cmp -s /tmp/spec-0.txt "/tmp/spec-$d.txt" && echo "  same text as without drafts" || echo "  TEXT DIFFERS"
                done
            done
        done
        ;; esac
    case ",$phases," in *,sampling,*)
        # Sampled answers: the likeliest tokens selected on the device (Session::top_logits)
        # against the whole row copied to the host (DF_SAMPLE_WHOLE_ROW=1); the same text.
        local p=qwen3-4b-q8_0 how w
        echo "== sampled decoding on CUDA ($p): device top-k vs the whole row"
        [ -f "/tmp/$p.gguf" ] || $D synth --preset "$p" --out "/tmp/$p.gguf" | tail -n 1
        for how in "--temp 0" "--temp 0.8" "--temp 0.8 --top-k 0 --top-p 0.9" "--temp 0.8 --top-k 0 --top-p 0.2 --min-p 0" \
                   "--temp 0.8 --top-k 0 --min-p 0.3" "--temp 0.8 --repeat-penalty 1.1 --presence-penalty 0.3" \
                   "--temp 0 --repeat-penalty 1.2"; do
            for w in 0 1; do
                DF_SAMPLE_WHOLE_ROW=$w $D run -m "/tmp/$p.gguf" --backend cuda --no-think -p "Tell me a story about a dragon." \
                    -n 512 $how --seed 5 >"/tmp/samp-$w.txt" 2>"$out/samp-$w.log"
                echo "$how, whole row $w: $(tail -n 1 "$out/samp-$w.log")"
            done
            cmp -s /tmp/samp-0.txt /tmp/samp-1.txt && echo "  same text" || echo "  TEXT DIFFERS"
        done
        ;; esac
    case ",$phases," in *,cli,*)
        # What `run` reports against bench: greedy answers of several lengths from a short prompt
        # (a fixed cost per answer, e.g. recording the decode graph, shows as the short ones' deficit).
        local p=qwen3-4b-q8_0 n
        echo "== run's decode rate by answer length ($p) against bench"
        [ -f "/tmp/$p.gguf" ] || $D synth --preset "$p" --out "/tmp/$p.gguf" | tail -n 1
        for n in 3 32 512 2048 512; do
            $D run -m "/tmp/$p.gguf" --backend cuda --no-think -p "Tell me a story about a dragon." -n $n \
                >/dev/null 2>"$out/cli-$n.log"
            echo "-n $n: $(tail -n 1 "$out/cli-$n.log")"
        done
        $D bench -m "/tmp/$p.gguf" --backend cuda -p 16 -n 512 --reps 3 --bw 4600 2>&1 | grep -A1 -E "^decode" | tee "$out/cli-bench.log"
        ;; esac
    case ",$phases," in *,dflash,*)
        # A random DFlash drafter of Qwen3-4B-DFlash-b16's shapes (5 layers, bf16) beside the 4B
        # layout: what a draft and a round (draft + verify of 8) cost, i.e. the acceptance it needs.
        local p=qwen3-4b-q8_0
        echo "== DFlash block drafter on CUDA ($p)"
        [ -f "/tmp/$p.gguf" ] || $D synth --preset "$p" --out "/tmp/$p.gguf" | tail -n 1
        [ -d /tmp/dflash-4b ] || $D synth --dflash-for "/tmp/$p.gguf" --out /tmp/dflash-4b
        $D bench -m "/tmp/$p.gguf" --backend cuda -p 512 -n 64 --reps 3 --bw 4600 --verify 8 --dflash /tmp/dflash-4b 2>&1 |
            grep -E "^(decode|verify|dflash)" | tee "$out/dflash-bench.log"
        ;; esac
    case ",$phases," in *,bench-kernels,*)
        echo "== kernel benchmarks"
        $T --gtest_also_run_disabled_tests --gtest_filter='CudaBench.*' 2>&1 | tee "$out/bench_kernels.log" | grep -vE "^\[ (RUN|  +OK) "
        ;; esac
    case ",$phases," in *,profile,*)
        echo "== ncu profiles (kernel, shape)"
        local sec="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats --section SchedulerStats --section ComputeWorkloadAnalysis"
        local prof=(
            "matvec_kernel|2|CudaBench.DISABLED_MatvecBandwidth|27B ffn_gate/up"
            "matvec_kernel|2|CudaBench.DISABLED_MatvecBandwidth|Q4_0"
            "gemm_kernel|2|CudaBench.DISABLED_GemmThroughput|"
        )
        local i=0
        for p in "${prof[@]}"; do
            IFS='|' read -r k skip filt only <<<"$p"
            DF_BENCH_ONLY="$only" ncu --clock-control none $sec --section InstructionStats \
                --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" -k "regex:$k" --launch-skip "$skip" --launch-count 1 \
                $T --gtest_also_run_disabled_tests --gtest_filter="$filt" > "$out/ncu_$i.txt" 2>&1
            grep -E "stalled_.*ratio +(inst +)?[0-9.]*[1-9]" "$out/ncu_$i.txt" | sort -k3 -gr | head -n 8
            grep -E "Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Registers Per|Achieved Occupancy|Theoretical Occupancy|Issued Ipc|No Eligible|Stall|Warp Cycles Per Issued|L1/TEX Hit|L2 Hit|One or More|Executed Ipc" "$out/ncu_$i.txt" | head -n 30
            i=$((i + 1))
        done
        ;; esac
    case ",$phases," in *,step-profile,*)
        echo "== one decode step, kernel by kernel (ncu, serialized: the sum excludes launch gaps)"
        echo '[1, 2, 3, 4, 5, 6, 7, 8]' > /tmp/step_tokens.json
        for p in qwen3-4b-q8_0 saluki-27b-iq2mix; do
            [ -f "/tmp/$p.gguf" ] || $D synth --preset "$p" --out "/tmp/$p.gguf" | tail -n 1
            ncu --metrics gpu__time_duration.sum --csv $D eval -m "/tmp/$p.gguf" --backend cuda \
                --tokens /tmp/step_tokens.json --greedy 3 --ids-out /tmp/step_ids.json > "$out/step_$p.csv" 2>/dev/null
            python3 scripts/step_profile.py "$out/step_$p.csv" | tee "$out/step_$p.txt"
        done
        ;; esac
    case ",$phases," in *,prefill-profile,*)
        echo "== prefill, kernel by kernel (ncu, serialized; a warm-up pass and one measured pass)"
        for pp in ${PREFILL_PROFILE:-qwen3-4b-q8_0:2048 saluki-27b-iq2mix:1024}; do
            local p=${pp%%:*} n=${pp##*:}
            [ -f "/tmp/$p.gguf" ] || $D synth --preset "$p" --out "/tmp/$p.gguf" | tail -n 1
            ncu --metrics gpu__time_duration.sum --csv $D bench -m "/tmp/$p.gguf" --backend cuda -p "$n" -n 1 \
                --reps 1 > "$out/prefill_$p.csv" 2>/dev/null
            python3 scripts/step_profile.py --all "$out/prefill_$p.csv" | head -n 25 | tee "$out/prefill_$p.txt"
        done
        ;; esac
    case ",$phases," in *,kernel-profile,*)
        # One launch of a kernel inside a real prefill, with ncu's sections
        # (KERNEL_PROFILE="preset:tokens:kernel-regex:launches-to-skip[:launches] ...").
        echo "== ncu sections of one kernel launch in a prefill"
        local i=0 kp
        for kp in ${KERNEL_PROFILE:-qwen3-4b-q8_0:4096:attn_prefill:130}; do
            IFS=':' read -r p n k skip cnt <<<"$kp"
            [ -f "/tmp/$p.gguf" ] || $D synth --preset "$p" --out "/tmp/$p.gguf" | tail -n 1
            ncu_launch "$out/kprof_$i.txt" "$k" "$skip" "${cnt:-1}" "" \
                ",lts__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum.per_second,lts__t_sectors_srcunit_tex.sum" \
                $D bench -m "/tmp/$p.gguf" --backend cuda -p "$n" -n 1 --reps 1
            echo "-- $kp"
            ncu_summary "$out/kprof_$i.txt"
            i=$((i + 1))
        done
        ;; esac
    case ",$phases," in *,imma-profile,*)
        # A one-token prompt runs the decode kernels: launch 0 of imma_kernel should be layer 0's
        # ssm_out (IQ2_S), launch 1 its gate/up pair (IQ2_XXS), imma_two_kernel's first the q/k/v +
        # z pair (each result line names the kernel's instantiation). First run in session 54.
        local p=saluki-27b-iq2mix i=0 kp k skip
        echo "== ncu of the 27B's decode imma kernels (sections, stall sampling by SASS line)"
        [ -f "/tmp/$p.gguf" ] || $D synth --preset "$p" --out "/tmp/$p.gguf" | tail -n 1
        for kp in ${IMMA_PROFILE:-(^|[^_])imma_kernel:0 (^|[^_])imma_kernel:1 imma_two_kernel:0}; do
            IFS=':' read -r k skip <<<"$kp"
            ncu_launch "$out/imma_prof_$i.txt" "$k" "$skip" 1 "--section SourceCounters" ",smsp__inst_executed.sum" \
                $D bench -m "/tmp/$p.gguf" --backend cuda -p 1 -n 1 --reps 1
            echo "-- $kp: $(grep -m1 -oE 'imma[a-z_]*kernel<[^(]*' "$out/imma_prof_$i.txt")"
            ncu_summary "$out/imma_prof_$i.txt"
            i=$((i + 1))
        done
        ;; esac
    case ",$phases," in *,trace,*)
        # One replayed decode step per preset, kernel by kernel (needs DF_PACK_TRACE=1 at pack).
        echo "== decode timeline (scripts/trace_step.py)"
        for p in qwen3-4b-q8_0 saluki-27b-iq2mix; do
            [ -f "/tmp/$p.gguf" ] || $D synth --preset "$p" --out "/tmp/$p.gguf" | tail -n 2
            DF_CUDA_TRACE="/tmp/$p.trace" /tmp/dfbin/diskformer-trace bench -m "/tmp/$p.gguf" --backend cuda -p 512 -n 16 \
                --reps 1 --bw 4600 2>&1 | grep -E '^decode'
            python3 scripts/trace_step.py "/tmp/$p.trace" --all > "$out/trace_$p.txt"
            grep -A 30 '^step:' "$out/trace_$p.txt"
        done
        ;; esac
    case ",$phases," in *,bench-models,*)
        echo "== synthetic presets"
        for p in qwen3-4b-q8_0 saluki-27b-iq2mix; do
            [ -f "/tmp/$p.gguf" ] || $D synth --preset "$p" --out "/tmp/$p.gguf" | tail -n 2
            $D bench -m "/tmp/$p.gguf" --backend cuda -p 512,4096 -n 128 --reps 3 --bw 4600 2>&1 | tee "$out/bench_$p.log"
        done
        ;; esac
    case ",$phases," in *,short-prefill,*)
        # Short prompts (a chat turn, a DFlash block): the wgmma GEMM's 16- and 64-token blocks
        # against 256-token blocks for every T (DF_CUDA_QGEMM_NARROW=0).
        echo "== short prefills: narrow token tiles vs 256-token tiles"
        local nar
        for p in qwen3-4b-q8_0 saluki-27b-iq2mix; do
            [ -f "/tmp/$p.gguf" ] || $D synth --preset "$p" --out "/tmp/$p.gguf" | tail -n 2
            for nar in 1 0; do
                echo "-- $p DF_CUDA_QGEMM_NARROW=$nar"
                DF_CUDA_QGEMM_NARROW=$nar $D bench -m "/tmp/$p.gguf" --backend cuda -p 12,16,40,64,100 -n 16 --reps 3 2>&1 |
                    grep -E "^prefill" | tee -a "$out/short_prefill.log"
            done
        done
        ;; esac
    case ",$phases," in *,parallel,*)
        # Continuous batching: N greedy generations at once after 512-token prompts, their steps
        # in shared passes, against one alone (graph replay).
        echo "== parallel generations (continuous batching)"
        for p in qwen3-4b-q8_0 saluki-27b-iq2mix; do
            [ -f "/tmp/$p.gguf" ] || $D synth --preset "$p" --out "/tmp/$p.gguf" | tail -n 2
            for l in 1 0; do
                echo "-- $p DF_CUDA_LANES=$l"
                DF_CUDA_LANES=$l $D bench -m "/tmp/$p.gguf" --backend cuda -p 512 -n 64 --reps 3 --parallel 2,4,8 2>&1 |
                    grep -E "^(decode|parallel)" | tee -a "$out/parallel.log"
            done
        done
        ;; esac
}

case "${1:-}" in
    pack) pack ;;
    variant) variant "${2:-}" "${3:-}" "${4:-}" ;;
    run) run "${2:-}" ;;
    *) echo "usage: scripts/device.sh pack | variant PATCH NAME [tests] | run [phases]" >&2; exit 2 ;;
esac
