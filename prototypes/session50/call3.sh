#!/bin/bash
# The fiftieth session's third and fourth device calls: the fast tier's gate_up_device
# (026780e; then 4f4b960, two x back to back on one scratch):
# the GPU tests of cuda_launch (the fast device test now runs the fused pair) and
# cuda_threads. Carry [".device"].
. prototypes/device.sh
C=/tmp/checks; mkdir -p $C
gpu_tests $C 150 cuda_launch cuda_threads
tar czf "$OUT/checks.tgz" -C /tmp checks
