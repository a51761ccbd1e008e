#!/bin/bash
# The fifty-third session's landed build (side stream and its guard) plus this session's
# staging fallback (a download while a `Later` holds the staging copies through pageable
# memory): the GPU tests, the two CUDA unit tests, the quick CUDA verify, and the facade
# bench's device and host rows.
. prototypes/device.sh
C=$OUT/checks; mkdir -p $C
timeout 40 $D/trellis_lib --ignored --test-threads 1 > $C/lib.txt 2>&1
echo "lib rc=$? $(since)"; grep -E "^test |test result|panicked" $C/lib.txt
gpu_tests $C 90 cuda_launch cuda_threads gate_up_parts
verify_quick $C
F='matvec|kernel|gate'
TRELLIS_BENCH_BACKEND=cuda timeout 150 $D/facade --bench --warm-up-time 1 --measurement-time 2 "$F" > $C/facade.txt 2>&1
echo "facade rc=$? $(since)"; grep -E "^cuda|time:" $C/facade.txt
