#!/bin/bash
# The thirty-third session's second device call: GateUpMmaParts on CUDA (a fast gate_up's
# g and u against SPEC 7, its mid against the plain kernel's bit for bit), the GPU tests
# again, and the CUDA verify of the quick catalog on the final build.
# Carry [".device", ".vectors"].
D=.device/main
chmod +x $D/*
exec > >(tee -a "$OUT/log.txt") 2>&1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,driver_version --format=csv,noheader
for t in gate_up_parts cuda_launch cuda_threads; do
  S=$SECONDS; timeout 300 $D/$t --ignored --test-threads 1 > "$OUT/$t.txt" 2>&1
  echo "$t rc=$? ($((SECONDS - S)) s)"; grep -E "^test |test result|panicked" "$OUT/$t.txt" | head -8
done
timeout 120 $D/xtask verify --backend cuda --quick --vectors .vectors --out "$OUT/verify.txt" > /dev/null 2> "$OUT/verify_err.txt"
echo "verify rc=$?"; tail -2 "$OUT/verify.txt"
