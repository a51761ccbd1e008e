//! Every Metal specialization of the catalog, assembled as MLX assembles it
//! (`trellis::codegen::unit`), compiles with the host C++ compiler against the shim of
//! `<metal_stdlib>` in `templates/dialect/msl_shim`: a typo or a type error in the Metal
//! dialect fails here, on machines without Xcode. The same run checks that no `exact`
//! Metal kernel reduces with `simd_sum` (SPEC 5: the butterfly uses xor shuffles).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;
use trellis::family::{Family, FamilyVisitor};
use trellis::kernel::{Dialect, KernelSpec};
use trellis::numerics::Tier;

const SHIM_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/templates/dialect/msl_shim");
/// MSL before version 4 is C++14: a C++17 or C++20 construct (`if constexpr`, a
/// structured binding) that the host compiler takes in C++14 mode with a warning is an
/// error here, as on a Mac. (Not `-pedantic-errors`: a batch repeats the preludes'
/// macros with each kernel's values.)
const FLAGS: &[&str] = &[
    "-std=c++14",
    "-Werror=c++17-extensions",
    "-Werror=c++20-extensions",
    "-Wno-attributes",
    "-Wno-unknown-pragmas",
];

fn compiler() -> String {
    std::env::var("CXX").unwrap_or_else(|_| "c++".into())
}

struct Kernel {
    symbol: String,
    tier: Tier,
    /// The complete MLX source.
    source: String,
    /// Inputs MLX passes in the `constant` address space (fewer than 8 elements).
    constant_inputs: Vec<&'static str>,
}

/// One translation unit: `<metal_stdlib>` once, then each kernel in its own namespace
/// (the preludes repeat; their `#include` lines go, their identical macros may repeat).
struct Batch {
    text: String,
    /// (first line, kernel index), ascending.
    starts: Vec<(usize, usize)>,
}

fn batch(kernels: &[Kernel], range: std::ops::Range<usize>) -> Batch {
    let mut text = String::from("#include <metal_stdlib>\n");
    let mut line = 2;
    let mut starts = Vec::new();
    for i in range {
        let k = &kernels[i];
        starts.push((line, i));
        let mut part = format!("namespace ns_{} {{\n", k.symbol);
        for l in k.source.lines() {
            // Keep the line count of the original source (for error locations).
            part.push_str(if l.trim_start().starts_with("#include") {
                ""
            } else {
                l
            });
            part.push('\n');
        }
        part.push_str("}\n");
        line += part.lines().count();
        text.push_str(&part);
    }
    Batch { text, starts }
}

fn run(args: &[&str], file: &Path) -> (bool, String, String) {
    let out = Command::new(compiler())
        .args(FLAGS)
        .arg(format!("-I{SHIM_DIR}"))
        .args(args)
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C++ compiler `{}`: {e}", compiler()));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The kernel a compiler log's first `<file>:<line>:` points into.
fn culprit(log: &str, file: &Path, b: &Batch) -> Option<usize> {
    let prefix = format!("{}:", file.display());
    let line: usize = log
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .find_map(|rest| rest.split(':').next()?.parse().ok())?;
    b.starts
        .iter()
        .rev()
        .find(|(start, _)| *start <= line)
        .map(|&(_, i)| i)
}

/// What the host compiler cannot see of one kernel, once macros are expanded: whether it
/// reduces with `simd_sum`, and a `constant` input used otherwise than indexed.
struct Expanded {
    uses_simd_sum: bool,
    constant_misuse: Option<String>,
}

/// [`Expanded`] of each kernel of a batch.
fn expanded(preprocessed: &str, kernels: &[Kernel], b: &Batch) -> Vec<(usize, Expanded)> {
    b.starts
        .iter()
        .map(|&(_, i)| {
            let open = format!("namespace ns_{} {{", kernels[i].symbol);
            let at = preprocessed.find(&open).unwrap_or_else(|| {
                panic!("{} missing from the preprocessed batch", kernels[i].symbol)
            });
            let rest = &preprocessed[at + open.len()..];
            let end = rest.find("namespace ns_").unwrap_or(rest.len());
            let text = &rest[..end];
            let constant_misuse = kernels[i]
                .constant_inputs
                .iter()
                .find_map(|name| not_only_indexed(text, name));
            (
                i,
                Expanded {
                    uses_simd_sum: text.contains("simd_sum"),
                    constant_misuse,
                },
            )
        })
        .collect()
}

/// The first use of identifier `name` in `text` that is no `name[...]` (the signature's
/// `name [[buffer(i)]]` is one): MLX passes a small input as `const constant T*`, which
/// a `device` pointer parameter does not take, while the shim's address spaces are
/// empty, so the host compiler takes it.
fn not_only_indexed(text: &str, name: &str) -> Option<String> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut from = 0;
    while let Some(at) = text[from..].find(name).map(|i| i + from) {
        from = at + name.len();
        let before = text[..at].chars().next_back();
        let after = text[from..].trim_start().chars().next();
        if before.is_some_and(ident) || text[from..].starts_with(ident) {
            continue; // part of a longer identifier
        }
        if after != Some('[') {
            let line = text[..at].rfind('\n').map_or(0, |n| n + 1);
            let eol = text[at..].find('\n').map_or(text.len(), |n| n + at);
            return Some(format!("`{name}` in: {}", text[line..eol].trim()));
        }
    }
    None
}

/// The inputs MLX passes in the `constant` address space (fewer than 8 elements).
fn constant_inputs(k: &impl KernelSpec) -> Vec<&'static str> {
    k.inputs()
        .iter()
        .filter(|t| t.len() < 8)
        .map(|t| t.name)
        .collect()
}

#[test]
fn every_metal_specialization_compiles_against_the_shim() {
    let started = Instant::now();
    // Every registered family's specializations that fit Metal's limits.
    struct Collect(Vec<Kernel>);
    impl FamilyVisitor for Collect {
        fn visit<F: Family>(&mut self) {
            let limits = trellis::backend::nominal_limits("metal");
            for (p, vs) in trellis::verify::specializations::<F>(false, &limits) {
                for v in vs {
                    let k = F::kernel(&p, v);
                    let symbol = k.symbol();
                    let source = k
                        .unit(Dialect::Metal)
                        .unwrap_or_else(|e| panic!("{symbol} does not render for Metal: {e}"));
                    self.0.push(Kernel {
                        source,
                        symbol,
                        tier: F::tier(&v),
                        constant_inputs: constant_inputs(&k),
                    });
                }
            }
        }
    }
    let mut c = Collect(Vec::new());
    trellis::families::for_each(&mut c);
    // The fast tier's prescale of x on the device (no family: it has nothing to tune).
    for k in trellis::families::reduce_mma::Prescale::catalog() {
        c.0.push(Kernel {
            source: k.unit(Dialect::Metal).expect("prescale renders for Metal"),
            symbol: k.id().unique_symbol(),
            tier: Tier::Exact,
            constant_inputs: constant_inputs(&k),
        });
    }
    let kernels = c.0;
    assert!(
        !kernels.is_empty(),
        "the catalog has no Metal specializations"
    );

    let dir = tempfile::tempdir().expect("temp dir");
    let jobs = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(1, 8);
    let n_batches = (jobs * 2).min(kernels.len());
    let per = kernels.len().div_ceil(n_batches);
    let batches: Vec<(PathBuf, Batch)> = (0..kernels.len())
        .step_by(per)
        .enumerate()
        .map(|(bi, lo)| {
            let b = batch(&kernels, lo..(lo + per).min(kernels.len()));
            let path = dir.path().join(format!("metal_batch_{bi}.cpp"));
            std::fs::write(&path, &b.text).expect("write batch");
            (path, b)
        })
        .collect();

    // (batch, compiled, log, what each kernel expands to)
    type Outcome = (usize, bool, String, Vec<(usize, Expanded)>);
    let outcomes: Mutex<Vec<Outcome>> = Mutex::new(Vec::new());
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| loop {
                let bi = next.fetch_add(1, Ordering::Relaxed);
                let Some((path, b)) = batches.get(bi) else {
                    break;
                };
                let (ok, _, log) = run(&["-fsyntax-only"], path);
                let (pre_ok, pre, pre_log) = run(&["-E", "-P"], path);
                assert!(
                    pre_ok,
                    "preprocessing {} failed:\n{pre_log}",
                    path.display()
                );
                let each = expanded(&pre, &kernels, b);
                outcomes.lock().unwrap().push((bi, ok, log, each));
            });
        }
    });
    let mut outcomes = outcomes.into_inner().unwrap();
    outcomes.sort_by_key(|o| o.0);

    if let Some((bi, _, log, _)) = outcomes.iter().find(|o| !o.1) {
        let (path, b) = &batches[*bi];
        let Some(i) = culprit(log, path, b) else {
            panic!("batch {} failed to compile:\n{log}", path.display());
        };
        // Compile the culprit alone, as MLX would see it, for a clean log.
        let k = &kernels[i];
        let single = dir.path().join(format!("{}.metal.cpp", k.symbol));
        std::fs::write(&single, &k.source).expect("write kernel");
        let (ok, _, single_log) = run(&["-fsyntax-only"], &single);
        let shown = if ok {
            log.as_str()
        } else {
            single_log.as_str()
        };
        panic!(
            "Metal kernel {} does not compile against the shim ({}):\n{shown}",
            k.symbol,
            if ok { "batch log" } else { "its own log" },
        );
    }

    let mut fast_with_simd_sum = 0;
    let mut constant_inputs = 0;
    for (_, _, _, each) in &outcomes {
        for (i, e) in each {
            let (i, uses) = (*i, e.uses_simd_sum);
            if let Some(misuse) = &e.constant_misuse {
                panic!(
                    "Metal kernel {} uses a `constant` input otherwise than indexed: {misuse}",
                    kernels[i].symbol
                );
            }
            constant_inputs += kernels[i].constant_inputs.len();
            match kernels[i].tier {
                Tier::Exact => assert!(
                    !uses,
                    "exact-tier Metal kernel {} uses simd_sum (SPEC 5 asks for the xor butterfly)",
                    kernels[i].symbol
                ),
                Tier::Fast => fast_with_simd_sum += uses as usize,
            }
        }
    }
    assert!(
        constant_inputs > 0,
        "no kernel has a `constant` input: the check of their use would be vacuous"
    );
    let fast = kernels.iter().filter(|k| k.tier == Tier::Fast).count();
    assert!(
        fast == 0 || fast_with_simd_sum > 0,
        "no fast-tier Metal kernel uses simd_sum: the simd_sum check would be vacuous"
    );
    eprintln!(
        "{} Metal kernels ({} fast, {} of them with simd_sum) compiled in {} batches on {} jobs in {:.1} s",
        kernels.len(),
        fast,
        fast_with_simd_sum,
        batches.len(),
        jobs,
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn standalone_matches_mlx_signature_rules() {
    // A small input (< 8 elements) goes to `constant`, outputs to `device`, and only the
    // thread attributes the body names are declared, with MLX's types.
    use trellis::families::reduce::ReduceFamily;
    let p = ReduceFamily::catalog(true).remove(0);
    let k = ReduceFamily::kernel(&p, ReduceFamily::default_variant(&p, Tier::Exact));
    let src = k.unit(Dialect::Metal).unwrap();
    let sig_at = src.find("[[kernel]] void ").expect("kernel signature");
    let sig = &src[sig_at..src[sig_at..].find(") {").unwrap() + sig_at];
    assert!(
        sig.contains("uint3 threadgroup_position_in_grid [[threadgroup_position_in_grid]]"),
        "{sig}"
    );
    assert!(
        sig.contains("uint simdgroup_index_in_threadgroup [[simdgroup_index_in_threadgroup]]"),
        "{sig}"
    );
    assert!(!sig.contains("thread_position_in_grid [["), "{sig}");
    for (i, t) in k.inputs().iter().enumerate() {
        let space = if t.len() < 8 { "constant" } else { "device" };
        let want = format!(
            "const {space} {}* {} [[buffer({i})]]",
            t.elem.c_type(Dialect::Metal),
            t.name
        );
        assert!(sig.contains(&want), "missing `{want}` in\n{sig}");
    }
    let n = k.inputs().len();
    for (j, t) in k.outputs().iter().enumerate() {
        let want = format!(
            "device {}* {} [[buffer({})]]",
            t.elem.c_type(Dialect::Metal),
            t.name,
            n + j
        );
        assert!(sig.contains(&want), "missing `{want}` in\n{sig}");
    }
}

#[test]
fn a_constant_input_used_unindexed_is_found() {
    let sig = "const constant float* s [[buffer(2)]],\n";
    assert_eq!(
        not_only_indexed(&format!("{sig}x = s[i] + s [3] + scales[i];"), "s"),
        None
    );
    let found = not_only_indexed(&format!("{sig}x = load4(s + 4u);"), "s").unwrap();
    assert!(found.contains("load4(s + 4u)"), "{found}");
}

/// The shim's flags refuse what MSL (C++14) refuses and the host's default C++ takes:
/// a unit the shim compiles becomes an error with an `if constexpr` or a structured
/// binding in its body.
#[test]
fn a_cxx17_construct_in_a_metal_unit_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let body = |extra: &str| {
        format!(
            "#include <metal_stdlib>\nusing namespace metal;\n\
             [[kernel]] void k(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) {{\n\
             float v = metal::fmax(y[i], 0.0f);\n{extra}\ny[i] = v;\n}}\n"
        )
    };
    let check = |name: &str, extra: &str| {
        let file = dir.path().join(name);
        std::fs::write(&file, body(extra)).unwrap();
        run(&["-fsyntax-only", "-x", "c++"], &file)
    };
    let (ok, _, log) = check("plain.metal", "");
    assert!(ok, "the plain unit must compile: {log}");
    for (name, extra, says) in [
        (
            "constexpr_if.metal",
            "if constexpr (sizeof(float) == 4) { v += 1.0f; }",
            "if constexpr",
        ),
        (
            "binding.metal",
            "struct P { float a, b; }; P p = {v, v}; auto [a, b] = p; v = a + b;",
            "structured binding",
        ),
    ] {
        let (ok, _, log) = check(name, extra);
        assert!(!ok && log.contains(says), "{name}: {log}");
    }
}
