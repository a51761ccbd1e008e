#!/usr/bin/env python3
"""A SIMT fast tier at M = 1, measured before it is built: the exact tier's M 1 winners
(tuning/nvidia-h200.toml, 1mad L 12, both Qwen3-14B shapes, k 2 / 3 / 4), each with a
twin that skips SPEC 4's rounding of the weight to bf16 (`round_as<act_t>`: one F2FP a
weight). SPEC 7 v2 allows the weight in f32 (value * scale, the row scale folded into the
fma as the exact tier folds it), so the twin is what a fast SIMT `reduce` variant would
run; the question is whether it beats the matrix-unit fast winners at M 1 (bench call AK:
fast 25.2 / 28.3 / 25.9 us at 17408 x 5120 k 2 / 3 / 4, 28.2 / 30.3 / 27.1 at 5120 x
17408; exact 28.7 / 29.6 / 29.7 and 32.0 / 32.0 / 32.6).

Run here (cargo): writes prototypes/session32/simt/u_*.cu and units.txt (git-ignored), for
`bash prototypes/session32/simt_fast.sh` on the device (the harness of
prototypes/ablation, interleaved rounds, >= 256 MB of code words rotated).
"""
import re, subprocess, pathlib

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
OUT = HERE / "simt"
# rows, cols, k, rows_per_group, rows_per_simd, scalar words, prefetch, stream (the table's M 1 winners)
WINNERS = [
    (17408, 5120, 2, 4, 3, 1, 0, 0),
    (17408, 5120, 3, 2, 3, 0, 0, 0),
    (17408, 5120, 4, 4, 3, 1, 0, 0),
    (5120, 17408, 2, 1, 2, 0, 1, 0),
    (5120, 17408, 3, 2, 2, 0, 1, 1),
    (5120, 17408, 4, 1, 2, 0, 1, 0),
]
ROUNDED = re.compile(r"const float wv = round_as<act_t>\((fma32\(trellis_biased_onemad\(s\).*?\))\);\n")

lines = []
for rows, cols, k, rpg, rps, scalar, pf, stream in WINNERS:
    args = [rows, cols, k, "1mad", 12, 1, rpg, rps, 0, 1, scalar, pf, stream, 0]
    src = subprocess.run(["cargo", "run", "--release", "-q", "--example", "reduce_unit", "--"] + [str(a) for a in args],
                         cwd=ROOT, check=True, capture_output=True, text=True).stdout
    sym = re.search(r"reduce_[0-9a-f]{16}", src).group(0)
    noround, n = ROUNDED.subn(lambda m: f"const float wv = {m.group(1)};\n", src)
    assert n >= 1, (rows, cols, k)
    for twin, text in (("full", src), ("noround", noround)):
        name = f"u_{rows}_k{k}-{twin}.cu"
        (OUT / name).write_text(text)
        lines.append(f"{name} {sym} {rows} {cols} {k} {32 * rpg} simt {rpg * rps}")
        print(name, sym, n)
(OUT / "units.txt").write_text("\n".join(lines) + "\n")
