#!/usr/bin/env bash
# Type-check (and clippy) the macOS-only Metal backend (`src/backend/metal.rs`) on Linux,
# against the real mlx-rs 0.33 / mlx-sys 0.7 sources. Nothing is linked or run: mlx-sys's
# build script is cut to its bindgen step, the bundled mlx-c headers get x86-64 typedefs
# for float16_t / bfloat16_t (they are ARM-only), and a scratch copy of this checkout has
# its `target_os = "macos"` gates widened to `unix`.
#
# Needs: network once (`cargo fetch`, `pip install libclang` for libclang.so).
# The fifty-fifth session added `tests/metal_gpu.rs` to what it checks.
# Usage: prototypes/session43/metal_typecheck.sh [SCRATCH_DIR]   (default /tmp/mlxcheck)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
scratch=${1:-/tmp/mlxcheck}
(cd "$repo" && cargo fetch -q)
reg=$(echo ~/.cargo/registry/src/index.crates.io-*)
python3 -c "import clang" 2>/dev/null || pip install -q libclang
export LIBCLANG_PATH=$(python3 -c "import clang, os; print(os.path.dirname(clang.__file__) + '/native')")
export BINDGEN_EXTRA_CLANG_ARGS="-I$(gcc -print-file-name=include)"

rm -rf "$scratch" && mkdir -p "$scratch/trellis"
cp -r "$reg/mlx-sys-0.7.0" "$scratch/mlx-sys"
cp -r "$reg/mlx-rs-0.33.0" "$scratch/mlx-rs"
(cd "$repo" && git ls-files | grep -v '^prototypes/' | tar cf - -T -) | (cd "$scratch/trellis" && tar xf -)

cd "$scratch"
python3 - <<'PY'
import glob
def edit(path, pairs):
    s = open(path).read()
    for a, b in pairs:
        assert a in s, (path, a)
        s = s.replace(a, b)
    open(path, 'w').write(s)
edit('mlx-sys/build.rs', [('    build_and_link_mlx_c();\n', '')])
edit('mlx-sys/src/mlx-c/mlx/c/half.h', [
    ('#if defined(__ARM_FEATURE_FP16_SCALAR_ARITHMETIC) || defined(__aarch64__)', '#if 1'),
    ('#include <arm_fp16.h>\n', ''), ('typedef __fp16 float16_t;', 'typedef _Float16 float16_t;'),
    ('#if defined(__ARM_FEATURE_BF16) || defined(__aarch64__)', '#if 1'),
    ('#include <arm_bf16.h>\n', '')])
edit('trellis/Cargo.toml', [("[target.'cfg(target_os = \"macos\")'.dependencies]",
                             "[target.'cfg(any(unix, windows))'.dependencies]")])
with open('trellis/Cargo.toml', 'a') as f:
    f.write('\n[patch.crates-io]\nmlx-sys = { path = "../mlx-sys" }\nmlx-rs = { path = "../mlx-rs" }\n')
for p in glob.glob('trellis/src/**/*.rs', recursive=True) + glob.glob('trellis/tests/*.rs'):
    s = open(p).read()
    if 'target_os = "macos"' in s:
        open(p, 'w').write(s.replace('target_os = "macos"', 'unix'))
PY
cd trellis
export CARGO_TARGET_DIR="$scratch/target"
# The probe: an error planted in metal.rs must fail the check, or metal.rs was not compiled.
echo 'fn __probe() { let _: u32 = ""; }' >> src/backend/metal.rs
if cargo check -q --lib --no-default-features 2>/dev/null; then
    echo "metal.rs was not compiled" >&2; exit 1
fi
sed -i '$d' src/backend/metal.rs
cargo clippy -q --lib --no-default-features -- -D warnings 2>&1 | grep -v '^warning.*never used\|mlx-sys' || true
cargo clippy --lib --no-default-features -- -D warnings >/dev/null 2>&1 && echo "metal.rs: type-checks and clippy-clean against mlx-rs 0.33"
# The macOS-only GPU test (fifty-fifth session on): the generic facade checks on `MetalBackend`,
# probed the same way.
echo 'fn __probe() { let _: u32 = ""; }' >> tests/metal_gpu.rs
if cargo check -q --no-default-features --test metal_gpu 2>/dev/null; then
    echo "tests/metal_gpu.rs was not compiled" >&2; exit 1
fi
sed -i '$d' tests/metal_gpu.rs
cargo clippy --no-default-features --test metal_gpu -- -D warnings 2>&1 | grep -v 'mlx-sys' | tail -20
cargo clippy --no-default-features --test metal_gpu -- -D warnings >/dev/null 2>&1 && echo "tests/metal_gpu.rs: type-checks and clippy-clean"
