#!/bin/bash
# Render the table's exact winners for the x-permutation prototype (run here, where cargo
# is; the device has no Rust toolchain) and derive each one's permuted-x twin. Writes
# unit_<name>.cu and perm_<name>.cu (git ignores them); carry prototypes/xperm.
# Arguments of examples/reduce_unit: rows cols k code L M rpg rps max_registers fold
# scalar prefetch stream (the winners of tuning/nvidia-h200.toml, eleventh session).
set -euo pipefail
cd "$(dirname "$0")"
render() {  # name, then reduce_unit's arguments
  local name=$1; shift
  (cd ../.. && cargo run --release -q --example reduce_unit -- "$@") | sed 's/\bulong\b/tulong/g' > unit_$name.cu
  local sym; sym=$(grep -o 'reduce_[0-9a-f]\{16\}' unit_$name.cu | head -1)
  # The twin reads x permuted per 1024-column slice: lane l's 16-byte chunk q of its run
  # at chunk 32 q + l of the slice (xperm.cu's permute kernel writes that layout).
  sed -e "s/$sym/${sym}_perm/" \
      -e 's/xrun_load(xr\[mi\], x + (tulong)(m0 + mi) \* \([0-9]*\)u + c0);/xrun_load_perm(xr[mi], x + (tulong)(m0 + mi) * \1u + (c0 \& ~1023u), u \& 31u);/' \
      -e 's/^DEVICE float xrun_at(const xrun<float>& r, uint j)/template <typename T> DEVICE void xrun_load_perm(xrun<T>\& r, const T* slice, uint l) {\n  const u32x4_t* q = reinterpret_cast<const u32x4_t*>(slice) + l;\n  UNROLL for (uint i = 0; i < 2u * sizeof(T); ++i) {\n    const u32x4_t v = q[32u * i];\n    r.w[4u * i] = v.x; r.w[4u * i + 1u] = v.y; r.w[4u * i + 2u] = v.z; r.w[4u * i + 3u] = v.w;\n  }\n}\n&/' \
      unit_$name.cu > perm_$name.cu
  grep -q xrun_load_perm\(xr perm_$name.cu || { echo "perm_$name.cu: the x load was not rewritten"; exit 1; }
  # Each unit its own name for its constant table: the host links all eight units.
  for f in unit perm; do sed -i "s/\btrellis_pow2\b/trellis_pow2_${f}_$name/g" ${f}_$name.cu; done
  # A host launcher per unit, so xperm.cu launches them without relocatable device code.
  for f in unit perm; do
    local k=$sym; [ $f = perm ] && k=${sym}_perm
    printf '\nextern "C" void launch_%s_%s(dim3 g, dim3 b, const void* x, const void* c, const void* s, void* y) {\n  %s<<<g, b>>>((const bf16_t*)x, (const uint32_t*)c, (const float*)s, nullptr, (bf16_t*)y);\n}\n' $f $name $k >> ${f}_$name.cu
  done
  echo "$name $sym"
}
render m4_5120 5120 17408 3 1mad 12 4 1 2 0 1 0 1 0      # 53.3 us: L1-bound (ncu 91 %)
render m8_5120 5120 17408 2 1mad 12 8 2 4 168 1 0 1 1    # 81.9 us
render m4_17408 17408 5120 3 1mad 12 4 2 3 0 1 0 1 0     # 43.7 us: L1 77 %
render m1_5120 5120 17408 3 1mad 12 1 2 2 0 1 0 1 1      # 31.8 us: control
