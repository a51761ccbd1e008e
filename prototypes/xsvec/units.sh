#!/bin/bash
# Render the table's exact winners at 17408 x 5120 k 3 1mad L 12 (M 1, 2, 4, 8) and the
# x-in-shared-f32 twins (twin.py) at several group sizes; writes unit_*.cu (git ignores
# them) and units.h, the list bench.cu times. Run here (needs cargo); carry prototypes/xsvec.
# reduce_unit's arguments: rows cols k code L M rpg rps max_registers fold scalar prefetch stream
set -euo pipefail
cd "$(dirname "$0")"
: > units.h
add() {  # name, twin (0/1), M, rpg, rps, max_registers, prefetch
  local name=$1 twin=$2 m=$3 rpg=$4 rps=$5 mr=$6 pf=$7
  (cd ../.. && cargo run --release -q --example reduce_unit -- 17408 5120 3 1mad 12 $m $rpg $rps $mr 1 0 $pf 0) \
    | sed 's/\bulong\b/tulong/g' > /tmp/xsvec_$name.cu
  if [ $twin = 1 ]; then python3 twin.py /tmp/xsvec_$name.cu $m 5120 $mr > unit_$name.cu; else cp /tmp/xsvec_$name.cu unit_$name.cu; fi
  sed -i "s/\btrellis_pow2\b/trellis_pow2_$name/g" unit_$name.cu
  local sym; sym=$(grep -o 'reduce_[0-9a-f]\{16\}\(_xs\)\?' unit_$name.cu | head -1)
  local smem=0; [ $twin = 1 ] && smem=$((m * 160 * 36 * 4))
  printf '\nextern "C" void launch_%s(dim3 g, dim3 b, const void* x, const void* c, const void* s, void* y) {\n  static bool once = false;\n  if (!once) { cudaFuncSetAttribute(%s, cudaFuncAttributeMaxDynamicSharedMemorySize, %d); once = true; }\n  %s<<<g, b, %d>>>((const bf16_t*)x, (const uint32_t*)c, (const float*)s, nullptr, (bf16_t*)y);\n}\n' \
    $name $sym $smem $sym $smem >> unit_$name.cu
  echo "U($name, $twin, $m, $rpg, $rps)" >> units.h
}
add m1_base 0 1 2 3 0 0
add m1_g4 1 1 4 3 40 0
add m1_g8 1 1 8 3 40 0
add m1_g16 1 1 16 3 40 0
add m2_base 0 2 4 3 0 0
add m2_g8 1 2 8 3 0 0
add m2_g16 1 2 16 3 0 0
add m4_base 0 4 2 3 0 1
add m4_g8r3 1 4 8 3 0 0
add m4_g8r4 1 4 8 4 0 0
add m4_g16r4 1 4 16 4 0 0
add m4_g16r3 1 4 16 3 0 0
add m8_base 0 8 1 4 168 0
add m8_g8r4 1 8 8 4 168 0
add m8_g8r3 1 8 8 3 0 0
cat units.h
