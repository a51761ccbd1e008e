#!/bin/bash
# Fifty-eighth session, call 4. Carry [".device", ".vectors"]. The CUDA backend's ranged
# download through its page-locked staging (`copy_out`, shared with `download`): the GPU
# tests of the fused path and the backend contract, then the facade's fast rows again
# (call 3 put the fused call into y at 47.9 us, no faster than the pipeline's, with its
# flags read through pageable memory).
. prototypes/device.sh
C=$OUT/checks; mkdir -p $C
timeout 100 $D/cuda_launch --ignored --test-threads 1 round_trip chain fast_tier fused contract > $C/cuda_launch.txt 2>&1
echo "cuda_launch rc=$? $(since)"; grep -E "test result|panicked|FAILED" $C/cuda_launch.txt
TRELLIS_BENCH_BACKEND=cuda timeout 100 $D/facade --bench "fast/(resident-matvec-device-into|kernel-fused)" > $OUT/facade-bench.txt 2>&1
echo "facade bench rc=$? $(since)"; grep -E "^cuda|time:" $OUT/facade-bench.txt
echo "done $(since)"
