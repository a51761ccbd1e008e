#!/bin/bash
# Next device session (prototypes/results/m16-sass.md): what the fast M = 16 winners wait
# on, against M = 1 of the same key. One launch of the table's `reduce_mma` winner per key
# under ncu, through the bench (the shipped table). Carry [".device"].
D=.device/main; T0=$(date +%s)
chmod +x $D/xtask
exec > >(tee -a "$OUT/log.txt") 2>&1
# Throughput (DRAM, L2, L1, shared), instructions and issue, per-SM activity, stalls.
T=gpu__time_duration.sum,dram__bytes_read.sum,lts__t_bytes.sum,l1tex__t_bytes.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,lts__t_sectors_srcunit_tex_op_read.sum
I=smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__cycles_active.avg,sm__cycles_active.min,gpc__cycles_elapsed.max,sm__warps_active.avg.pct_of_peak_sustained_active
P=sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,lts__t_sectors.avg.pct_of_peak_sustained_elapsed,l1tex__throughput.avg.pct_of_peak_sustained_active
S=smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio,smsp__average_warp_latency_issue_stalled_barrier.ratio,smsp__average_warp_latency_issue_stalled_mio_throttle.ratio,smsp__average_warp_latency_issue_stalled_short_scoreboard.ratio,smsp__average_warp_latency_issue_stalled_math_pipe_throttle.ratio,smsp__average_warp_latency_issue_stalled_lg_throttle.ratio,smsp__average_warp_latency_issue_stalled_membar.ratio,smsp__average_warp_latency_issue_stalled_not_selected.ratio
for key in 17408x5120:4:1 17408x5120:4:16 17408x5120:2:1 17408x5120:2:16; do
  IFS=: read shape k m <<< "$key"
  TRELLIS_BENCH_PRESETS=qwen3-14b TRELLIS_BENCH_SHAPES=$shape TRELLIS_BENCH_K=$k TRELLIS_BENCH_M=$m \
    timeout 150 ncu --clock-control none --metrics $T,$I,$P,$S -k regex:reduce_mma -s 5 -c 1 \
    $D/xtask bench --out /tmp/b.md > "$OUT/ncu-$shape-k$k-m$m.txt" 2>&1
  echo "$key rc=$? $(( $(date +%s) - T0 )) s"
  grep -E "duration|bytes|inst_executed|issue_active|cycles_active|pct|stalled" "$OUT/ncu-$shape-k$k-m$m.txt" | head -40
done
