#!/bin/bash
# The forty-fourth session's sanitizer call: the CUDA tests of the launch path the
# forty-third and forty-fourth sessions changed (the unsafe KernelSpec, the Launch read
# through Deref with its boxed render, the Arc'd device matrices a Resident shares across
# threads) under compute-sanitizer's memcheck, then gate_up_parts under racecheck.
# Carry [".device"], holding `bins.txz` packed as `../session36/sanitize_tests.sh` says.
. prototypes/device.sh
. prototypes/session33/san.sh
san memcheck 170 cuda_launch-memcheck $D/cuda_launch --ignored --test-threads 1
san memcheck 150 cuda_threads-memcheck $D/cuda_threads --ignored --test-threads 1
san racecheck 100 gate_up_parts-racecheck $D/gate_up_parts --ignored --test-threads 1
(cd /tmp/cs && tar czf "$OUT/sanitizer.tgz" .)
