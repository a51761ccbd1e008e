#!/bin/bash
# The forty-ninth session's second device call: `Resident::matvec_device_into` and
# `gate_up_device_into` (outputs made once) on call1's build otherwise: the GPU tests of
# cuda_launch and cuda_threads (the device-activations test now writes into outputs too),
# then the facade bench's device rows beside the kernel and the host calls.
# Carry [".device", ".vectors"].
. prototypes/device.sh
C=/tmp/checks; mkdir -p $C
gpu_tests $C 150 cuda_launch cuda_threads
facade_bench $C 'device|kernel|resident-matvec|alloc-y'
tar czf "$OUT/checks.tgz" -C /tmp checks
