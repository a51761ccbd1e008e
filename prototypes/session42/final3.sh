#!/bin/bash
# The forty-second session's fourth call: the facade problems of seed 20261552 again
# (two fast f16 gate_up cases failed there under the stricter overflow rule, at mid* =
# 65505 and 65515, in range and within their bounds of 65520), on the build whose check
# takes infinity at the edge of the range; then 200 more with seed 20261553.
# Carry [".device"].
. prototypes/device.sh
for s in 20261552:80 20261553:200; do
  timeout 250 $D/xtask verify --backend cuda --random ${s#*:} --seed ${s%:*} --out "$OUT/random-${s%:*}.txt" > /dev/null 2> "$OUT/random-${s%:*}.err"
  echo "random ${s%:*} rc=$? $(since)"; tail -2 "$OUT/random-${s%:*}.txt"; grep "failed:" "$OUT/random-${s%:*}.txt" | head -5
done
