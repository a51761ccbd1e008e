#!/bin/bash
# The twenty-ninth session's last device call: the checks on the build that embeds the
# final table (call 3's `gate_up_mma` entries): random problems through the facade, then
# the independent checker through the CLI, each within its share of CALL_S.
# Carry [".device", ".vectors"].
D=.device/main
chmod +x $D/xtask $D/trellis
exec > >(tee -a "$OUT/log.txt") 2>&1
T0=$(date +%s)
since() { echo "($(( $(date +%s) - T0 )) s)"; }
timeout ${RANDOM_S:-110} $D/xtask verify --backend cuda --random ${N_RANDOM:-80} --seed 20261429 \
  --out "$OUT/random.txt" > /dev/null 2> "$OUT/random_err.txt"
echo "random rc=$? $(since)"; tail -2 "$OUT/random.txt"
LEFT=$(( ${CALL_S:-200} - ($(date +%s) - T0) ))
timeout $LEFT python3 tests/independent/spec_check.py random --bin $D/trellis --backend cuda \
  --tier both --n 40 --seed 20261430 --workdir /tmp/sc > "$OUT/spec_check.txt" 2>&1
echo "spec_check rc=$? $(since)"; grep -E "FAIL|cases|passed" "$OUT/spec_check.txt" | tail -4
