#!/bin/bash
# Render the table's exact winners for the f32-x prototype (run here, where cargo is) and
# derive their twins: `i` reads x lane-interleaved per 1024-column slice (bf16, as
# Variant::interleaved_x ships), `f` reads the same layout as f32 (no conversion in the
# loop: a 16-byte load is 4 values ready for the FMA). Writes u_<name>_<twin>.cu (git
# ignores them) and units.h; carry prototypes/xf32.
# Arguments of examples/reduce_unit: rows cols k code L M rpg rps max_registers fold
# scalar prefetch stream interleaved.
set -euo pipefail
cd "$(dirname "$0")"
rm -f u_*.cu units.h
one() {  # file, twin, then reduce_unit's arguments
  local f=$1 twin=$2; shift 2
  (cd ../.. && cargo run --release -q --example reduce_unit -- "$@") | sed 's/\bulong\b/tulong/g' > $f
  local sym; sym=$(grep -o 'reduce_[0-9a-f]\{16\}' $f | head -1)
  local tag=${f%.cu}; tag=${tag#u_}
  if [ $twin = f ]; then
    sed -i -e 's/const bf16_t\* __restrict__ x,/const float* __restrict__ x,/' -e 's/xrun<act_t> xr\[/xrun<float> xr[/' $f
    grep -q 'xrun<float> xr\[' $f || { echo "$f: the x load was not rewritten"; exit 1; }
  fi
  sed -i "s/\btrellis_pow2\b/trellis_pow2_$tag/g; s/$sym/${sym}_$tag/" $f
  local xt=bf16_t; [ $twin = f ] && xt=float
  printf '\nextern "C" void launch_%s(dim3 g, dim3 b, const void* x, const void* c, const void* s, void* y) {\n  %s<<<g, b>>>((const %s*)x, (const uint32_t*)c, (const float*)s, nullptr, (bf16_t*)y);\n}\n' \
    $tag ${sym}_$tag $xt >> $f
}
# name rows cols k M rpg rps regs prefetch stream  (p = plain, the table's winner's loads)
render() {
  local name=$1 rows=$2 cols=$3 k=$4 m=$5 rpg=$6 rps=$7 regs=$8 pf=$9 st=${10} il=${11}
  one u_${name}_p.cu p $rows $cols $k 1mad 12 $m $rpg $rps $regs 1 0 $pf $st $il
  one u_${name}_i.cu i $rows $cols $k 1mad 12 $m $rpg $rps $regs 1 0 $pf $st 1
  one u_${name}_f.cu f $rows $cols $k 1mad 12 $m $rpg $rps $regs 1 0 $pf $st 1
  echo "C($name, $rows, $cols, $k, $m, $rpg, $rps)" >> units.h
  echo "$name"
}
#      name          rows  cols  k M rpg rps regs pf st il   (table winner, median us)
render m1_17408_r3   17408 5120  3 1 2   3   0    0  0  0    # 29.19
render m2_17408_r3   17408 5120  3 2 4   3   0    0  0  0    # 33.93
render m4_17408_r3   17408 5120  3 4 2   3   0    0  1  0    # 43.87
render m4_17408_r4   17408 5120  3 4 2   4   0    0  1  0    # (4-row twin)
render m8_17408_r4   17408 5120  3 8 1   4   0    0  0  0    # 71.30
render m8_17408_r4b  17408 5120  3 8 1   4   168  0  0  0    # (budget twin)
render m4_5120_r2    5120  17408 3 4 2   2   0    1  1  1    # 49.11
render m4_5120_r4    5120  17408 3 4 2   4   0    1  1  1    # (4-row twin)
render m8_5120_r4    5120  17408 3 8 1   4   0    0  0  0    # 79.69
