#!/bin/bash
# The side stream with its guard (a tensor's drop waits for a copy still reading it):
# the GPU tests, the guard's unit test, and the facade bench's fast device rows
# (call 1 has them without the side stream). Short: little device time was left.
. prototypes/device.sh
C=$OUT/checks; mkdir -p $C
gpu_tests $C 60 cuda_launch cuda_threads
timeout 30 $D/trellis_lib --ignored --test-threads 1 a_tensor_outlives_its_copy_out > $C/lib.txt 2>&1
echo "lib rc=$? $(since)"; grep -E "test result|panicked" $C/lib.txt
F='fast/resident-matvec-device|fast/kernel$'
TRELLIS_BENCH_BACKEND=cuda timeout 50 $D/facade --bench --warm-up-time 1 --measurement-time 2 "$F" > $C/facade.txt 2>&1
echo "facade rc=$? $(since)"; grep -E "^cuda|time:" $C/facade.txt
