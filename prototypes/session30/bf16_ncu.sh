#!/bin/bash
# Thirtieth session, call AJ: where the bf16-operand decode's f32 centring (FADD) and
# pack (F2FP) run: ncu of the 17408 x 5120 k 2 L 12 M 1 bf16-operand twin of the winner
# and of the winner, under the build of HEAD. Carry [".device"].
T0=$(date +%s)
chmod +x .device/base/xtask
for V in "mma rt=1 cs=8 mt=16 ops=bf16 pw" "mma rt=1 cs=8 mt=16 pw xf16"; do
  N=$(echo "$V" | tr ' =' '_-')
  MMA_ONLY=17408x5120:2:1:1mad MMA_VARIANT="$V" timeout 200 ncu --clock-control none \
    --section ComputeWorkloadAnalysis --section InstructionStats --section SchedulerStats --section WarpStateStats \
    --page raw -k regex:reduce_mma -s 3 -c 1 .device/base/xtask bench --family reduce_mma --out /tmp/b.md > "$OUT/ncu-$N.txt" 2>&1
  echo "$V rc=$? $(( $(date +%s) - T0 )) s"
  grep -E "gpu__time_duration.sum|inst_executed_pipe_(alu|fma|fma_type_fp16|fp16)\.avg\.pct_of_peak_sustained_active|pipe_fma_cycles_active.avg.pct_of_peak_sustained_active|issue_active.avg.pct|smsp__inst_executed.sum |math_pipe_throttle" "$OUT/ncu-$N.txt"
done
grep -n "F2FP\|FADD\|HADD2" /dev/null
