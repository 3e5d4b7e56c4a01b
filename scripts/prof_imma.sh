#!/usr/bin/env bash
# ncu profile of the imma matvec on the lent GPU (after scripts/device.sh pack; run there).
set -u
scripts/device.sh run info >/dev/null 2>&1
T=/tmp/dfbin/test_cuda
sec="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats --section SchedulerStats --section InstructionStats --section ComputeWorkloadAnalysis"
met="regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__inst_executed.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_lg.sum"
i=0
for only in "${@:-27B ffn_gate/up}"; do
    DF_BENCH_ONLY="$only" ncu --clock-control none $sec --metrics "$met" -k regex:imma_kernel --launch-skip 3 --launch-count 1 \
        $T --gtest_also_run_disabled_tests --gtest_filter='CudaBench.DISABLED_MatvecBandwidth' > "$OUT/ncu_$i.txt" 2>&1
    echo "== ncu imma_kernel: $only"
    grep -E "stalled_.*ratio" "$OUT/ncu_$i.txt" | sort -k3 -gr | head -n 7 | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//'
    grep -E "Duration|DRAM Throughput|Compute \(SM\)|Registers Per|Achieved Occupancy|Issued Ipc|No Eligible|Warp Cycles Per Issued|L1/TEX Hit|L1/TEX Cache Throughput|bank_conflicts|inst_executed.sum|wavefronts|requests|Grid Size" "$OUT/ncu_$i.txt" | head -n 20
    i=$((i + 1))
done
