#!/bin/bash
# The forty-sixth session's H100 table: the device lent was an H100 (80GB HBM3), which has
# no table of its own (the H200's entries stand in, as a family member's). Tune the
# Qwen3-14B and Llama-3-8B keys at L 12, 1mad, k 2 / 3 / 4 (M: MS_EXACT, MS_FAST), each
# tier under its own budget, into the table in tuning/ (resumed: entries it has are kept);
# then, where BENCH=1, bench the Qwen3-14B keys at M 1 on the H100 table and on the
# H200's (what the H100 ran before it had a table). Carry [".device"].
. prototypes/device.sh
T=tuning/nvidia-h100-80gb-hbm3.toml
OT="$OUT/$(basename $T)"
[ -f "$T" ] && cp "$T" "$OT" && chmod u+w "$OT"
for tier in exact fast; do
  [ $tier = exact ] && MS=${MS_EXACT:-1,4} || MS=${MS_FAST:-1,4}
  timeout ${TIER_S:-280} $D/xtask tune --backend cuda --tier $tier --shape qwen3-14b,llama-3-8b \
    --m $MS --k 2,3,4 --l 12 --code 1mad --budget ${BUDGET:-240s} --out "$OT" > "$OUT/tune-$tier.log" 2>&1
  echo "tune $tier M $MS rc=$? $(since)"; tail -2 "$OUT/tune-$tier.log"
done
grep -c '^\[\[entry' "$OT"
[ -n "$BENCH" ] || exit 0
for t in "$OT" tuning/nvidia-h200.toml; do
  n=$(basename $t .toml)
  TRELLIS_BENCH_PRESETS=qwen3-14b TRELLIS_BENCH_M=${BENCH_M:-1} timeout ${BENCH_S:-150} $D/xtask bench \
    --table $t --out "$OUT/bench-$n.md" > /dev/null 2> "$OUT/bench-$n.err"
  echo "bench $n rc=$? $(since)"; grep -E "M1 (exact|fast)" "$OUT/bench-$n.err" | head -12
done
