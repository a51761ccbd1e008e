#!/bin/bash
# The thirty-eighth session's second-GPU call: on an H100 (the first lent), do the H200 table's
# winners, which an H100 gets by the selector's nearest-device rule, hold up there? Tunes
# the Qwen3-14B keys at M 1 (k 3: reduce and same-k gate/up, L 12, 1mad, both tiers)
# on the GPU into a table of its own (`tuned.toml`), then benches those keys twice in one lease: with the
# H200 table (nearest device) and with the H100 table (the device's own), cuBLAS in both.
# Carry [".device"] (`bins.txz` as in `../session36/sanitize_tests.sh`).
D=.device/main
[ -f .device/bins.txz ] && tar xJf .device/bins.txz -C .device
chmod +x $D/*
exec > >(tee -a "$OUT/log.txt") 2>&1
R=/tmp/r; mkdir -p $R
trap '(cd $R && tar czf "$OUT/results.tgz" .)' EXIT
T0=$(date +%s)
since() { echo "($(( $(date +%s) - T0 )) s)"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,driver_version --format=csv,noheader
for t in exact fast; do
  timeout ${TUNE_S:-150} $D/xtask tune --backend cuda --shape ${TUNE_SHAPE:-qwen3-14b} --m 1 --k ${TUNE_K:-3} --l 12 \
    --code 1mad --tier $t --out "$R/tuned.toml" --budget 150s --trace "$R/trace-$t.tsv" \
    > "$R/tune-$t.log" 2>&1
  echo "tune $t rc=$? $(since)"; tail -4 "$R/tune-$t.log"
done
for tb in tuning/nvidia-h200.toml "$R/tuned.toml"; do
  n=$(basename "$tb" .toml)
  TRELLIS_BENCH_PRESETS=${TUNE_SHAPE:-qwen3-14b} TRELLIS_BENCH_M=1 timeout ${BENCH_S:-110} $D/xtask bench \
    --table "$tb" --out "$R/bench-$n.md" > "$R/bench-$n.log" 2>&1
  echo "bench with $n rc=$? $(since)"; grep -E "error" "$R/bench-$n.log" | tail -3
done
