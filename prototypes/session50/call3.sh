#!/bin/bash
# The fiftieth session's third device call: the fast tier's gate_up_device (026780e):
# the GPU tests of cuda_launch (the fast device test now runs the fused pair) and
# cuda_threads. Carry [".device"].
. prototypes/device.sh
C=/tmp/checks; mkdir -p $C
gpu_tests $C 150 cuda_launch cuda_threads
tar czf "$OUT/checks.tgz" -C /tmp checks
