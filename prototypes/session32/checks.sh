#!/bin/bash
# The thirty-second session's device call: the thirty-first session's checks (CUDA verify,
# random problems, bench of the Qwen3-14B keys at M 1, the independent checker) on this
# session's build, whose kernel cache moved (backend::cache: a private per-user root, each
# CUBIN with its SHA-256, written under names of its own), then a short fast-tier tune of
# one key on a fresh cache root, where the ahead compiler's threads and the timing thread
# write CUBINs at once, and a second tune on that cache (every CUBIN read back), with what
# the cache holds after each. Carry [".device", ".vectors"].
D=.device/main
T0=$(date +%s)
CALL_S=${CALL_S:-420} bash prototypes/session31/checks.sh
exec > >(tee -a "$OUT/log.txt") 2>&1
since() { echo "($(( $(date +%s) - T0 )) s)"; }
export TRELLIS_CACHE_DIR=/tmp/tc32
rm -rf $TRELLIS_CACHE_DIR
for run in 1 2; do
  timeout 60 $D/xtask tune --backend cuda --tier fast --family reduce_mma --shape 17408x5120 \
    --m 1 --k 2 --l 12 --code 1mad --fresh --out "$OUT/tune-probe-$run.toml" > "$OUT/tune-probe-$run.log" 2>&1
  echo "tune $run rc=$? $(since)"; tail -3 "$OUT/tune-probe-$run.log"
  echo "cache: $(find $TRELLIS_CACHE_DIR/cuda -name '*.cubin' | wc -l) cubins, $(find $TRELLIS_CACHE_DIR/cuda -name '*.cubin.sha256' | wc -l) digests, $(find $TRELLIS_CACHE_DIR -name '*.tmp' | wc -l) temporaries; mode $(stat -c %a $TRELLIS_CACHE_DIR $TRELLIS_CACHE_DIR/cuda | tr '\n' ' ')"
done
grep -A3 "entry.winner" "$OUT/tune-probe-1.toml" | head -8
grep -A3 "entry.winner" "$OUT/tune-probe-2.toml" | head -8
