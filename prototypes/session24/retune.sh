#!/bin/bash
# One device call: re-tune the stale M = 8 and 16 `reduce_mma` keys (M, default 16) of one preset (SHAPE) in the
# shipped table, resuming it (keys already current are kept): batched staging twins
# (`MmaVariant::batch_stage`) are offered there. The trace holds every candidate's time,
# so the plain and batched twins compare in the same run. Carry [".device"].
D=.device/main
chmod +x $D/xtask
exec > >(tee -a "$OUT/log.txt") 2>&1
T0=$(date +%s)
timeout ${TUNE_S:-585} $D/xtask tune --backend cuda --tier fast --family reduce_mma \
  --shape ${SHAPE:?} --l 12,16 --m ${M:-16} --k 2,3,4 --code 1mad,3inst,mcg \
  --budget ${BUDGET:-540s} --out tuning/nvidia-h200.toml --trace "$OUT/trace.tsv" > "$OUT/tune.txt" 2>&1
echo "tune rc=$? ($(( $(date +%s) - T0 )) s)"
grep -E 'left|stopped|budget|error' "$OUT/tune.txt" | tail -5
cp tuning/nvidia-h200.toml "$OUT/table.toml"
