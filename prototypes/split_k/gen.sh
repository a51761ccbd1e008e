#!/usr/bin/env bash
# Makes proto_gen.cu (git-ignored) from the rendered units the prototype rewrites:
# 17408x5120 k2 1mad L12 M1 with staged x at 8 and 4 simdgroups per tile, 5120x17408 with
# x from device memory at 16 and 8. Run from the repository root; copy the folder to the
# device and build there: nvcc -O3 -arch=sm_90 -std=c++17 -o proto main.cu && ./proto
set -euo pipefail
cargo build --release --example mma_unit
u=target/release/examples/mma_unit
d=prototypes/split_k
t=$(mktemp -d)
$u 17408 5120 2 1mad 12 1 1 8 16 shared > "$t/a8.cu"
$u 17408 5120 2 1mad 12 1 1 4 16 shared > "$t/a4.cu"
$u 5120 17408 2 1mad 12 1 1 16 16 global > "$t/b16.cu"
$u 5120 17408 2 1mad 12 1 1 8 16 global > "$t/b8.cu"
python3 $d/make_proto.py "$t/proto.cu" a8="$t/a8.cu" a4="$t/a4.cu" b16="$t/b16.cu" b8="$t/b8.cu"
# `ulong` is a different type in the host's <sys/types.h>, which main.cu includes.
sed -E 's/\bulong\b/u64_t/g' "$t/proto.cu" > $d/proto_gen.cu
rm -r "$t"
