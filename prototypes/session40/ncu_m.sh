#!/bin/bash
# ncu of the exact tier's winners at M 1 / 4 / 8 (17408 x 5120, k 3, 1mad, L 12), each
# winner's first launch (its verification run), for the issue's "what limits it,
# measured" of the M-ratio goals.
# Carry [".device"].
. prototypes/device.sh
M=gpu__time_duration.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_fmaheavy_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,l1tex__throughput.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__cycles_active.avg,sm__cycles_elapsed.avg,smsp__warps_active.avg.per_cycle_active,smsp__warps_eligible.avg.per_cycle_active,launch__registers_per_thread,launch__block_size,launch__grid_size,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio
# The table's winners at M 1 / 4 / 8 by symbol (`cargo run --example reduce_unit -- 17408
# 5120 3 1mad 12 M RPG RPS 0 1 0 0 STREAM 0` prints each unit), one bench per M so that
# `-c 1` takes each winner's first launch.
for MK in 1:reduce_9008988242418736 4:reduce_9cd305b8a95ee706 8:reduce_9b092190288aecfb; do
  TRELLIS_BENCH_PRESETS=qwen3-14b TRELLIS_BENCH_SHAPES=17408x5120 TRELLIS_BENCH_K=3 TRELLIS_BENCH_M=${MK%%:*} \
    timeout 150 ncu --clock-control none --metrics $M -k "regex:^${MK#*:}\$" -c 1 \
    $D/xtask bench --table tuning/nvidia-h200.toml --out "$OUT/bench-m${MK%%:*}.md" > "$OUT/ncu-m${MK%%:*}.txt" 2> "$OUT/bench-m${MK%%:*}.err"
  echo "ncu M ${MK%%:*} rc=$?"; grep -E "inst_executed.sum|issue_active|registers|duration" "$OUT/ncu-m${MK%%:*}.txt"
done
