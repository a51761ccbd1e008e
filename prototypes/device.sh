# Sourced by the session scripts that run on the device (`run`): unpacks the stripped
# binaries the call carried (`.device/bins.txz`, built and packed as
# `session36/sanitize_tests.sh` says) into $D, tees everything to $OUT/log.txt, starts the
# clock `since` reads, logs the GPU and its clocks, and defines `gpu_tests`.
D=.device/main
[ -f .device/bins.txz ] && tar xJf .device/bins.txz -C .device
chmod +x $D/*
exec > >(tee -a "$OUT/log.txt") 2>&1
T0=$(date +%s)
since() { echo "($(( $(date +%s) - T0 )) s)"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,driver_version --format=csv,noheader
# `gpu_tests DIR TIMEOUT TEST...`: each GPU test binary's ignored tests (the ones that
# need a GPU), its output in DIR/TEST.txt, its verdict and the clock printed.
gpu_tests() {
  local dir=$1 t=$2; shift 2
  for name in "$@"; do
    timeout $t $D/$name --ignored --test-threads 1 > "$dir/$name.txt" 2>&1
    echo "$name rc=$? $(since)"; grep -E "test result|panicked" "$dir/$name.txt" | head -4
  done
}
# The checks and benches the session scripts run, each writing into DIR and printing
# its verdict and the clock (forty-eighth session on; earlier scripts spell them out).
verify_quick() {  # DIR: the CUDA verify of the quick catalog and the vectors
  timeout 150 $D/xtask verify --backend cuda --quick --vectors .vectors --out $1/verify.txt > /dev/null 2> $1/verify_err.txt
  echo "verify rc=$? $(since)"; tail -1 $1/verify.txt
}
verify_random() {  # DIR N SEED: random problems through the library facade on cuda
  timeout 150 $D/xtask verify --backend cuda --random $2 --seed $3 --out $1/random.txt > /dev/null 2> $1/random_err.txt
  echo "random rc=$? $(since)"; tail -1 $1/random.txt; grep -m5 failed: $1/random.txt
}
spec_check() {  # DIR N SEED TIMEOUT: the independent checker through the CLI on cuda
  timeout $4 python3 tests/independent/spec_check.py random --bin $D/trellis --backend cuda \
    --tier both --n $2 --seed $3 --workdir /tmp/sc > $1/spec_check.txt 2>&1
  echo "spec_check rc=$? $(since)"; grep -E "FAIL|cases" $1/spec_check.txt | tail -4
}
facade_bench() {  # DIR [FILTER]: benches/facade.rs on cuda
  TRELLIS_BENCH_BACKEND=cuda timeout 200 $D/facade --bench ${2:-} > $1/facade-bench.txt 2>&1
  echo "facade bench rc=$? $(since)"; grep -E "^cuda|time:" $1/facade-bench.txt
}
