#!/bin/bash
# The device call that lands the first-step clamp on CUDA (prototypes/next/NEXT.md, first
# section), built here after steps 1 and 2 there (the clamp on every dialect, the table
# stamped): re-tune the 216 `reduce_mma` entries the stamp leaves stale, resuming the
# table (current entries are kept; run again if the budget ends first: `tune` says how
# many keys are left), then verify the quick catalog on cuda. The table comes back as
# $OUT/table.toml: copy it over tuning/nvidia-h200.toml and run tests/tables_current.rs.
# Carry [".device", ".vectors"]. Env: TUNE_S (seconds of tuning, default 480), VERIFY
# (0: skip the verify).
D=.device/main
chmod +x $D/xtask
exec > >(tee -a "$OUT/log.txt") 2>&1
T0=$(date +%s)
since() { echo "($(( $(date +%s) - T0 )) s)"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
$D/xtask tune --plan --backend cuda --tier fast --family reduce_mma --shape qwen3-14b,llama-3-8b \
  --l 12,16 --m 1,2,4,8,16 --k 2,3,4 --code 1mad,3inst,mcg --out tuning/nvidia-h200.toml | tail -4
timeout $(( ${TUNE_S:-480} + 60 )) $D/xtask tune --backend cuda --tier fast --family reduce_mma \
  --shape qwen3-14b,llama-3-8b --l 12,16 --m 1,2,4,8,16 --k 2,3,4 --code 1mad,3inst,mcg \
  --budget ${TUNE_S:-480}s --out tuning/nvidia-h200.toml --trace "$OUT/trace.tsv" > "$OUT/tune.txt" 2>&1
echo "tune rc=$? $(since)"; grep -E 'left|stopped|budget|error' "$OUT/tune.txt" | tail -5
cp tuning/nvidia-h200.toml "$OUT/table.toml"
[ "${VERIFY:-1}" = 1 ] || exit 0
timeout 100 $D/xtask verify --backend cuda --quick --vectors .vectors --out "$OUT/verify.txt" \
  > /dev/null 2> "$OUT/verify_err.txt"
echo "verify rc=$? $(since)"; tail -1 "$OUT/verify.txt"
