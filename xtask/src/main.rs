//! Project tasks: `cargo xtask verify | render | tune | bench`.

#[cfg(feature = "cuda")]
mod bench;
mod render;
mod tune;
mod verify;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

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
        /// Conformance vectors directory.
        #[arg(long, default_value = "../shared/vectors")]
        vectors: PathBuf,
        /// Also write the report here.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Write every specialization's Metal, CUDA and C++ source.
    Render {
        #[arg(long, default_value = "target/rendered")]
        out: PathBuf,
        /// The smaller catalog.
        #[arg(long)]
        quick: bool,
    },
    /// Measure candidates per key and write tuning/DEVICE-ID.toml.
    Tune(Box<tune::TuneArgs>),
    /// Tuned kernels vs dense bf16 cuBLAS and copy bandwidth on a CUDA device.
    #[cfg(feature = "cuda")]
    Bench {
        /// Only cuda is benchmarked against cuBLAS.
        #[arg(long, default_value = "cuda")]
        backend: String,
        /// Markdown report path.
        #[arg(long, default_value = "tuning/reports/nvidia-h200-bench.md")]
        out: PathBuf,
        /// Tuning table to take the tuned variants from (default: embedded/env tables).
        #[arg(long)]
        table: Option<PathBuf>,
    },
}

pub fn progress_bar(len: u64, what: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(len);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{prefix} [{bar:40}] {pos}/{len} {elapsed_precise} {msg}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar.set_prefix(what.to_string());
    bar
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> trellis::Result<bool> {
    match cli.cmd {
        Cmd::Verify {
            backend,
            quick,
            vectors,
            out,
        } => {
            let name = backend.unwrap_or_else(|| trellis::backend::default_name().to_string());
            let (text, ok) =
                match name.as_str() {
                    "cpu" => verify::run(&trellis::backend::CpuBackend::new()?, quick, &vectors)?,
                    "metal-sim" => verify::run(
                        &trellis::backend::metal_sim::MetalSimBackend::new()?,
                        quick,
                        &vectors,
                    )?,
                    #[cfg(feature = "cuda")]
                    "cuda" => verify::run(
                        &trellis::backend::cuda::CudaBackend::new(0)?,
                        quick,
                        &vectors,
                    )?,
                    #[cfg(target_os = "macos")]
                    "metal" => verify::run(
                        &trellis::backend::metal::MetalBackend::new()?,
                        quick,
                        &vectors,
                    )?,
                    other => return Err(trellis::Error::Unavailable {
                        backend: other.into(),
                        reason:
                            "not a backend this build can verify here (cpu, cuda, metal-sim; metal on macOS)"
                                .into(),
                    }),
                };
            print!("{text}");
            if let Some(p) = out {
                std::fs::write(&p, &text).map_err(|e| trellis::Error::file(&p, e))?;
            }
            Ok(ok)
        }
        Cmd::Render { out, quick } => {
            let n = render::render(&out, quick)?;
            println!("wrote {n} files under {}", out.display());
            Ok(true)
        }
        Cmd::Tune(args) => {
            if let Some(done) = tune::supervise() {
                return done.map(|()| true);
            }
            let name = args
                .backend
                .clone()
                .unwrap_or_else(|| trellis::backend::default_name().to_string());
            match name.as_str() {
                "cpu" => {
                    let b = trellis::backend::CpuBackend::new()?;
                    let desc = format!(
                        "{} threads",
                        std::thread::available_parallelism()
                            .map(|n| n.get())
                            .unwrap_or(1)
                    );
                    tune::run(&b, &args, desc)?;
                }
                #[cfg(feature = "cuda")]
                "cuda" => {
                    let b = trellis::backend::cuda::CudaBackend::new(0)?;
                    let i = b.info().clone();
                    let desc = format!(
                        "{}, sm_{}{}, {} SMs, {:.0} GiB",
                        i.name,
                        i.compute_capability.0,
                        i.compute_capability.1,
                        i.sm_count,
                        i.memory_bytes as f64 / (1u64 << 30) as f64
                    );
                    tune::run(&b, &args, desc)?;
                }
                #[cfg(target_os = "macos")]
                "metal" => {
                    let b = trellis::backend::metal::MetalBackend::new()?;
                    let desc = trellis::kernel::Backend::device_id(&b);
                    tune::run(&b, &args, desc)?;
                }
                other => {
                    return Err(trellis::Error::Unavailable {
                        backend: other.into(),
                        reason:
                            "not a backend this build can tune here (cpu, cuda; metal on macOS)"
                                .into(),
                    })
                }
            }
            Ok(true)
        }
        #[cfg(feature = "cuda")]
        Cmd::Bench {
            backend,
            out,
            table,
        } => {
            if backend != "cuda" {
                return Err(trellis::Error::invalid(
                    "backend",
                    backend,
                    "bench compares against cuBLAS: cuda only",
                ));
            }
            bench::run(&out, table.as_deref())?;
            Ok(true)
        }
    }
}
