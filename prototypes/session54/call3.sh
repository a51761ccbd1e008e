#!/bin/bash
# call2.sh cut to what the device time left after refused starts holds: the GPU tests
# this session strengthened, random facade problems and the independent checker.
# Carry [".device", ".vectors"].
. prototypes/device.sh
C=$OUT/checks; mkdir -p $C
gpu_tests $C 90 cuda_launch cuda_threads
verify_random $C 40 20261554
spec_check $C 20 20261554 120
