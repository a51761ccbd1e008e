#!/bin/bash
# One device call that checks a build end to end on the H200, from the repository root of
# the device copy, with the stripped binaries in .device/main/ (trellis, xtask) and a copy
# of ../shared/vectors in .vectors/ (both git-ignored, named in `carry`):
#   1. the quick catalog verify on cuda (every exact variant bit for bit, fast within SPEC 7);
#   2. random problems through the CLI binary, exact, cuda against the reference backend,
#      byte for byte (cli_random.sh);
#   3. the independent checker (tests/independent/spec_check.py) through the CLI on cuda,
#      both tiers;
#   4. one bench of the issues' goal keys (17408 x 5120 and 5120 x 17408, M 1 / 4 / 8).
# Usage: prototypes/device_checks.sh SEED [N_CLI] [N_SPEC]; everything lands in $OUT.
set -u
SEED=${1:?seed}; N_CLI=${2:-60}; N_SPEC=${3:-60}
D=.device/main
LOG=$OUT/log.txt
exec > >(tee -a "$LOG") 2>&1
chmod +x $D/trellis $D/xtask
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
T0=$(date +%s)
since() { echo "($(( $(date +%s) - T0 )) s)"; }

timeout 150 $D/xtask verify --backend cuda --quick --vectors .vectors --out "$OUT/verify.txt" \
  > /dev/null 2> "$OUT/verify_err.txt"
echo "verify rc=$? $(since)"; tail -3 "$OUT/verify.txt"

TRELLIS_BIN=$D/trellis timeout 150 bash prototypes/cli_random.sh "$N_CLI" "$SEED" /tmp/cli \
  > "$OUT/cli_random.txt" 2>&1
echo "cli_random rc=$? $(since)"; tail -3 "$OUT/cli_random.txt"

timeout 170 python3 tests/independent/spec_check.py random --bin $D/trellis --backend cuda \
  --tier both --n "$N_SPEC" --seed "$((SEED + 1))" --workdir /tmp/sc > "$OUT/spec_check.txt" 2>&1
echo "spec_check rc=$? $(since)"; grep -E "FAIL|cases|passed" "$OUT/spec_check.txt" | tail -8

TRELLIS_BENCH_PRESETS=qwen3-14b TRELLIS_BENCH_M=1,4,8 timeout 100 $D/xtask bench \
  --out "$OUT/bench.md" > /dev/null 2> "$OUT/bench_err.txt"
echo "bench rc=$? $(since)"; grep -E "error" "$OUT/bench_err.txt" | tail -5
