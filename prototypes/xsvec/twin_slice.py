#!/usr/bin/env python3
"""Derive the sliced twin of a rendered exact `reduce` unit (x in registers): x staged as
f32 per 1024-column slice (one loop iteration of every lane) in a double buffer of
shared memory, M x 32 runs x 36 floats each. Iteration i reads buffer i & 1; its loads of
slice i + 1 go out at the top, their f32 stores into the other buffer at the bottom,
then one group barrier. Every simdgroup of a group runs the loop (one past the last row
writes nothing), so the barrier is reached by all. Needs cols % 1024 == 0.
usage: twin_slice.py unit.cu M cols rpg maxnreg > twin.cu"""
import re, sys
src = open(sys.argv[1]).read()
m, cols, rpg, maxnreg = (int(a) for a in sys.argv[2:6])
assert cols % 1024 == 0
slices, chunks = cols // 1024, m * 128  # 16-byte chunks of one slice, all samples
per = -(-chunks // (32 * rpg))
sym = re.search(r"reduce_[0-9a-f]{16}", src).group(0)
src = src.replace(sym, sym + "_xsl")
if maxnreg:
    src = src.replace('extern "C" __global__ void', f'extern "C" __global__ __maxnreg__({maxnreg}) void', 1)
# Every simdgroup enters the row loop (the barrier needs all); row_owned writes nothing past R.
src = re.sub(r"once_row_ && row0 < \(R\); once_row_ = 0u\)", "once_row_; once_row_ = 0u)", src)
helpers = f"""
DEVICE float bf16_lo(uint w) {{ return __uint_as_float(w << 16); }}
DEVICE float bf16_hi(uint w) {{ return __uint_as_float(w & 0xffff0000u); }}
// Chunk c (8 values) of slice s of every sample: sample c >> 7, columns 8 (c & 127) ...
DEVICE void xsl_load(u32x4_t (&v)[{per}], const bf16_t* x, uint m0, uint s) {{
  UNROLL for (uint p = 0; p < {per}u; ++p) {{
    const uint c = threadIdx.x + p * blockDim.x;
    if (c < {chunks}u) v[p] = reinterpret_cast<const u32x4_t*>(x + (unsigned long long)(m0 + (c >> 7)) * {cols}u + s * 1024u)[c & 127u];
  }}
}}
DEVICE void xsl_store(const u32x4_t (&v)[{per}], float* xs, uint b) {{
  UNROLL for (uint p = 0; p < {per}u; ++p) {{
    const uint c = threadIdx.x + p * blockDim.x;
    if (c < {chunks}u) {{
      float* d = xs + ((b * {m}u + (c >> 7)) * 32u + ((c & 127u) >> 2)) * 36u + (c & 3u) * 8u;
      *reinterpret_cast<float4*>(d) = make_float4(bf16_lo(v[p].x), bf16_hi(v[p].x), bf16_lo(v[p].y), bf16_hi(v[p].y));
      *reinterpret_cast<float4*>(d + 4) = make_float4(bf16_lo(v[p].z), bf16_hi(v[p].z), bf16_lo(v[p].w), bf16_hi(v[p].w));
    }}
  }}
}}
"""
src, n = re.subn(r'(extern "C" __global__)', lambda mm: helpers + mm.group(1), src, count=1)
assert n == 1
stage = f"""
  extern __shared__ __align__(16) float xs[];  // 2 buffers x {m} samples x 32 runs x 36 floats
  {{ u32x4_t v[{per}]; xsl_load(v, x, m0, 0u); xsl_store(v, xs, 0u); }}
  __syncthreads();
"""
src, n = re.subn(r"(  const uint m0 = GROUP_Y \* \d+u;[^\n]*\n)", lambda mm: mm.group(1) + stage, src, count=1)
assert n == 1, "m0"
src, n = re.subn(r"(      for \(uint u = lane; u < \d+u; u \+= 32u\) \{\n)",
                 lambda mm: mm.group(1) + f"        u32x4_t xnext[{per}];\n        const uint sl = u >> 5;\n        if (sl + 1u < {slices}u) xsl_load(xnext, x, m0, sl + 1u);\n", src, count=1)
assert n == 1, "loop"
src, n = re.subn(r"\n\s*xrun<act_t> xr\[\d+\];\n\s*UNROLL for \(uint mi = 0; mi < \d+u; \+\+mi\) xrun_load\([^\n]*\n", "\n", src)
assert n == 1, "xrun_load"
src, n = re.subn(r"xrun_at\(xr\[mi\], j\)", f"xs[(((sl & 1u) * {m}u + mi) * 32u + (u & 31u)) * 36u + j]", src)
assert n == 1, "xrun_at"
src, n = re.subn(r"(\n      \}\n      UNROLL for \(uint i = 0; i < \d+u; \+\+i\) LANE\(part\))",
                 lambda mm: f"\n        if (sl + 1u < {slices}u) xsl_store(xnext, xs, (sl + 1u) & 1u);\n        __syncthreads();" + mm.group(1), src, count=1)
assert n == 1, "loop end"
print(src, end="")
