#!/bin/bash
# The forty-seventh session's second device call, on the build with the f16 hold (the
# fast tier's f16 units changed; every bf16 unit is byte for byte as tuned): the GPU
# tests (`cuda_launch` now holds the f16-edge case), the CUDA verify of the quick catalog
# and the vectors, random facade problems (now with up's own scale dtype and k, and M
# past one launch), the independent checker on cuda (seed 5: 6 pairs of two T in 36).
# Everything lands in one tar ($OUT/checks.tgz): a call brings back few files.
# Carry [".device", ".vectors"].
. prototypes/device.sh
C=/tmp/checks; mkdir -p $C
gpu_tests $C 150 cuda_launch cuda_threads gate_up_parts
timeout 150 $D/xtask verify --backend cuda --quick --vectors .vectors --out $C/verify.txt > /dev/null 2> $C/verify_err.txt
echo "verify rc=$? $(since)"; tail -1 $C/verify.txt
timeout 150 $D/xtask verify --backend cuda --random ${N_RANDOM:-120} --seed ${SEED:-20261347} \
  --out $C/random.txt > /dev/null 2> $C/random_err.txt
echo "random rc=$? $(since)"; tail -1 $C/random.txt; grep -m5 failed: $C/random.txt
LEFT=$(( ${CALL_S:-540} - ($(date +%s) - T0) ))
timeout $LEFT python3 tests/independent/spec_check.py random --bin $D/trellis --backend cuda \
  --tier both --n ${N_CHECK:-36} --seed 5 --workdir /tmp/sc > $C/spec_check.txt 2>&1
echo "spec_check rc=$? $(since)"; grep -E "FAIL|cases" $C/spec_check.txt | tail -6
tar czf "$OUT/checks.tgz" -C /tmp checks
