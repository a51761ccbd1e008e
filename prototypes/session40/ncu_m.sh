#!/bin/bash
# ncu of the exact tier at M 1 / 4 / 8 (17408 x 5120, k 3, 1mad, L 12): the table's
# winners and the bench's other exact candidates, each kernel's first launch (its
# verification run), for the issue's "what limits it, measured" of the M-ratio goals.
# Kernels are listed in launch order: per M, the table's choice first, then the seed's
# structure, then the x-in-registers candidates (`xtask/src/bench.rs`, exact_reduce_row).
# Carry [".device"].
D=.device/main
[ -f .device/bins.txz ] && tar xJf .device/bins.txz -C .device
chmod +x $D/*
exec > >(tee -a "$OUT/log.txt") 2>&1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,driver_version --format=csv,noheader
M=gpu__time_duration.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_fmaheavy_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,l1tex__throughput.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__cycles_active.avg,sm__cycles_elapsed.avg,smsp__warps_active.avg.per_cycle_active,smsp__warps_eligible.avg.per_cycle_active,launch__registers_per_thread,launch__block_size,launch__grid_size,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio
TRELLIS_BENCH_PRESETS=qwen3-14b TRELLIS_BENCH_SHAPES=17408x5120 TRELLIS_BENCH_K=3 TRELLIS_BENCH_M=${NCU_M:-1,4,8} \
  timeout ${NCU_S:-420} ncu --clock-control none --metrics $M --kernel-id '::regex:^reduce_[0-9]+$:1' \
  $D/xtask bench --table tuning/nvidia-h200.toml --out "$OUT/bench.md" > "$OUT/ncu.txt" 2> "$OUT/bench.err"
echo "ncu rc=$?"
grep -cE "^\s+reduce_[0-9]+" "$OUT/ncu.txt"
grep -E "reduce .*M[0-9] exact|best registers" "$OUT/bench.err" | head -20
