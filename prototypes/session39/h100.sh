#!/bin/bash
# The thirty-ninth session's H100 table: tune the presets' keys (L 12, 1mad, both tiers,
# every family) on an H100 into a table of its own (`tuned.toml`, resumed across calls on a
# warm machine), then bench them twice in one lease: with the H200 table (what an H100 gets
# today by the selector's nearest-device rule) and with the H100's own layered over it,
# cuBLAS in both. Env: TUNE_SHAPE (presets, comma-separated), TUNE_M, TUNE_K, BENCH_M,
# TUNE_S / BENCH_S (time limits). Carry [".device"] (`bins.txz` as in
# `../session36/sanitize_tests.sh`).
. prototypes/device.sh
R=/tmp/r; mkdir -p $R
trap '(cd $R && tar czf "$OUT/results.tgz" .)' EXIT
SHAPES=${TUNE_SHAPE:-qwen3-14b,llama-3-8b}
for t in exact fast; do
  timeout ${TUNE_S:-250} $D/xtask tune --backend cuda --shape $SHAPES --m ${TUNE_M:-1} --k ${TUNE_K:-2,3,4} --l 12 \
    --code 1mad --tier $t --out "$R/tuned.toml" --budget ${TUNE_BUDGET:-240s} --trace "$R/trace-$t.tsv" \
    >> "$R/tune-$t.log" 2>&1
  echo "tune $t rc=$? $(since)"; grep -E "^(warning|error)" "$R/tune-$t.log" | tail -3
done
[ -n "$NO_BENCH" ] && exit 0
for tb in tuning/nvidia-h200.toml "$R/tuned.toml"; do
  n=$(basename "$tb" .toml)
  TRELLIS_BENCH_PRESETS=$SHAPES TRELLIS_BENCH_M=${BENCH_M:-1} timeout ${BENCH_S:-120} $D/xtask bench \
    --table "$tb" --out "$R/bench-$n.md" > "$R/bench-$n.log" 2>&1
  echo "bench with $n rc=$? $(since)"; grep -E "error" "$R/bench-$n.log" | tail -3
done
