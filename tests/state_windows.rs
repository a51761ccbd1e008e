//! `TRELLIS_STATE_MUL` (`templates/dialect/cuda.inc`), the state windows of the CUDA SIMT loops
//! up to M = 4, takes a window inside a word through a multiply by a power of two from
//! constant memory. The CPU and Metal kernels never render it, so their bit-for-bit tests
//! do not reach it; here its text, cut from a rendered CUDA unit, is compiled by the host
//! C++ compiler and must give `TRELLIS_STATE`'s state (common.h, cut from the same unit) for
//! every k, L and weight of a run, on random and extreme code words.

use std::process::Command;
use trellis::families::reduce::Reduce;
use trellis::families::simt::{MStrategy, Proj, Representation, RowScales, Variant, XStage};
use trellis::kernel::{Dialect, KernelSpec};
use trellis::numerics::Tier;
use trellis::{Code, DType, ScaleDType};

fn cuda_unit(m: u32) -> String {
    unit(m, Dialect::Cuda)
}

fn unit(m: u32, dialect: Dialect) -> String {
    let kernel = Reduce {
        rows: 64,
        cols: 256,
        t: 256,
        proj: Proj {
            k: 3,
            l: 12,
            code: Code::OneMad,
        },
        m,
        act: DType::Bf16,
        scale: RowScales::Stored(ScaleDType::F16),
        variant: Variant {
            repr: Representation::Inline,
            m_strategy: MStrategy::SharedDecode,
            rows_per_group: 1,
            x_stage: XStage::Registers,
            tier: Tier::Exact,
            rows_per_simd: 2,
            max_registers: 0,
            scalar_words: false,
            prefetch_words: false,
            stream_words: false,
            interleaved_x: false,
        },
    };
    kernel.unit(dialect).unwrap()
}

/// The lines of the definition that starts with `start`, through its last `\`
/// continuation.
fn definition(unit: &str, start: &str) -> String {
    let mut out = String::new();
    let mut lines = unit.lines().skip_while(|l| !l.starts_with(start));
    for l in lines.by_ref() {
        out.push_str(l);
        out.push('\n');
        if !l.ends_with('\\') {
            break;
        }
    }
    assert!(!out.is_empty(), "no `{start}` in the unit");
    out
}

#[test]
fn mul_windows_are_rendered_up_to_m4_on_cuda_only() {
    for m in [1, 2, 4] {
        let unit = cuda_unit(m);
        assert!(unit.contains("TRELLIS_STATE_MUL(w[r]"), "M = {m}");
    }
    let m8 = cuda_unit(8);
    assert!(!m8.contains("TRELLIS_STATE_MUL") && !m8.contains("trellis_pow2"));
    for d in [Dialect::Cpu, Dialect::Metal] {
        for m in [1, 2, 4, 8] {
            let text = unit(m, d);
            assert!(
                text.contains("TRELLIS_STATE(") && !text.contains("TRELLIS_STATE_MUL"),
                "{d} M = {m}"
            );
        }
    }
}

#[test]
fn mul_windows_take_the_same_state_as_shift_and_mask() {
    let unit = cuda_unit(1);
    let program = format!(
        r#"#include <cstdio>
#include <cstdint>
typedef unsigned int uint;
#define __constant__
static uint funnel_r(uint lo, uint hi, uint off) {{ return (lo >> off) | (hi << (32u - off)); }}
{pow2}{pos}{ix}{state}{state_mul}
int main() {{
  uint64_t x = 0x9E3779B97F4A7C15ull;
  long checked = 0;
  for (int trial = 0; trial < 400; ++trial) {{
    uint w[9];
    for (int i = 0; i < 9; ++i) {{
      x ^= x << 13; x ^= x >> 7; x ^= x << 17;
      w[i] = trial == 0 ? 0xFFFFFFFFu : trial == 1 ? 0u : trial == 2 ? 0x80000001u : (uint)x;
    }}
    for (uint k = 1; k <= 8; ++k)
      for (uint l = k + 1; l <= 16; ++l)
        for (uint j = 0; j < 32; ++j) {{
          const uint a = TRELLIS_STATE(w, j, k, l), b = TRELLIS_STATE_MUL(w, j, k, l);
          if (a != b) {{ printf("k %u L %u j %u: %u != %u\n", k, l, j, a, b); return 1; }}
          ++checked;
        }}
  }}
  printf("%ld\n", checked);
  return 0;
}}
"#,
        pow2 = definition(&unit, "__constant__ uint trellis_pow2"),
        pos = definition(&unit, "#define TS_POS_"),
        ix = definition(&unit, "#define TS_IX_"),
        state = definition(&unit, "#define TRELLIS_STATE("),
        state_mul = definition(&unit, "#define TRELLIS_STATE_MUL("),
    );
    let dir = std::env::temp_dir().join(format!("trellis-state-windows-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("windows.cpp");
    let exe = dir.join("windows");
    std::fs::write(&src, &program).unwrap();
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let built = Command::new(cxx)
        .args(["-std=c++17", "-O1", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "{}\n{program}",
        String::from_utf8_lossy(&built.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{out}");
    // 400 code-word sets x every (k, L) pair of SPEC's ranges (k 1-8, L k+1..16) x 32.
    let pairs: u64 = (1..=8u64).map(|k| 16 - k).sum();
    assert_eq!(out.trim().parse::<u64>().unwrap(), 400 * pairs * 32);
    let _ = std::fs::remove_dir_all(&dir);
}
