#!/bin/bash
# The twenty-ninth session's third device call: every `gate_up_mma` entry tuned again
# (--fresh) by the build whose tuner leaves the shapes a family measured far out of its
# edges (`Family::measured_far`), so each entry's `at_bound` is computed by it; a second
# timing of the pruned space. Carry [".device"].
D=.device/main
chmod +x $D/xtask
exec > >(tee -a "$OUT/log.txt") 2>&1
T0=$(date +%s)
since() { echo "($(( $(date +%s) - T0 )) s)"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
timeout ${TUNE_S:-585} $D/xtask tune --fresh --backend cuda --tier fast --family gate_up_mma \
  --shape qwen3-14b,llama-3-8b --l 12,16 --m 1,2,4,8,16 --k 2,3,4 --code 1mad,3inst,mcg \
  --budget ${BUDGET:-540s} --out tuning/nvidia-h200.toml --trace "$OUT/trace.tsv" > "$OUT/tune.txt" 2>&1
echo "tune rc=$? $(since)"; grep -E 'left|stopped|budget|error' "$OUT/tune.txt" | tail -5
cp tuning/nvidia-h200.toml "$OUT/table.toml"
