#!/bin/bash
# One device call: re-tune the stale fast keys of one preset (SHAPE) in the shipped
# table, resuming it (keys already current are kept): gate_up_mma (host-f16 x offered)
# and reduce_mma (k_split = 32 offered up to M = 4 where tiles are few). Carry [".device"].
D=.device/main
chmod +x $D/xtask
exec > >(tee -a "$OUT/log.txt") 2>&1
T0=$(date +%s)
timeout ${TUNE_S:-585} $D/xtask tune --backend cuda --tier fast --family gate_up_mma,reduce_mma \
  --shape ${SHAPE:?} --l 12,16 --m 1,2,4,8,16 --k 2,3,4 --code 1mad,3inst,mcg \
  --budget ${BUDGET:-540s} --out tuning/nvidia-h200.toml --trace "$OUT/trace.tsv" > "$OUT/tune.txt" 2>&1
echo "tune rc=$? ($(( $(date +%s) - T0 )) s)"
grep -E 'left|stopped|budget|error' "$OUT/tune.txt" | tail -5
cp tuning/nvidia-h200.toml "$OUT/table.toml"
