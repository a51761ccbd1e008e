#!/bin/bash
# The side-stream trial (`../session52/side_stream.patch` on `src/backend/cuda.rs`):
# the GPU tests on the patched build (and the fifty-second session's `download_later`
# borrow, never run on a GPU), then the facade bench's device rows from a build without
# the patch (`facade_prev`) and one with it (`facade`), interleaved twice. Carry
# [".device"] (both builds stripped into `main/`, packed as `.device/bins.txz`).
. prototypes/device.sh
C=/tmp/checks; rm -rf $C; mkdir -p $C
gpu_tests $C 120 cuda_launch cuda_threads gate_up_parts
# A helper's stress (threads and `release_kept` on one resident; built from its scratch crate).
timeout 120 $D/gpu_stress --ignored --test-threads 1 threads_and_release_kept_on_cuda > $C/gpu_stress.txt 2>&1
echo "gpu_stress rc=$? $(since)"; grep -E "test result|panicked" $C/gpu_stress.txt | head -4
F='fast/resident-matvec-device|kernel-f16x|fast/kernel$'
for r in 1 2; do
  for which in facade_prev facade; do
    TRELLIS_BENCH_BACKEND=cuda timeout 90 $D/$which --bench --warm-up-time 1 --measurement-time 2 "$F" > $C/$which-$r.txt 2>&1
    echo "$which $r rc=$? $(since)"; grep -E "^cuda|time:" $C/$which-$r.txt
  done
done
tar czf "$OUT/checks.tgz" -C /tmp checks
