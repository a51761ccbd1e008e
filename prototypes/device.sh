# Sourced by the session scripts that run on the device (`run`): unpacks the stripped
# binaries the call carried (`.device/bins.txz`, built and packed as
# `session36/sanitize_tests.sh` says) into $D, tees everything to $OUT/log.txt, starts the
# clock `since` reads, and logs the GPU and its clocks.
D=.device/main
[ -f .device/bins.txz ] && tar xJf .device/bins.txz -C .device
chmod +x $D/*
exec > >(tee -a "$OUT/log.txt") 2>&1
T0=$(date +%s)
since() { echo "($(( $(date +%s) - T0 )) s)"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,driver_version --format=csv,noheader
