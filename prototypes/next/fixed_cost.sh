#!/bin/bash
# Next device session, step 1 of NEXT.md's plan: where the fast launch's fixed ~4.4 us goes.
# Run from the repository root of the device copy with a stripped xtask in .device/main
# (see README "The GPU machine"); results under $OUT.
D=.device/main; T0=$(date +%s)
chmod +x $D/xtask
export MMA_SHAPES=10560x5120,17408x5120
V="mma rt=1 cs=8 mt=16 x=shared regs=48"
# How evenly the SMs finish one wave, and what the warps wait on (not sampled: this
# machine's ncu has no pcsamp metrics).
M=sm__cycles_active.max,sm__cycles_active.min,sm__cycles_active.avg,gpc__cycles_elapsed.max,smsp__warps_launched.sum,smsp__issue_active.avg.pct_of_peak_sustained_active
S=smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio,smsp__average_warp_latency_issue_stalled_barrier.ratio,smsp__average_warp_latency_issue_stalled_mio_throttle.ratio,smsp__average_warp_latency_issue_stalled_short_scoreboard.ratio,smsp__average_warp_latency_issue_stalled_math_pipe_throttle.ratio,smsp__average_warp_latency_issue_stalled_wait.ratio,smsp__average_warp_latency_issue_stalled_not_selected.ratio,smsp__average_warp_latency_issue_stalled_dispatch_stall.ratio
for only in 10560x5120:2:1:1mad 17408x5120:2:1:1mad 17408x5120:2:1:3inst; do
  v="$V"; [ "${only##*:}" = 3inst ] && v="mma rt=1 cs=8 mt=16 x=shared_dup"
  MMA_ONLY=$only MMA_VARIANT="$v" timeout 120 ncu --clock-control none --metrics $M,$S -k regex:reduce_mma -s 3 -c 1 \
    $D/xtask bench --family reduce_mma --out /tmp/x.md > $OUT/ncu-$only.txt 2>&1
  echo "$only rc=$? $(( $(date +%s) - T0 )) s"; grep -E "cycles|stalled|issue_active|warps_launched" $OUT/ncu-$only.txt
done
