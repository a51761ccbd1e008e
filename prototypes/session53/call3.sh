#!/bin/bash
# Call 2 cut to what the last minutes of device time could hold: the side stream's
# guard test, then the GPU tests on the landed build.
. prototypes/device.sh
C=$OUT/checks; mkdir -p $C
timeout 20 $D/trellis_lib --ignored --test-threads 1 a_tensor_outlives_its_copy_out > $C/lib.txt 2>&1
echo "lib rc=$? $(since)"; grep -E "test result|panicked" $C/lib.txt
gpu_tests $C 30 cuda_threads cuda_launch
