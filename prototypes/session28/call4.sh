#!/bin/bash
# The twenty-eighth session's last device call, after the M <= 8 `reduce_mma` re-tune:
# verify --quick on cuda, a bench of the Qwen3-14B keys at M 1 / 4 / 8 on the new table,
# then the independent checker through the CLI with what is left of CALL_S.
# Carry [".device", ".vectors"].
D=.device/main
chmod +x $D/xtask $D/trellis
exec > >(tee -a "$OUT/log.txt") 2>&1
T0=$(date +%s)
since() { echo "($(( $(date +%s) - T0 )) s)"; }
timeout 70 $D/xtask verify --backend cuda --quick --vectors .vectors --out "$OUT/verify.txt" \
  > /dev/null 2> "$OUT/verify_err.txt"
echo "verify rc=$? $(since)"; tail -1 "$OUT/verify.txt"
TRELLIS_BENCH_PRESETS=qwen3-14b TRELLIS_BENCH_M=1,4,8 timeout 130 $D/xtask bench \
  --table tuning/nvidia-h200.toml --out "$OUT/bench.md" > /dev/null 2> "$OUT/bench_err.txt"
echo "bench rc=$? $(since)"; grep -E "error" "$OUT/bench_err.txt" | tail -5
LEFT=$(( ${CALL_S:-330} - ($(date +%s) - T0) ))
timeout $LEFT python3 tests/independent/spec_check.py random --bin $D/trellis --backend cuda \
  --tier both --n 40 --seed 20261328 --workdir /tmp/sc > "$OUT/spec_check.txt" 2>&1
echo "spec_check rc=$? $(since)"; grep -E "FAIL|cases|passed" "$OUT/spec_check.txt" | tail -8
