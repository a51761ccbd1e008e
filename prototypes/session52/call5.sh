#!/bin/bash
# Ready, not run (the fifty-second session's device time ran out): the trial of a side
# stream for `download_later` (the fast device path's flags copy off the main stream,
# cudarc's event tracking off; `side_stream.patch`, applied to `src/backend/cuda.rs`):
# the GPU tests, then the facade bench's fast device rows, a build without the patch
# (`facade_prev`) and one with it (`facade`). Build both, strip them into one folder's
# `main/`, pack it as `.device/bins.txz` (with the patched build's `cuda_launch` and
# `cuda_threads`). Carry [".device"].
. prototypes/device.sh
C=/tmp/checks; rm -rf $C; mkdir -p $C
gpu_tests $C 120 cuda_launch cuda_threads
F='fast/resident-matvec-device|kernel-f16x|fast/kernel$'
for r in 1; do
  for which in facade_prev facade; do
    TRELLIS_BENCH_BACKEND=cuda timeout 60 $D/$which --bench --warm-up-time 1 --measurement-time 2 "$F" > $C/$which-$r.txt 2>&1
    echo "$which $r rc=$? $(since)"; grep -E "^cuda|time:" $C/$which-$r.txt
  done
done
tar czf "$OUT/checks.tgz" -C /tmp checks
