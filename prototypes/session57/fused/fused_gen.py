#!/usr/bin/env python3
"""Fifty-seventh session: the fused prescale as a prototype, made by editing rendered
units (`render.sh`: `cargo run --release --example mma_unit`). Its outputs are not
committed: `render.sh` and the call scripts run it.

- `fused_a.cu` / `fused_b.cu` from `sh_a.cu` / `sh_b.cu` (x staged in group memory): the
  staging reads raw bf16 x once into registers, folds its largest magnitude over the
  group (shuffles, one barrier), takes the power of two out as the prescale kernel does
  and rounds to f16 into `xs`; row group 0 writes the tiny flag (one per split). Without
  split-K (a) the group's slice is the whole sample, so the bits are the prescale
  pipeline's; with split-K (b) each split scales by its own slice's power and puts it
  back on its part before the combine (per-slice, not bit-identical: SPEC 7's bound).
- `fusedg_a.cu` from `win_a.cu` (x read from global in the loop): a prologue folds the
  sample's largest magnitude; each B load converts bf16 to f16 with the power taken out.
- M = 16 (`sh_c.cu`, `sh_c_nocap.cu`: 16 samples a slice, batched staging): `fused_c*`
  (each chunk's largest into its sample's slot by an atomic max), `fused_c2*` (a warp a
  sample folds by shuffles, then the template's staging reads x again) and `fused_c3*`
  (a warp a sample, its chunks held in registers, staged by the same warp).
The CUDA built-ins (`__shfl_xor_sync`, `atomicMax`, `uint4`) make these CUDA-only; a
shipped form folds through group memory where the dialect has no shuffles.
"""
import re, sys

HELPERS = r'''
// ---- fused prescale helpers (prototype)
DEVICE int fp_floor_log2(float v) {  // v > 0, finite
  const uint b = __float_as_uint(v);
  const int be = (int)(b >> 23);
  return be == 0 ? 31 - __clz(b & 0x7FFFFFu) - 149 : be - 127;
}
DEVICE float fp_absmax8(uint4 r) {
  const uint w[4] = {r.x, r.y, r.z, r.w};
  float m = 0.0f;
  UNROLL for (uint k = 0; k < 4u; ++k) m = fmax(m, fmax(fabsf(__uint_as_float(w[k] << 16)), fabsf(__uint_as_float(w[k] & 0xFFFF0000u))));
  return m;
}
DEVICE uint fp_tiny8(uint4 r, float floor_tiny) {
  const uint w[4] = {r.x, r.y, r.z, r.w};
  uint t = 0u;
  UNROLL for (uint k = 0; k < 4u; ++k) {
    const float lo = __uint_as_float(w[k] << 16), hi = __uint_as_float(w[k] & 0xFFFF0000u);
    if ((lo != 0.0f && fabsf(lo) < floor_tiny) || (hi != 0.0f && fabsf(hi) < floor_tiny)) t = 1u;
  }
  return t;
}
DEVICE void fp_scaled4(uint4 r, float down, uint* b) {
  const uint w[4] = {r.x, r.y, r.z, r.w};
  UNROLL for (uint k = 0; k < 4u; ++k) b[k] = pack_f16x2(mul32(__uint_as_float(w[k] << 16), down), mul32(__uint_as_float(w[k] & 0xFFFF0000u), down));
}
DEVICE void x_scaled_quad2(float down, const bf16_t* p, uint* b) { fp_scaled4(*(const uint4*)p, down, b); }
'''

def fold(T, W, R, chunks, first):
    """Registers raw[R] of chunks `first + THREAD + r T` (< chunks) read; the group's
    largest, e, down, up_s; the tiny flag by row group 0."""
    return f'''
  // Fused prescale: this thread's chunks of 8 columns, read once.
  uint4 raw[{R}];
  float mx = 0.0f;
  UNROLL for (uint r = 0; r < {R}u; ++r) {{
    const uint i = THREAD_IN_GROUP + r * {T}u;
    raw[r] = i < {chunks} ? *(const uint4*)(x + ({first} + i) * 8u) : make_uint4(0u, 0u, 0u, 0u);
    mx = fmax(mx, fp_absmax8(raw[r]));
  }}
  UNROLL for (uint o = 16u; o > 0u; o >>= 1) mx = fmax(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  GROUP_SHARED float fp_max[{W}];
  if ((THREAD_IN_GROUP & 31u) == 0u) fp_max[THREAD_IN_GROUP >> 5] = mx;
  BARRIER();
  UNROLL for (uint k = 0; k < {W}u; ++k) mx = fmax(mx, fp_max[k]);
  const bool finite = mx <= as_f32(0x7F7FFFFFu);
  const int top = (mx != 0.0f && finite) ? fp_floor_log2(mx) : 13;
  const int e = top - 13 < -126 ? -126 : top - 13;
  const float down = as_f32((uint)(127 - e) << 23);
  up_s = as_f32((uint)(e + 127) << 23);
  if (GROUP_X == 0u) {{
    const float floor_tiny = mul32(mx, as_f32(0x31800000u));
    uint tiny = (mx != 0.0f && finite && top < -113) ? 1u : 0u;
    UNROLL for (uint r = 0; r < {R}u; ++r) tiny |= fp_tiny8(raw[r], floor_tiny);
    tiny = __syncthreads_or(tiny);
    if (THREAD_IN_GROUP == 0u) flags[GROUP_Y] = tiny;
  }}'''

def staging(T, W, R, nq_all):
    return fold(T, W, R, "nq", "q0").replace("// Fused prescale:", "// Fused prescale (staged):", 1) + f'''
  UNROLL for (uint r = 0; r < {R}u; ++r) {{
    const uint i = THREAD_IN_GROUP + r * {T}u;
    if (i < nq) {{
      const uint q = q0 + i, u = (q >> 2) - z0 * 4u;
      const uint o = (u * 16u + (u >> 1) * 4u) + (q & 3u) * 4u;
      uint v[4];
      fp_scaled4(raw[r], down, v);
      UNROLL for (uint k = 0; k < 4u; ++k) xs[o + k] = v[k];
    }}
  }}
  BARRIER();
'''

def common(src, name):
    src = re.sub(r'reduce_mma_[0-9a-f]{16}\(const f16_t\* __restrict__ x', f'{name}(const bf16_t* __restrict__ x', src)
    src = src.replace('float* __restrict__ ws) {', 'float* __restrict__ ws, uint32_t* __restrict__ flags) {')
    head, sep, body = src.partition('extern "C"')
    body = re.sub(r'(MMA_SCRATCH_F16\(\d+u\);)', lambda mm: mm.group(1) + "\n  float up_s = 1.0f;  // this group's power of two of x", body, count=1)
    return head + HELPERS + sep + body

def make_staged(src, name, T, W, split):
    src = common(src, name)
    m = re.search(r'\n  // Chunk q of 8 columns.*?\n  const uint q0 = z0 \* 16u, nq = \(z1 \* 16u < (\d+)u \? z1 \* 16u : \d+u\) - q0;\n.*?\n  BARRIER\(\);\n', src, re.S)
    assert m, name
    nq_all = int(m.group(1))
    steps_per_group = None
    # chunks a group stages: whole sample (no split) or one split's slice
    per_group = nq_all if not split else nq_all // split + 16
    R = -(-per_group // T)
    new = f'\n  const uint q0 = z0 * 16u, nq = (z1 * 16u < {nq_all}u ? z1 * 16u : {nq_all}u) - q0;' + staging(T, W, R, nq_all)
    src = src[:m.start()] + new + src[m.end():]
    if split:
        src = src.replace('= sum[i];  // this split\'s part', '= mul32(sum[i], up_s);  // this split\'s part, its power put back')
        src, k = re.subn(r', unscale\[n\]\)\);', ', 1.0f));', src)
    else:
        src, k = re.subn(r', unscale\[n\]\)\);', ', up_s));', src)
    assert k == 1, (name, k)
    return src

def make_global(src, name, T, W, cols):
    src = common(src, name)
    chunks = cols // 8
    R = -(-chunks // T)
    src = re.sub(r'(  float up_s = 1\.0f;[^\n]*\n)', lambda mm: mm.group(1) + fold(T, W, R, f"{chunks}u", "0u") + '\n', src, count=1)
    src, k = re.subn(r'x_f16x2_quad2\(x \+', 'x_scaled_quad2(down, x +', src)
    assert k == 1
    src, k = re.subn(r', unscale\[n\]\)\);', ', up_s));', src)
    assert k == 1
    return src


def make_staged_multi(src, name, m, split):
    """Several samples a slice (batched staging, M = 16): each thread's chunks folded into
    a per-sample largest in group memory (an atomic max of the magnitudes' bits, which
    order as the floats do), each sample's power computed once, then scaled and staged."""
    src = common(src, name)
    src = src.replace("  float up_s = 1.0f;  // this group's power of two of x",
                      f"  GROUP_SHARED float fp_up[{m}], fp_down[{m}], fp_floor[{m}];  // per sample: 2^e, 2^-e, the tiny floor\n"
                      f"  GROUP_SHARED uint fp_max[{m}], fp_tiny[{m}];")
    m_ = re.search(r'\n  // Chunk q of 8 columns.*?\n  const uint q0 = z0 \* 16u, nq = (\d+)u;\n  UNROLL for \(uint c = 0; c < (\(\d+u \+ GROUP_THREADS_FIXED - 1u\) / GROUP_THREADS_FIXED); \+\+c\) \{\n(.*?)\n    uint v\[4\];\n    x_f16x2_quad2\(x \+ (.*?), v\);\n(.*?)\n  \}\n  BARRIER\(\);\n', src, re.S)
    assert m_, name
    nq, rounds, head, addr, tail = m_.group(1), m_.group(2), m_.group(3), m_.group(4), m_.group(5)
    R = eval(rounds.replace('u', '').replace('GROUP_THREADS_FIXED', '256').replace('/', '//'))
    new = f"""
  // Fused prescale (staged, {m} samples): each thread's chunks read once; per sample the
  // largest magnitude, its power of two, then x scaled and rounded into xs.
  const uint q0 = z0 * 16u, nq = {nq}u;
  if (THREAD_IN_GROUP < {m}u) {{ fp_max[THREAD_IN_GROUP] = 0u; fp_tiny[THREAD_IN_GROUP] = 0u; }}
  BARRIER();
  uint4 raw[{R}];
  UNROLL for (uint c = 0; c < {R}u; ++c) {{
{head}
    raw[c] = *(const uint4*)(x + {addr});
    atomicMax(&fp_max[n], __float_as_uint(fp_absmax8(raw[c])));
  }}
  BARRIER();
  if (THREAD_IN_GROUP < {m}u) {{
    const float mx = __uint_as_float(fp_max[THREAD_IN_GROUP]);
    const bool finite = mx <= as_f32(0x7F7FFFFFu);
    const int top = (mx != 0.0f && finite) ? fp_floor_log2(mx) : 13;
    const int e = top - 13 < -126 ? -126 : top - 13;
    fp_up[THREAD_IN_GROUP] = as_f32((uint)(e + 127) << 23);
    fp_down[THREAD_IN_GROUP] = as_f32((uint)(127 - e) << 23);
    fp_floor[THREAD_IN_GROUP] = mul32(mx, as_f32(0x31800000u));
    if (mx != 0.0f && finite && top < -113) fp_tiny[THREAD_IN_GROUP] = 1u;
  }}
  BARRIER();
  UNROLL for (uint c = 0; c < {R}u; ++c) {{
{head}
    if (GROUP_X == 0u && fp_tiny8(raw[c], fp_floor[n])) atomicOr(&fp_tiny[n], 1u);
    uint v[4];
    fp_scaled4(raw[c], fp_down[n], v);
{tail}
  }}
  BARRIER();
  if (GROUP_X == 0u && THREAD_IN_GROUP < {m}u) flags[GROUP_Y * {m}u + THREAD_IN_GROUP] = fp_tiny[THREAD_IN_GROUP];
"""
    src = src[:m_.start()] + new + src[m_.end():]
    if split:
        src, k = re.subn(r"= sum\[i\];  // this split's part", "= mul32(sum[i], fp_up[n - m0]);  // this split's part, its power put back", src)
        assert k == 1
        src, k = re.subn(r', unscale\[n\]\)\);', ', 1.0f));', src)
    else:
        src, k = re.subn(r', unscale\[n\]\)\);', ', fp_up[n - m0]));', src)
    assert k == 1, (name, k)
    return src

def make_staged_warps(src, name, m, warps, split):
    """Several samples a slice, without atomics: warp w folds samples w, w + warps, ...
    (its lanes over the sample's chunks, then shuffles) and writes each one's powers; then
    the template's own staging loop reads x again (from cache), scaled."""
    src = common(src, name)
    src = src.replace("  float up_s = 1.0f;  // this group's power of two of x",
                      f"  GROUP_SHARED float fp_up[{m}], fp_down[{m}], fp_floor[{m}];  // per sample: 2^e, 2^-e, the tiny floor\n"
                      f"  GROUP_SHARED uint fp_tiny[{m}];")
    m_ = re.search(r'\n  // Chunk q of 8 columns.*?\n  const uint q0 = z0 \* 16u, nq = (\d+)u;\n  UNROLL for \(uint c = 0; c < (\(\d+u \+ GROUP_THREADS_FIXED - 1u\) / GROUP_THREADS_FIXED); \+\+c\) \{\n(.*?)\n    uint v\[4\];\n    x_f16x2_quad2\(x \+ (.*?), v\);\n(.*?)\n  \}\n  BARRIER\(\);\n', src, re.S)
    assert m_, name
    nq, rounds, head, addr, tail = m_.group(1), m_.group(2), m_.group(3), m_.group(4), m_.group(5)
    per_lane = -(-int(nq) // 32)
    new = f"""
  // Fused prescale (staged, {m} samples, a warp a sample): the largest magnitude of each
  // sample's chunks by the warp's lanes and shuffles, its powers into group memory.
  const uint q0 = z0 * 16u, nq = {nq}u;
  for (uint n = THREAD_IN_GROUP >> 5; n < {m}u; n += {warps}u) {{
    const uint nx = m0 + n < {m}u ? m0 + n : {m - 1}u;
    float mx = 0.0f;
    UNROLL for (uint c = 0; c < {per_lane}u; ++c) {{
      const uint i = (THREAD_IN_GROUP & 31u) + c * 32u;
      if (i < nq) mx = fmax(mx, fp_absmax8(*(const uint4*)(x + (ulong)nx * {src_cols(addr)}u + (q0 + i) * 8u)));
    }}
    UNROLL for (uint o = 16u; o > 0u; o >>= 1) mx = fmax(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if ((THREAD_IN_GROUP & 31u) == 0u) {{
      const bool finite = mx <= as_f32(0x7F7FFFFFu);
      const int top = (mx != 0.0f && finite) ? fp_floor_log2(mx) : 13;
      const int e = top - 13 < -126 ? -126 : top - 13;
      fp_up[n] = as_f32((uint)(e + 127) << 23);
      fp_down[n] = as_f32((uint)(127 - e) << 23);
      fp_floor[n] = mul32(mx, as_f32(0x31800000u));
      fp_tiny[n] = (mx != 0.0f && finite && top < -113) ? 1u : 0u;
    }}
  }}
  BARRIER();
  UNROLL for (uint c = 0; c < {rounds}; ++c) {{
{head}
    const uint4 raw = *(const uint4*)(x + {addr});
    if (GROUP_X == 0u && fp_tiny8(raw, fp_floor[n])) atomicOr(&fp_tiny[n], 1u);
    uint v[4];
    fp_scaled4(raw, fp_down[n], v);
{tail}
  }}
  BARRIER();
  if (GROUP_X == 0u && THREAD_IN_GROUP < {m}u) flags[GROUP_Y * {m}u + THREAD_IN_GROUP] = fp_tiny[THREAD_IN_GROUP];
"""
    src = src[:m_.start()] + new + src[m_.end():]
    if split:
        src, k = re.subn(r"= sum\[i\];  // this split's part", "= mul32(sum[i], fp_up[n - m0]);  // this split's part, its power put back", src)
        assert k == 1
        src, k = re.subn(r', unscale\[n\]\)\);', ', 1.0f));', src)
    else:
        src, k = re.subn(r', unscale\[n\]\)\);', ', fp_up[n - m0]));', src)
    assert k == 1, (name, k)
    return src

def src_cols(addr):
    return re.search(r'\(ulong\)nx \* (\d+)u', addr).group(1)

def make_staged_warpregs(src, name, m, warps, split):
    """Several samples a slice, read once, without atomics: warp w takes samples w,
    w + warps, ... whole (its lanes over each sample's chunks, held in registers), folds
    each by shuffles, and stages them scaled: the staging's chunk order changes, not its
    layout."""
    src = common(src, name)
    src = src.replace("  float up_s = 1.0f;  // this group's power of two of x",
                      f"  GROUP_SHARED float fp_up[{m}];  // per sample: 2^e\n"
                      f"  GROUP_SHARED uint fp_tiny[{m}];")
    m_ = re.search(r'\n  // Chunk q of 8 columns.*?\n  const uint q0 = z0 \* 16u, nq = (\d+)u;\n  UNROLL for \(uint c = 0; c < (\(\d+u \+ GROUP_THREADS_FIXED - 1u\) / GROUP_THREADS_FIXED); \+\+c\) \{\n(.*?)\n    uint v\[4\];\n    x_f16x2_quad2\(x \+ (.*?), v\);\n    const uint o = n \* (\d+)u \+ (.*?)\n(.*?)\n  \}\n  BARRIER\(\);\n', src, re.S)
    assert m_, name
    nq, stride, o_rest = m_.group(1), m_.group(5), m_.group(6)
    cols = src_cols(m_.group(4))
    per_lane = -(-int(nq) // 32)
    per_warp = m // warps
    new = f"""
  // Fused prescale (staged, {m} samples, a warp a sample, read once): lane l holds chunks
  // l, l + 32, ... of each of its warp's samples; the warp folds each sample's largest
  // by shuffles, then stages it scaled.
  const uint q0 = z0 * 16u, nq = {nq}u;
  {{
    const uint w = THREAD_IN_GROUP >> 5, l = THREAD_IN_GROUP & 31u;
    uint4 raw[{per_warp}][{per_lane}];
    UNROLL for (uint j = 0; j < {per_warp}u; ++j) {{
      const uint n = w + j * {warps}u, nx = m0 + n < {m}u ? m0 + n : {m - 1}u;
      UNROLL for (uint c = 0; c < {per_lane}u; ++c) {{
        const uint i = l + c * 32u;
        raw[j][c] = i < nq ? *(const uint4*)(x + (ulong)nx * {cols}u + (q0 + i) * 8u) : make_uint4(0u, 0u, 0u, 0u);
      }}
    }}
    UNROLL for (uint j = 0; j < {per_warp}u; ++j) {{
      const uint n = w + j * {warps}u;
      float mx = 0.0f;
      UNROLL for (uint c = 0; c < {per_lane}u; ++c) mx = fmax(mx, fp_absmax8(raw[j][c]));
      UNROLL for (uint o = 16u; o > 0u; o >>= 1) mx = fmax(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const bool finite = mx <= as_f32(0x7F7FFFFFu);
      const int top = (mx != 0.0f && finite) ? fp_floor_log2(mx) : 13;
      const int e = top - 13 < -126 ? -126 : top - 13;
      const float down = as_f32((uint)(127 - e) << 23), floor_tiny = mul32(mx, as_f32(0x31800000u));
      uint tiny = (mx != 0.0f && finite && top < -113) ? 1u : 0u;
      UNROLL for (uint c = 0; c < {per_lane}u; ++c) {{
        const uint i = l + c * 32u;
        if (i < nq) {{
          const uint q = q0 + i, u = (q >> 2) - z0 * 4u;
          if (GROUP_X == 0u) tiny |= fp_tiny8(raw[j][c], floor_tiny);
          uint v[4];
          fp_scaled4(raw[j][c], down, v);
          const uint o = n * {stride}u + {o_rest}
          UNROLL for (uint k = 0; k < 4u; ++k) xs[o + k] = v[k];
        }}
      }}
      tiny = __any_sync(0xffffffffu, tiny != 0u) ? 1u : 0u;
      if (l == 0u) {{ fp_up[n] = as_f32((uint)(e + 127) << 23); fp_tiny[n] = tiny; }}
    }}
  }}
  BARRIER();
  if (GROUP_X == 0u && THREAD_IN_GROUP < {m}u) flags[GROUP_Y * {m}u + THREAD_IN_GROUP] = fp_tiny[THREAD_IN_GROUP];
"""
    src = src[:m_.start()] + new + src[m_.end():]
    if split:
        src, k = re.subn(r"= sum\[i\];  // this split's part", "= mul32(sum[i], fp_up[n - m0]);  // this split's part, its power put back", src)
        assert k == 1
        src, k = re.subn(r', unscale\[n\]\)\);', ', 1.0f));', src)
    else:
        src, k = re.subn(r', unscale\[n\]\)\);', ', fp_up[n - m0]));', src)
    assert k == 1, (name, k)
    return src

d = sys.argv[1] if len(sys.argv) > 1 else '.'
rd = lambda f: open(f'{d}/{f}').read()
# (rendered unit, fused unit, threads, warps, k_split)
STAGED = [
    ('sh_a.cu', 'fused_a', 256, 8, 0),         # 17408 x 5120: x staged after the barrier
    ('sh_a_ew.cu', 'fused_a_ew', 256, 8, 0),   # the same, staged once the first words are in flight
    ('sh_a_ks2.cu', 'fused_a_ks2', 256, 8, 2), # two splits, each its own slice's power
    ('sh_b.cu', 'fused_b', 128, 4, 8),         # 5120 x 17408: 8 splits, 48 registers
    ('sh_b_nocap.cu', 'fused_b_nocap', 128, 4, 8),
]
for src, name, t, w, split in STAGED:
    open(f'{d}/{name}.cu', 'w').write(make_staged(rd(src), name, t, w, split))
open(f'{d}/fused_c.cu', 'w').write(make_staged_multi(rd('sh_c.cu'), 'fused_c', 16, 8))  # 17408 x 5120 M 16
open(f'{d}/fused_c_nocap.cu', 'w').write(make_staged_multi(rd('sh_c_nocap.cu'), 'fused_c_nocap', 16, 8))
open(f'{d}/fused_c2.cu', 'w').write(make_staged_warps(rd('sh_c.cu'), 'fused_c2', 16, 8, 8))
open(f'{d}/fused_c2_nocap.cu', 'w').write(make_staged_warps(rd('sh_c_nocap.cu'), 'fused_c2_nocap', 16, 8, 8))
open(f'{d}/fused_c3.cu', 'w').write(make_staged_warpregs(rd('sh_c.cu'), 'fused_c3', 16, 8, 8))
open(f'{d}/fused_c3_nocap.cu', 'w').write(make_staged_warpregs(rd('sh_c_nocap.cu'), 'fused_c3_nocap', 16, 8, 8))
open(f'{d}/fusedg_a.cu', 'w').write(make_global(rd('win_a.cu'), 'fusedg_a', 256, 8, 5120))
print('wrote', ' '.join(n + '.cu' for _, n, *_ in STAGED), 'fused_c.cu', 'fused_c_nocap.cu', 'fused_c2.cu', 'fused_c2_nocap.cu', 'fused_c3.cu', 'fused_c3_nocap.cu', 'fusedg_a.cu')
