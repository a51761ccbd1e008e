#!/bin/bash
# The fifty-second session's second device call: the facade bench's host-data rows on
# the build that validates a resident's matrix once (a fused pair's call checked both
# matrices whole, 54 us each at 17408 rows), beside the previous call's build
# (`facade_prev`), interleaved. Carry [".device"].
. prototypes/device.sh
C=/tmp/checks; rm -rf $C; mkdir -p $C
F='resident-matvec$|resident-gate-up|/kernel$'
for r in 1 2; do
  for which in facade_prev facade; do
    TRELLIS_BENCH_BACKEND=cuda timeout 80 $D/$which --bench --warm-up-time 1 --measurement-time 2 "$F" > $C/$which-$r.txt 2>&1
    echo "$which $r rc=$? $(since)"; grep -E "^cuda|time:" $C/$which-$r.txt
  done
done
tar czf "$OUT/checks.tgz" -C /tmp checks
