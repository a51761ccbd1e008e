#!/usr/bin/env python3
"""Render the fast tier's 17408 x 5120 1mad k 2 L 12 M 1 winner (`reduce_mma mma rt=1 cs=8
mt=16 x=shared pw`) at several row counts with examples/mma_unit, and write its ablation
twins (run here, where cargo is; writes u_<rows>_<twin>.cu and units.txt, git-ignored,
carried to the device):

  full   the shipped unit;
  nobs   no LCG and no byte sum: the two states packed as they are, then centred
         (window, pack and centre kept: 2 FMA-heavy instructions per weight fewer);
  nodec  no decode: the A word is s0 ^ s1 (the state windows kept);
  floor  no window and no decode: the A word is w[a] ^ w[b] ^ constant (one LOP3 per two
         weights; the constants keep each word distinct, so nothing is merged).

Later twins (17408 rows): `-pf1/2` (L2 prefetch of the code words 1 / 2 steps past the
next), `-deep2/3` (2 / 3 steps of code words in registers), `-ring3/4` (a cp.async ring in
shared memory), `cs4-` and `xg-` (the 4-split and unstaged-x candidates), the 3inst winner's
`3inst-*` twins (`-hi`, `-hihalf`: window shifts as IMAD.HI) and the exact tier's goal kernel
(`exact-*`, examples/reduce_unit). units.txt: file, symbol, rows, cols, k, threads per
threadgroup, then `simt` and the rows per threadgroup for the exact kernel's signature.

The twins compute garbage weights; they time what the kernel costs without each part.
"""
import re, subprocess, pathlib

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
ROWS = [17408, 10560, 21120]  # 1.65 waves (the preset), one wave, two waves
PF_ROWS = [17408]  # the pipeline twins (prefetch, deeper, ring)
ARGS = ["5120", "2", "1mad", "12", "1", "1", "8", "16", "shared", "1", "0", "f16", "1"]

def example(name, args):
    """A rendered unit from examples/<name> and its kernel symbol."""
    src = subprocess.run(["cargo", "run", "--release", "-q", "--example", name, "--"] + [str(a) for a in args],
                         cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return src, re.search(r"reduce(_mma)?_[0-9a-f]{16}", src).group(0)

def replace_fn(src, name, body):
    pat = re.compile(r"DEVICE uint " + name + r"\(uint s0, uint s1\) \{\n.*?\n\}\n", re.S)
    new, n = pat.subn(lambda m: f"DEVICE uint {name}(uint s0, uint s1) {{ {body} }}\n", src)
    assert n == 1, name
    return new

def replace_state(src, expr, macro="TRELLIS_STATE_PAIRED"):
    """The state-window macro `macro` (a multi-line #define) as `expr`."""
    pat = re.compile(r"#define " + macro + r"\(w, j, K, L\) \\\n(?:.*\\\n)*.*\n")
    new, n = pat.subn(f"#define {macro}(w, j, K, L) ({expr})\n", src)
    assert n == 1, macro
    return new

TWINS = {
    "full": lambda s: s,
    "nobs": lambda s: replace_fn(s, "trellis_f16x2_onemad", "return f16x2_sub((s1 << 16) | (s0 & 0xFFFFu), 1711171070u);"),
    "nodec": lambda s: replace_fn(s, "trellis_f16x2_onemad", "return s0 ^ s1;"),
    "floor": lambda s: replace_fn(replace_state(s, "(w)[(j) % 3u] ^ ((j) * 2654435761u)"), "trellis_f16x2_onemad", "return s0 ^ s1;"),
}

def replace_3inst(src, body):
    pat = re.compile(r"DEVICE uint trellis_f16x2_threeinst\(uint s, uint mask, uint xr\) \{.*?\}\n")
    new, n = pat.subn(lambda m: f"DEVICE uint trellis_f16x2_threeinst(uint s, uint mask, uint xr) {{ {body} }}\n", src)
    assert n == 1
    return new

# The 3inst winner at 17408 x 5120 k 2 M 1 (`rt=1 cs=8 mt=16 x=shared_dup`), 17408 rows only:
# full; nodec (the A word is the state: no LCG, no mask and xor); floor (no window either:
# the A word is w[a] ^ constant).
TWINS_3INST = {
    "3inst-full": lambda s: s,
    "3inst-nodec": lambda s: replace_3inst(s, "return s;"),
    "3inst-floor": lambda s: replace_3inst(replace_state(s, "(w)[(j) % 3u] ^ ((j) * 2654435761u)", "MMA_STATE"), "return s;"),
    "3inst-full-pf1": lambda s: prefetch(s, 1),
    "3inst-full-pf2": lambda s: prefetch(s, 2),
    "3inst-full-deep2": lambda s: deepen(s, 2),
    "3inst-hi": lambda s: shr_on_multiplier(s, "all"),
    "3inst-hihalf": lambda s: shr_on_multiplier(s, "half"),
}

PF_FN = ('template <int OFF> DEVICE void pf_l2(const uint32_t* p) '
         '{ asm volatile("prefetch.global.L2 [%0+%1];" :: "l"(p), "n"(OFF)); }\n')
LAST_LOAD = "LANE(nwh)[2] = LOAD_STREAM(codes + LANE(wo)[3] + adv);"

def prefetch(src, ahead, stride=64, cs=8):
    """Inside the loop, after the next step's loads, ask L2 for the code words of the
    `ahead` steps after it (the winner's warp strides 64 words a step: 4 runs x 8 column
    splits x k 2), as immediate offsets from the next step's addresses (no new registers)."""
    i = src.rindex(LAST_LOAD) + len(LAST_LOAD)
    extra = "".join(
        f"\n      if (next_step + {a * cs}u < last_step) {{ "
        + " ".join(f"pf_l2<{4 * a * stride}>(codes + LANE(wo)[{i}] + adv);" for i in range(4)) + " }"
        for a in range(1, ahead + 1))
    src = src[:i] + extra + src[i:]
    j = src.index("extern \"C\" __global__")
    return src[:j] + PF_FN + src[j:]

def deepen(src, depth, stride=64, cs=8):
    """Keep `depth` steps of code words in flight instead of one: registers p2..p<depth>
    hold the steps after the next; the loop shifts them down and loads the step `depth`
    ahead (the same loads, later targets)."""
    regs = [f"p{d}" for d in range(2, depth + 1)]
    decl = "    LANE_ARRAY(uint, nwh, 3);\n"
    assert src.count(decl) == 1
    src = src.replace(decl, decl + "".join(f"    LANE_ARRAY(uint, {r}g, 3);\n    LANE_ARRAY(uint, {r}h, 3);\n" for r in regs))
    pre_start = src.index("    FOR_EACH_LANE(lane) {\n      const ulong adv = (ulong)(0u) * " + f"{stride}u;")
    pre_end = src.index("    }\n", src.index(LAST_LOAD, pre_start)) + len("    }\n")
    pre = src[pre_start:pre_end]
    extra = "".join(
        f"    if (first_step + {(d - 1) * cs}u < last_step) {{\n"
        + pre.replace("(ulong)(0u)", f"(ulong)({d - 1}u)").replace("LANE(nwg)", f"LANE({r}g)").replace("LANE(nwh)", f"LANE({r}h)")
        + "    }\n"
        for d, r in zip(range(2, depth + 1), regs))
    src = src[:pre_end] + extra + src[pre_end:]
    copy = "{ LANE(wg)[i] = LANE(nwg)[i]; LANE(wh)[i] = LANE(nwh)[i]; }"
    assert src.count(copy) == 1
    chain = ["nw"] + regs
    shift = "".join(f" LANE({a}g)[i] = LANE({b}g)[i]; LANE({a}h)[i] = LANE({b}h)[i];" for a, b in zip(chain, chain[1:]))
    src = src.replace(copy, copy[:-1] + shift + " }")
    guard = "      if (next_step < last_step) {\n"
    assert src.count(guard) == 1
    g0 = src.index(guard)
    g1 = src.index(LAST_LOAD, g0) + len(LAST_LOAD)
    body = src[g0:g1].replace(guard, f"      if (next_step + {(depth - 1) * cs}u < last_step) {{\n")
    body = body.replace("(ulong)(it)", f"(ulong)(it + {depth - 1}u)").replace("LANE(nwg)", f"LANE({regs[-1]}g)").replace("LANE(nwh)", f"LANE({regs[-1]}h)")
    return src[:g0] + body + src[g1:]

RING_FN = """DEVICE void cpa8(void* d, const void* s) { asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" :: "r"((unsigned)__cvta_generic_to_shared(d)), "l"(s)); }
DEVICE void cpa4(void* d, const void* s) { asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" :: "r"((unsigned)__cvta_generic_to_shared(d)), "l"(s)); }
DEVICE void cpa_commit() { asm volatile("cp.async.commit_group;"); }
template <int N> DEVICE void cpa_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N)); }
"""

def ring(src, stages, stride=64, cs=8, warps=8):
    """Code words streamed into a shared-memory ring of `stages` steps per simdgroup by
    cp.async (LDGSTS) instead of one step held in registers: the words in flight cost no
    registers. Per slot, lane l's words sit at uint2 entries l (g0 g1), 32 + l (h0 h1),
    64 + l (g2 h2), so the reads are conflict-free."""
    S = stages
    def fetch(step_expr, idx_expr):
        return (f"if ({step_expr} < last_step) {{ const ulong adv = (ulong)({idx_expr}) * {stride}u; "
                f"uint2* rd = &ring_[(sg * {S}u + ({idx_expr}) % {S}u) * 96u + lane]; "
                "cpa8(rd, codes + LANE(wo)[0] + adv); cpa8(rd + 32, codes + LANE(wo)[2] + adv); "
                "cpa4(&rd[64].x, codes + LANE(wo)[1] + adv); cpa4(&rd[64].y, codes + LANE(wo)[3] + adv); } cpa_commit();")
    pre_start = src.index("    FOR_EACH_LANE(lane) {\n      const ulong adv = (ulong)(0u) * " + f"{stride}u;")
    pre_end = src.index("    }\n", src.index(LAST_LOAD, pre_start)) + len("    }\n")
    pre = ("    FOR_EACH_LANE(lane) {\n"
           + "".join(f"      {fetch(f'first_step + {s * cs}u', f'{s}u')}\n" for s in range(S - 1))
           + "    }\n")
    src = src[:pre_start] + pre + src[pre_end:]
    copy_start = src.index("      FOR_EACH_LANE(lane) {\n        UNROLL for (uint i = 0; i <= 2u; ++i) { LANE(wg)[i] = LANE(nwg)[i];")
    guard = "      if (next_step < last_step) {\n"
    g0 = src.index(guard, copy_start)
    g1 = src.index(LAST_LOAD, g0) + len(LAST_LOAD)
    g1 = src.index("      }\n", g1) + len("      }\n")
    body = ("      FOR_EACH_LANE(lane) {\n"
            f"        cpa_wait<{S - 2}>();\n"
            f"        const uint2* rs = &ring_[(sg * {S}u + (it - 1u) % {S}u) * 96u + lane];\n"
            "        const uint2 a = rs[0], b = rs[32], c = rs[64];\n"
            "        LANE(wg)[0] = a.x; LANE(wg)[1] = a.y; LANE(wh)[0] = b.x; LANE(wh)[1] = b.y; LANE(wg)[2] = c.x; LANE(wh)[2] = c.y;\n"
            f"        {fetch(f'step + {(S - 1) * cs}u', f'it + {S - 2}u')}\n"
            "      }\n")
    src = src[:copy_start] + body + src[g1:]
    k0 = src.index('extern "C" __global__')
    src = src[:k0] + RING_FN + src[k0:]
    b0 = src.index("{\n", src.index('extern "C" __global__')) + 2
    return src[:b0] + f"  __shared__ __align__(16) uint2 ring_[{warps * S * 96}];\n" + src[b0:]

SHR_LINE = "     : (mul_lo((w)[MMA_IX_(j, K)], 1u << (32u - (L) - MMA_SH_(j, K))) >> (32u - (L))))\n"
HP_LINE = "  const uint hp_mask = opaque_u32(trellis_half_pair_mask()), hp_xor = opaque_u32(trellis_half_pair_xor());\n"

def shr_on_multiplier(src, which):
    """3inst's in-word windows with the right shift as a high multiply (IMAD.HI, the
    FMA-heavy pipe) instead of SHF (the ALU pipe, 3inst's busiest): for every window
    (`which` = "all") or every other one ("half"). The multiplier 2^L comes opaque, so
    ptxas cannot turn the multiply back into a shift."""
    assert src.count(SHR_LINE) == 1 and src.count(HP_LINE) == 1
    top = "mul_lo((w)[MMA_IX_(j, K)], 1u << (32u - (L) - MMA_SH_(j, K)))"
    hi = f"__umulhi({top}, hi_mul_)"
    lo = f"({top} >> (32u - (L)))"
    new = f"     : ({hi}))\n" if which == "all" else f"     : (((j) & 1u) ? {hi} : {lo}))\n"
    src = src.replace(SHR_LINE, new)
    return src.replace(HP_LINE, HP_LINE + "  const uint hi_mul_ = opaque_u32(1u << 12);\n")

lines = []

def emit(src, sym, twins, rows=17408, tail="5120 2 256", prefix=""):
    """Write each twin of `src` as u_<rows>_<prefix><twin>.cu and list it in units.txt."""
    for twin, f in twins.items():
        path = HERE / f"u_{rows}_{prefix}{twin}.cu"
        path.write_text(f(src))
        lines.append(f"{path.name} {sym} {rows} {tail}")
        print(path.name, sym)
for rows in ROWS:
    src, sym = example("mma_unit", [rows] + ARGS)
    twins = dict(TWINS)
    if rows in PF_ROWS:
        for a in (1, 2):
            twins[f"full-pf{a}"] = lambda s, a=a: prefetch(s, a)
            twins[f"floor-pf{a}"] = lambda s, a=a: prefetch(TWINS["floor"](s), a)
        for st in (3, 4):
            twins[f"full-ring{st}"] = lambda s, st=st: ring(s, st)
            twins[f"floor-ring{st}"] = lambda s, st=st: ring(TWINS["floor"](s), st)
        for a in (2, 3):
            twins[f"full-deep{a}"] = lambda s, a=a: deepen(s, a)
            twins[f"floor-deep{a}"] = lambda s, a=a: deepen(TWINS["floor"](s), a)
    emit(src, sym, twins, rows)
emit(*example("mma_unit", [17408, 5120, 2, "3inst", 12, 1, 1, 8, 16, "shared_dup", 1, 0, "f16", 0]), TWINS_3INST)
# Structure probes at 17408 rows, full and floor: 4 column splits (10 steps per simdgroup
# instead of 5) and x read from global memory (no staging, no barrier before the loop).
for name, (rt, cs, x_stage) in [("cs4", (1, 4, "shared")), ("xg", (1, 8, "global"))]:
    src, sym = example("mma_unit", [17408, 5120, 2, "1mad", 12, 1, rt, cs, 16, x_stage, 1, 0, "f16", 1])
    emit(src, sym, {t: TWINS[t] for t in ("full", "floor")}, tail=f"5120 2 {32 * rt * cs}", prefix=f"{name}-")
# The exact tier's goal kernel (17408 x 5120 k 3 M 1, `inline shared_decode rpg=2
# x=registers rps=3`, the 1mad weight as one fma of the biased byte sum): full; nodec (the
# weight is the state's bits as a float: the window kept, no LCG, byte sum, fma or rounding);
# floor (no window either).
def exact_weight(src, expr):
    pat = re.compile(r"const float wv = round_as<act_t>\(fma32\(trellis_biased_onemad\(s\).*?\);\n")
    new, n = pat.subn(f"const float wv = {expr};\n", src)
    assert n == 1
    return new

emit(*example("reduce_unit", [17408, 5120, 3, "1mad", 12, 1, 2, 3, 0, 1, 0, 0, 0, 0]), {
    "exact-full": lambda s: s,
    "exact-nodec": lambda s: exact_weight(s, "as_f32(s ^ 0x3c000000u)"),
    "exact-floor": lambda s: exact_weight(replace_state(s, "(w)[(j) % 4u] ^ ((j) * 2654435761u)", "TRELLIS_STATE_MUL"), "as_f32(s)"),
}, tail="5120 3 64 simt 6")
(HERE / "units.txt").write_text("\n".join(lines) + "\n")
