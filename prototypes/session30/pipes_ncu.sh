#!/bin/bash
# Thirtieth session, call AI: which pipe each of the fast 1mad loop's operations runs on.
# ncu (one launch, raw page) of the 17408 x 5120 k 2 L 12 M 1 winner under the build of HEAD
# (.device/base) and under the fp-pack build (.device/main: the pack as an f16x2 add and
# fma), through `xtask bench --family reduce_mma`. Carry [".device"].
T0=$(date +%s)
chmod +x .device/*/xtask
for B in base main; do
  MMA_ONLY=17408x5120:2:1:1mad MMA_VARIANT="mma rt=1 cs=8 mt=16 pw xf16" timeout 200 ncu --clock-control none \
    --section ComputeWorkloadAnalysis --section InstructionStats --section SchedulerStats --section WarpStateStats \
    --page raw -k regex:reduce_mma -s 3 -c 1 .device/$B/xtask bench --family reduce_mma --out /tmp/b-$B.md > "$OUT/ncu-$B.txt" 2>&1
  echo "$B rc=$? $(( $(date +%s) - T0 )) s"
  grep -E "pipe_(fma|fmaheavy|fmalite|fp16|alu|tensor|shared|uniform)|issue_active|inst_executed.sum |gpu__time_duration.sum" "$OUT/ncu-$B.txt" | head -40
done
