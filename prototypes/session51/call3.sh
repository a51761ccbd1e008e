#!/bin/bash
# The fifty-first session's third device call: the prescale kernel reading x in chunks
# of 16 loads a thread (512 threads, tree reductions). The GPU tests (the prescale's
# bits against the host's in `cuda_launch`), then the facade bench's device rows of the
# build before (`facade-old`, 1d95833) and after, twice each, alternating, on this
# machine. Carry [".device"].
. prototypes/device.sh
C=/tmp/checks; mkdir -p $C
gpu_tests $C 150 cuda_launch cuda_threads
for i in 1 2; do
  for b in facade-old facade; do
    TRELLIS_BENCH_BACKEND=cuda timeout 100 $D/$b --bench --warm-up-time 1 --measurement-time 2 'device|kernel|prescale' > $C/$b-bench-$i.txt 2>&1
    echo "$b $i rc=$? $(since)"; grep -E "^cuda|time:" $C/$b-bench-$i.txt
  done
done
tar czf "$OUT/checks.tgz" -C /tmp checks
