//! Project tasks: `cargo xtask verify | render | tune | bench`.

#[cfg(feature = "cuda")]
mod bench;
mod render;
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
        /// cpu, cuda or metal (default: the best available).
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
        /// Only this family (`reduce_mma`: the matrix-unit fast tier vs cuBLAS).
        #[arg(long)]
        family: Option<String>,
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
            let (text, ok) = AnyBackend::open(&name)?.visit(verify::Job {
                quick,
                vectors: &vectors,
            })?;
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
            if let Some(done) = tune::supervise(&args) {
                return done.map(|()| true);
            }
            let name = args
                .backend
                .clone()
                .unwrap_or_else(|| trellis::backend::default_name().to_string());
            let backend = AnyBackend::open(&name)?;
            let description = backend.describe();
            backend.visit(tune::Job {
                args: &args,
                description,
            })?;
            Ok(true)
        }
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
            if family.as_deref() == Some("reduce_mma") {
                bench::run_mma(&out)?;
                return Ok(true);
            }
            bench::run(&out, table.as_deref())?;
            Ok(true)
        }
    }
}
