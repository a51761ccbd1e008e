#!/bin/bash
# What 3inst at M = 16 waits on (17408 x 5120, k 2, L 12): the table's M 16 winner
# (8 splits, duplicated x staged past 48 KB), its plain-staged twin, and M 1's winner,
# one launch each under ncu through `xtask bench --family reduce_mma`. Carry [".device"].
D=.device/main; T0=$(date +%s)
chmod +x $D/xtask
exec > >(tee -a "$OUT/log.txt") 2>&1
T=gpu__time_duration.sum,dram__bytes_read.sum,lts__t_bytes.sum,l1tex__t_bytes.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum
I=smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__cycles_active.avg,gpc__cycles_elapsed.max,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__occupancy_limit_shared_mem,launch__occupancy_limit_registers
P=sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,l1tex__throughput.avg.pct_of_peak_sustained_active
S=smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio,smsp__average_warp_latency_issue_stalled_barrier.ratio,smsp__average_warp_latency_issue_stalled_mio_throttle.ratio,smsp__average_warp_latency_issue_stalled_short_scoreboard.ratio,smsp__average_warp_latency_issue_stalled_math_pipe_throttle.ratio,smsp__average_warp_latency_issue_stalled_membar.ratio,smsp__average_warp_latency_issue_stalled_not_selected.ratio,smsp__average_warp_latency_issue_stalled_wait.ratio
run() {  # name, problem, variant
  MMA_ONLY=$2 MMA_VARIANT="$3" timeout 170 ncu --clock-control none --metrics $T,$I,$P,$S -k regex:reduce_mma -s 3 -c 1 \
    $D/xtask bench --family reduce_mma --out "$OUT/bench-$1.md" > "$OUT/ncu-$1.txt" 2>&1
  echo "$1 rc=$? $(( $(date +%s) - T0 )) s"
  grep -E "duration|bytes|inst_executed|issue_active|cycles|pct|stalled|registers|occupancy|conflicts" "$OUT/ncu-$1.txt" | head -40
}
run m16-dup 17408x5120:2:16:3inst "mma rt=8 cs=1 mt=16 x=shared_dup ks=8 regs=64 xf16 bs optin"
run m1-dup 17408x5120:2:1:3inst "mma rt=1 cs=8 mt=16 x=shared_dup xf16"
run m16-plain 17408x5120:2:16:3inst "mma rt=8 cs=1 mt=16 x=shared ks=8 regs=64 xf16 bs"
