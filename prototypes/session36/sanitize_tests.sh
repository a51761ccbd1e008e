#!/bin/bash
# The thirty-sixth session's sanitizer call: the three GPU tests under compute-sanitizer's
# memcheck (cuda_threads had not run under it), and gate_up_parts under racecheck and
# synccheck, on the build of the session's checks call. Carry [".device"], holding
# `bins.txz`: `main/` with the stripped `xtask`, `trellis` and the three test binaries
# (`cargo test --release --features cuda --test cuda_launch --test cuda_threads
# --test gate_up_parts --no-run`), packed with `tar cJf .device/bins.txz main`.
D=.device/main
[ -f .device/bins.txz ] && tar xJf .device/bins.txz -C .device
chmod +x $D/*
exec > >(tee -a "$OUT/log.txt") 2>&1
. prototypes/session33/san.sh
for t in cuda_threads cuda_launch gate_up_parts; do
  san memcheck 150 $t-memcheck $D/$t --ignored --test-threads 1
done
san racecheck 150 gate_up_parts-racecheck $D/gate_up_parts --ignored --test-threads 1
san synccheck 100 gate_up_parts-synccheck $D/gate_up_parts --ignored --test-threads 1
(cd /tmp/cs && tar czf "$OUT/sanitizer.tgz" .)
