#!/bin/bash
# The forty-eighth session's fifth device call: downloads of up to 1 MB through page-locked
# staging (CudaBackend::staging), on call4's build otherwise: the GPU tests, the CUDA
# verify of the quick catalog and the vectors (every output through the new download),
# and the facade bench. Carry [".device", ".vectors"].
. prototypes/device.sh
C=/tmp/checks; mkdir -p $C
gpu_tests $C 150 cuda_launch cuda_threads gate_up_parts
timeout 150 $D/xtask verify --backend cuda --quick --vectors .vectors --out $C/verify.txt > /dev/null 2> $C/verify_err.txt
echo "verify rc=$? $(since)"; tail -1 $C/verify.txt
TRELLIS_BENCH_BACKEND=cuda timeout 200 $D/facade --bench 'download-y|exact|fast' > $C/facade-bench.txt 2>&1
echo "facade bench rc=$? $(since)"; grep -E "^cuda|time:" $C/facade-bench.txt
tar czf "$OUT/checks.tgz" -C /tmp checks
