#!/usr/bin/env python3
"""Derive the x-in-shared-f32 twin of a rendered exact `reduce` unit (x in registers):
x of the group's M samples staged once per group as f32, run u of sample mi at float
(mi * runs + u) * 36 (a 144-byte stride: a quarter-warp's 16-byte reads hit 8 distinct
4-bank groups), read back four values per LDS.128 instead of one conversion per value.
usage: twin.py unit.cu M cols maxnreg > twin.cu"""
import re, sys
src = open(sys.argv[1]).read()
m, cols, maxnreg = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
runs = cols // 32
sym = re.search(r"reduce_[0-9a-f]{16}", src).group(0)
src = src.replace(sym, sym + "_xs")
attrs = f"__maxnreg__({maxnreg}) " if maxnreg else ""
src = src.replace('extern "C" __global__ void', f'extern "C" __global__ {attrs}void', 1)
stage = f"""
  extern __shared__ __align__(16) float xs[];  // {m} x {runs} runs x 36 floats
  {{
    const u32x4_t* xg = reinterpret_cast<const u32x4_t*>(x + (ulong)m0 * {cols}u);
    for (uint i = threadIdx.x; i < {m * cols // 8}u; i += blockDim.x) {{
      const u32x4_t v = xg[i];
      const uint e = i * 8u, mi = e / {cols}u, c = e - mi * {cols}u;
      float* d = xs + (mi * {runs}u + (c >> 5)) * 36u + (c & 31u);
      *reinterpret_cast<float4*>(d) = make_float4(__uint_as_float(v.x << 16), __uint_as_float(v.x & 0xffff0000u), __uint_as_float(v.y << 16), __uint_as_float(v.y & 0xffff0000u));
      *reinterpret_cast<float4*>(d + 4) = make_float4(__uint_as_float(v.z << 16), __uint_as_float(v.z & 0xffff0000u), __uint_as_float(v.w << 16), __uint_as_float(v.w & 0xffff0000u));
    }}
  }}
  __syncthreads();
"""
src, n = re.subn(r"(  const uint m0 = GROUP_Y \* \d+u;[^\n]*\n)", lambda mm: mm.group(1) + stage, src, count=1)
assert n == 1, "m0"
src, n = re.subn(r"\n\s*xrun<act_t> xr\[\d+\];\n\s*UNROLL for \(uint mi = 0; mi < \d+u; \+\+mi\) xrun_load\([^\n]*\n", "\n", src)
assert n == 1, "xrun_load"
src, n = re.subn(r"xrun_at\(xr\[mi\], j\)", f"xs[(mi * {runs}u + u) * 36u + j]", src)
assert n == 1, "xrun_at"
print(src, end="")
