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
