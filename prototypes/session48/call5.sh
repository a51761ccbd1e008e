#!/bin/bash
# The forty-eighth session's fifth device call: downloads of up to 1 MB through page-locked
# staging (CudaBackend::staging), on call4's build otherwise: the GPU tests, the CUDA
# verify of the quick catalog and the vectors (every output through the new download),
# and the facade bench. Carry [".device", ".vectors"].
. prototypes/device.sh
C=/tmp/checks; mkdir -p $C
gpu_tests $C 150 cuda_launch cuda_threads gate_up_parts
verify_quick $C
facade_bench $C 'download-y|exact|fast'
tar czf "$OUT/checks.tgz" -C /tmp checks
