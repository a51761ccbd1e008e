#!/bin/bash
# Thirtieth session, calls AI and AJ: where the fast 1mad loop's operations run. ncu (one
# launch, raw page) of 17408 x 5120 k 2 L 12 M 1 kernels through `xtask bench --family
# reduce_mma`, one per argument `BUILD:VARIANT` (BUILD a folder under .device holding an
# xtask). Call AI: `base:mma rt=1 cs=8 mt=16 pw xf16` (the winner, build of HEAD) and
# `main:mma rt=1 cs=8 mt=16 pw xf16` (the fp-pack build); call AJ: `base:mma rt=1 cs=8
# mt=16 ops=bf16 pw` and the winner again. Carry [".device"].
T0=$(date +%s)
chmod +x .device/*/xtask
for A in "$@"; do
  B=${A%%:*}; V=${A#*:}; N=$B-$(echo "$V" | tr ' =' '_-')
  MMA_ONLY=17408x5120:2:1:1mad MMA_VARIANT="$V" timeout 200 ncu --clock-control none \
    --section ComputeWorkloadAnalysis --section InstructionStats --section SchedulerStats --section WarpStateStats \
    --page raw -k regex:reduce_mma -s 3 -c 1 .device/$B/xtask bench --family reduce_mma --out /tmp/b.md > "$OUT/ncu-$N.txt" 2>&1
  echo "$A rc=$? $(( $(date +%s) - T0 )) s"
  grep -E "gpu__time_duration.sum|inst_executed_pipe_(alu|fma|fma_type_fp16)\.avg\.pct_of_peak_sustained_active|pipe_fma_cycles_active.avg.pct_of_peak_sustained_active|issue_active.avg.pct|smsp__inst_executed.sum |math_pipe_throttle" "$OUT/ncu-$N.txt"
done
