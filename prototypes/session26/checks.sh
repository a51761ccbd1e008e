#!/bin/bash
# One device call after the full `reduce_mma` re-tune (the split arrival's fence by one
# thread): the quick catalog verify on cuda, the independent checker through the CLI on
# cuda (both tiers; one case in four at a tuned preset shape, where split-K winners run),
# then where 3inst at M = 16 meets shared-memory bank conflicts: ncu's per-instruction
# source counters of the table's M 16 winner at 17408 x 5120 k 2, exported as CSV.
# Carry [".device", ".vectors"].
set -u
SEED=${SEED:-20261326}
D=.device/main
exec > >(tee -a "$OUT/log.txt") 2>&1
chmod +x $D/trellis $D/xtask
T0=$(date +%s)
since() { echo "($(( $(date +%s) - T0 )) s)"; }
timeout 150 $D/xtask verify --backend cuda --quick --vectors .vectors --out "$OUT/verify.txt" \
  > /dev/null 2> "$OUT/verify_err.txt"
echo "verify rc=$? $(since)"; tail -3 "$OUT/verify.txt"
timeout ${SPEC_S:-150} python3 tests/independent/spec_check.py random --bin $D/trellis --backend cuda \
  --tier both --n ${N_SPEC:-40} --seed "$SEED" --workdir /tmp/sc > "$OUT/spec_check.txt" 2>&1
echo "spec_check rc=$? $(since)"; grep -E "FAIL|cases|passed" "$OUT/spec_check.txt" | tail -8
MMA_ONLY=17408x5120:2:16:3inst MMA_VARIANT="mma rt=8 cs=1 mt=16 x=shared_dup ks=8 regs=64 xf16 bs optin" \
  timeout 100 ncu --clock-control none --section SourceCounters --import-source no -k regex:reduce_mma -s 3 -c 1 \
  -o "$OUT/m16-3inst" $D/xtask bench --family reduce_mma --out "$OUT/bench-m16.md" > "$OUT/ncu.txt" 2>&1
echo "ncu rc=$? $(since)"; tail -3 "$OUT/ncu.txt"
ncu -i "$OUT/m16-3inst.ncu-rep" --page source --csv --print-source sass > "$OUT/m16-3inst-sass.csv" 2> "$OUT/ncu-src-err.txt"
echo "source page rc=$? $(since)"; head -c 600 "$OUT/m16-3inst-sass.csv"; head -3 "$OUT/ncu-src-err.txt"
