//! Project tasks: `cargo xtask verify | render | tune | bench`.

#[cfg(feature = "cuda")]
mod bench;
mod random;
mod render;
mod swiglu;
mod tune;
mod verify;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use trellis::backend::AnyBackend;

#[derive(Parser)]
#[command(name = "cargo xtask", about = "trellis project tasks")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Render, compile and run every specialization against the CPU reference.
    Verify {
        /// cpu, cuda, metal or metal-sim (default: the best available).
        #[arg(long)]
        backend: Option<String>,
        /// A smaller catalog (one launch shape per representation).
        #[arg(long)]
        quick: bool,
        /// Conformance vectors directory (the default is relative to where it runs: the
        /// workspace root, beside `../shared`).
        #[arg(long, default_value = "../shared/vectors")]
        vectors: PathBuf,
        /// Also write the report here.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Instead of the catalog: this many random problems through the library facade
        /// (`ops::matvec`, `ops::gate_up`, exact and fast, the selector's variants: the
        /// tables embedded in this build, then this checkout's `tuning/local/` and
        /// `$TRELLIS_TUNING_DIR/*.toml`), against the CPU reference: 1 to 100000.
        #[arg(long, conflicts_with = "quick", value_parser = clap::value_parser!(u32).range(1..=100_000))]
        random: Option<u32>,
        /// Seed of the random problems.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Write every specialization's Metal, CUDA and C++ source.
    Render {
        #[arg(long, default_value = "target/rendered")]
        out: PathBuf,
        /// The smaller catalog.
        #[arg(long)]
        quick: bool,
        /// Then compile every CUDA unit with NVRTC for this architecture (e.g. sm_90), as
        /// the CUDA backend would, without a device, and write each unit's registers and
        /// spills (ptxas's report) to `<out>/cuda/ptxas.md`; fails naming each unit that
        /// does not compile. Needs only the NVRTC library (`libnvrtc.so`).
        #[cfg(feature = "cuda")]
        #[arg(long, value_name = "ARCH")]
        nvrtc: Option<String>,
    },
    /// Measure candidates per key and write tuning/local/DEVICE-ID.toml (or --out).
    Tune(Box<tune::TuneArgs>),
    /// Tuned kernels vs dense bf16 cuBLAS and copy bandwidth on a CUDA device.
    #[cfg(feature = "cuda")]
    Bench {
        /// Only cuda is benchmarked against cuBLAS.
        #[arg(long, default_value = "cuda")]
        backend: String,
        /// Markdown report path (the committed reports, `tuning/reports/`, are written only
        /// when named here).
        #[arg(long, default_value = "target/bench.md")]
        out: PathBuf,
        /// A tuning table layered over the selector's (embedded, `tuning/local/`,
        /// `$TRELLIS_TUNING_DIR`), as the runtime layers tables: its entry is taken where it
        /// ties with theirs (the same nearest bucket and measured shape), and keys it
        /// lacks come from them.
        #[arg(long)]
        table: Option<PathBuf>,
        /// Only this family (`reduce_mma`: the matrix-unit fast tier vs cuBLAS).
        #[arg(long)]
        family: Option<String>,
    },
}

pub fn progress_bar(len: u64, what: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(len);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{prefix} [{bar:40}] {pos}/{len} {elapsed_precise} (eta {eta}) {msg}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar.set_prefix(what.to_string());
    bar
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Cmd::Tune(args) = &cli.cmd {
        if args.stamp || args.summary || args.plan {
            let done = if args.stamp {
                tune::stamp(args)
            } else if args.plan {
                tune::print_plan(args)
            } else {
                tune::print_summary(args)
            };
            return match done {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {}", trellis::error::one_line(&e.to_string()));
                    ExitCode::FAILURE
                }
            };
        }
        // The supervisor only relays the worker's status; the worker prints.
        if let Some(code) = tune::supervise() {
            return code;
        }
        return match tune_here(args) {
            Ok(o) if o.budget_spent => ExitCode::from(tune::BUDGET_SPENT),
            Ok(_) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {}", trellis::error::one_line(&e.to_string()));
                ExitCode::FAILURE
            }
        };
    }
    match run(cli) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {}", trellis::error::one_line(&e.to_string()));
            ExitCode::FAILURE
        }
    }
}

/// The tuner itself (in the supervised worker), on the named or best backend.
fn tune_here(args: &tune::TuneArgs) -> trellis::Result<tune::Outcome> {
    let name = args
        .backend
        .clone()
        .unwrap_or_else(|| trellis::backend::default_name().to_string());
    let backend = AnyBackend::open(&name)?;
    let description = backend.describe();
    backend.visit(tune::Job { args, description })
}

fn run(cli: Cli) -> trellis::Result<bool> {
    match cli.cmd {
        Cmd::Verify {
            backend,
            quick,
            vectors,
            out,
            random,
            seed,
        } => {
            // The report's path is checked before the run (a missing directory named
            // after minutes of checks loses them; a pipe would block the write forever).
            if let Some(p) = &out {
                trellis::io::check_output(p)?;
            }
            let name = backend.unwrap_or_else(|| trellis::backend::default_name().to_string());
            let backend = AnyBackend::open(&name)?;
            let (text, ok) = match random {
                Some(n) => backend.visit(random::Job {
                    n: n as usize,
                    seed,
                }),
                None => backend.visit(verify::Job {
                    quick,
                    vectors: &vectors,
                })?,
            };
            print!("{text}");
            if let Some(p) = out {
                trellis::io::write_atomic(&p, text.as_bytes())?;
            }
            Ok(ok)
        }
        Cmd::Render {
            out,
            quick,
            #[cfg(feature = "cuda")]
            nvrtc,
        } => {
            let n = render::render(&out, quick)?;
            println!("wrote {n} files under {}", out.display());
            #[cfg(feature = "cuda")]
            if let Some(arch) = nvrtc {
                let started = std::time::Instant::now();
                let (units, failed) = render::compile_cuda(&out, &arch)?;
                for e in &failed {
                    eprintln!("error: {}", trellis::error::one_line(&e.to_string()));
                }
                println!(
                    "{units} CUDA units compiled with NVRTC for {arch}: {} passed, {} failed ({:.1} s); registers and spills in {}",
                    units - failed.len(),
                    failed.len(),
                    started.elapsed().as_secs_f64(),
                    out.join("cuda").join("ptxas.md").display()
                );
                return Ok(failed.is_empty());
            }
            Ok(true)
        }
        Cmd::Tune(_) => unreachable!("handled in main"),
        #[cfg(feature = "cuda")]
        Cmd::Bench {
            backend,
            out,
            table,
            family,
        } => {
            if backend != "cuda" {
                return Err(trellis::Error::invalid(
                    "backend",
                    backend,
                    "bench compares against cuBLAS: cuda only",
                ));
            }
            trellis::io::check_output(&out)?; // before the GPU, as verify's
            use trellis::families::reduce_mma::ReduceMmaFamily;
            let mma = |f: &str| trellis::families::is::<ReduceMmaFamily>(f);
            match (family.as_deref(), &table) {
                // Every launch shape of the matrix-unit families, no table involved.
                (Some(f), Some(_)) if mma(f) => {
                    return Err(trellis::Error::invalid(
                        "table",
                        "given",
                        "--family reduce_mma times every launch shape, no table's choice",
                    ))
                }
                (Some(f), None) if mma(f) => {
                    bench::run_mma(&out)?;
                    return Ok(true);
                }
                (Some(other), _) => {
                    return Err(trellis::Error::invalid(
                        "family",
                        other,
                        "bench takes --family reduce_mma only (without it: every family)",
                    ))
                }
                (None, _) => {}
            }
            bench::run(&out, table.as_deref())?;
            Ok(true)
        }
    }
}
