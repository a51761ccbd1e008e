#!/bin/bash
# One device call: the x_f16 twins (x rounded to f16 by the host) against every other
# candidate, in a fresh tune of a few reduce_mma keys with every candidate traced.
# Carry [".device"]; the stripped xtask in .device/main/.
D=.device/main
chmod +x $D/xtask
exec > >(tee -a "$OUT/log.txt") 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
cp tuning/nvidia-h200.toml /tmp/t.toml
T0=$(date +%s)
timeout ${TUNE_S:-300} $D/xtask tune --backend cuda --tier fast --family reduce_mma \
  --shape ${SHAPES:-qwen3-14b} --m ${MS:-1,4,16} --k ${KS:-2,4} --l ${LS:-12} \
  --code ${CODES:-1mad,3inst} --fresh --budget ${BUDGET:-4m} --out /tmp/t.toml \
  --trace "$OUT/trace.tsv" > "$OUT/tune.txt" 2>&1
echo "tune rc=$? ($(( $(date +%s) - T0 )) s)"
tail -60 "$OUT/tune.txt"
cp /tmp/t.toml "$OUT/table.toml"
