//! `trellis`: make, quantize, inspect and multiply trellis-coded weights (SPEC.md).
//!
//! The subcommand and flag names are a contract used by outside checkers; see
//! `docs/cli.md`. Every failure (a bad flag, no command at all, a bad file, a size over
//! the limits, an `--out` that names an input) prints exactly one line
//! `error: <message>` on stderr and exits with status 1; `--help` and `--version` are
//! not failures. Outputs are written atomically, so a failed command never leaves a
//! (half-written) output file behind, and never replaces an input.

use clap::{Args, Parser, Subcommand, ValueEnum};
use half::f16;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use trellis::encode::{self, EncodeOptions};
use trellis::error::one_line;
use trellis::io::{self, SafetensorsFile};
use trellis::ScaleDType;
use trellis::{reference, Activations, Code, DType, Error, Geometry, QuantizedMatrix, Result};

#[derive(Parser, Debug)]
#[command(
    name = "trellis",
    version,
    about = "Trellis-coded (QTIP/EXL3) weights: make, quantize, inspect and multiply them",
    long_about = "Trellis-coded (QTIP/EXL3) weights: make, quantize, inspect and multiply them.\n\n\
        Files are safetensors (SPEC section 8): a quantized matrix is `<prefix>.codes` (u32), \
        `<prefix>.scales` (f16/f32), `<prefix>.lut` (code lut) and the metadata \
        `<prefix>.trellis`; activations are a tensor `x` [M, C] in bf16, f16 or f32.\n\n\
        On failure: one line `error: <message>` on stderr, exit status 1, no output file."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Write a random quantized matrix (every bit pattern is a valid code).
    Random(RandomArgs),
    /// Write random Gaussian activations `x` [M, C].
    RandomX(RandomXArgs),
    /// Write a random dense Gaussian matrix [R, C] (input for `quantize`).
    RandomDense(RandomDenseArgs),
    /// Quantize a dense matrix from a safetensors file; prints the MSE.
    Quantize(QuantizeArgs),
    /// y = x W^T in the canonical order (SPEC section 5); writes `y` [M, R] in the dtype of x.
    Matvec(MatvecArgs),
    /// mid = silu(G x) * (U x) (SPEC section 6); writes `mid` [M, R] in the dtype of x.
    GateUp(GateUpArgs),
    /// Print the geometry of every quantized matrix in a file, or (--devices) the backends.
    Info(InfoArgs),
    /// Which kernel variant the tuning tables choose for a key on a device, and why.
    Select(SelectArgs),
}

/// Scale dtype of generated matrices.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum ScaleArg {
    F16,
    F32,
}

/// How a matrix is coded: the flags `random` and `quantize` share.
#[derive(Args, Debug)]
struct CodingArgs {
    /// Bits per weight, 1..=8.
    #[arg(long, value_name = "K")]
    k: u32,
    /// Trellis state bits, k < L <= 16.
    #[arg(long, value_name = "L")]
    l: u32,
    /// Weights per block (a multiple of 32 dividing C).
    #[arg(long, value_name = "T", default_value_t = 256)]
    t: usize,
    /// Code: 1mad, 3inst, mcg, mul1 or lut (lut: `random` seeds a Gaussian table with
    /// --seed; `quantize` takes --lut or the same seeded table).
    #[arg(long, value_name = "CODE")]
    code: Code,
}

#[derive(Args, Debug)]
#[command(allow_negative_numbers = true)]
struct RandomArgs {
    /// R: output features.
    #[arg(long, value_name = "R")]
    rows: usize,
    /// C: input features (a multiple of T).
    #[arg(long, value_name = "C")]
    cols: usize,
    #[command(flatten)]
    coding: CodingArgs,
    /// Seed of the ChaCha8 generator.
    #[arg(long, value_name = "S", default_value_t = 0)]
    seed: u64,
    /// Output safetensors file.
    #[arg(long, value_name = "W.safetensors")]
    out: PathBuf,
    /// Tensor name prefix.
    #[arg(long, default_value = "w")]
    prefix: String,
    /// Dtype of the per-row scales (values drawn uniformly from [0.01, 0.05)).
    #[arg(long, value_enum, default_value_t = ScaleArg::F16)]
    scale_dtype: ScaleArg,
}

#[derive(Args, Debug)]
#[command(allow_negative_numbers = true)]
struct RandomXArgs {
    /// M: samples (rows of x).
    #[arg(long, value_name = "M")]
    m: usize,
    /// C: columns of x (the weight matrix's input features).
    #[arg(long, value_name = "C")]
    cols: usize,
    /// bf16, f16 or f32.
    #[arg(long, default_value = "bf16")]
    dtype: DType,
    /// Seed of the ChaCha8 generator.
    #[arg(long, value_name = "S", default_value_t = 0)]
    seed: u64,
    /// Output safetensors file.
    #[arg(long, value_name = "X.safetensors")]
    out: PathBuf,
    /// Tensor name.
    #[arg(long, default_value = "x")]
    name: String,
}

#[derive(Args, Debug)]
#[command(allow_negative_numbers = true)]
struct RandomDenseArgs {
    /// R: rows (output features).
    #[arg(long, value_name = "R")]
    rows: usize,
    /// C: columns (input features).
    #[arg(long, value_name = "C")]
    cols: usize,
    /// bf16, f16 or f32.
    #[arg(long, default_value = "bf16")]
    dtype: DType,
    /// Standard deviation of the Gaussian values (positive, within f32's range).
    #[arg(long, default_value_t = 1.0)]
    std: f64,
    /// Seed of the ChaCha8 generator.
    #[arg(long, value_name = "S", default_value_t = 0)]
    seed: u64,
    /// Output safetensors file.
    #[arg(long, value_name = "DENSE.safetensors")]
    out: PathBuf,
    /// Tensor name.
    #[arg(long, default_value = "weight")]
    name: String,
}

#[derive(Args, Debug)]
#[command(allow_negative_numbers = true)]
struct QuantizeArgs {
    /// Dense safetensors file.
    #[arg(long, value_name = "DENSE.safetensors")]
    input: PathBuf,
    /// Name of the dense [R, C] tensor in it (bf16, f16 or f32).
    #[arg(long, value_name = "NAME")]
    tensor: String,
    #[command(flatten)]
    coding: CodingArgs,
    /// Output safetensors file.
    #[arg(long, value_name = "W.safetensors")]
    out: PathBuf,
    /// Tensor name prefix in the output.
    #[arg(long, default_value = "w")]
    prefix: String,
    /// Table for code lut: a safetensors file holding a 1-D f32 tensor of 2^L values, the
    /// one named `lut`, or else the first f32 tensor in file order. Without it, code lut
    /// uses a Gaussian table seeded by --seed.
    #[arg(long, value_name = "LUT.safetensors")]
    lut: Option<PathBuf>,
    /// Seed of the Gaussian table for code lut without --lut.
    #[arg(long, value_name = "S", default_value_t = 0)]
    seed: u64,
}

#[derive(Args, Debug)]
struct MatvecArgs {
    /// Quantized weights.
    #[arg(long, value_name = "W.safetensors")]
    weights: PathBuf,
    /// Tensor name prefix of the weights.
    #[arg(long, default_value = "w")]
    prefix: String,
    /// Activations: tensor `x` [M, C], bf16/f16/f32.
    #[arg(long, value_name = "X.safetensors")]
    x: PathBuf,
    /// Output file; gets tensor `y` [M, R] in the dtype of x.
    #[arg(long, value_name = "Y.safetensors")]
    out: PathBuf,
    /// Backend that runs the product: reference, cpu, cuda, metal or metal-sim (the
    /// Metal kernels on the CPU) (default: the best available here: cuda with a
    /// driver, metal on macOS, else cpu).
    #[arg(long, value_name = "NAME")]
    backend: Option<String>,
    /// Numerics tier: `exact` (SPEC section 5 bits) or `fast` (within the SPEC section 7
    /// bound; on the reference backend, SPEC 7's real sums rounded to T once).
    #[arg(long, default_value = "exact")]
    tier: String,
}

#[derive(Args, Debug)]
struct GateUpArgs {
    /// Quantized gate matrix.
    #[arg(long, value_name = "G.safetensors")]
    gate: PathBuf,
    /// Quantized up matrix.
    #[arg(long, value_name = "U.safetensors")]
    up: PathBuf,
    /// Activations: tensor `x` [M, C], bf16/f16/f32.
    #[arg(long, value_name = "X.safetensors")]
    x: PathBuf,
    /// Output file; gets tensor `mid` [M, R] in the dtype of x.
    #[arg(long, value_name = "MID.safetensors")]
    out: PathBuf,
    /// SwiGLU tail: `exact` (SPEC section 6, bit-reproducible) or `native` (a backend's own).
    #[arg(long, default_value = "exact")]
    tail: String,
    /// Backend that runs the product: reference, cpu, cuda, metal or metal-sim (the
    /// Metal kernels on the CPU) (default: the best available here: cuda with a
    /// driver, metal on macOS, else cpu).
    #[arg(long, value_name = "NAME")]
    backend: Option<String>,
    /// Numerics tier: `exact` (SPEC section 6 bits) or `fast` (within the SPEC section 7
    /// bound; on the reference backend, silu(g*) u* of SPEC 7's real sums, rounded once).
    #[arg(long, default_value = "exact")]
    tier: String,
    /// Tensor name prefix of the gate matrix.
    #[arg(long, default_value = "w")]
    gate_prefix: String,
    /// Tensor name prefix of the up matrix.
    #[arg(long, default_value = "w")]
    up_prefix: String,
}

#[derive(Args, Debug)]
struct InfoArgs {
    /// A safetensors file.
    #[arg(value_name = "FILE.safetensors")]
    file: Option<PathBuf>,
    /// List every backend (`name: description` or `name: unavailable: reason`) and the
    /// default one.
    #[arg(long)]
    devices: bool,
}

#[derive(Args, Debug)]
#[command(allow_negative_numbers = true)]
struct SelectArgs {
    /// Device id as in the tuning tables (`nvidia-h200`, `applegpu_g15s`, ...).
    #[arg(long, value_name = "ID")]
    device: String,
    /// Kernel family: reduce, gate_up, gate_up_mixed, reduce_mma, gate_up_mma,
    /// gate_up_mma_mixed or expand
    /// (with --tier fast, reduce and gate_up answer for the matrix-unit families the fast
    /// tier runs).
    #[arg(long, value_name = "F")]
    family: String,
    /// R: output features.
    #[arg(long, value_name = "R")]
    rows: usize,
    /// C: input features (a multiple of T).
    #[arg(long, value_name = "C")]
    cols: usize,
    /// Bits per weight, 1..=8 (the gate's for gate_up).
    #[arg(long, value_name = "K")]
    k: u32,
    /// M: samples (rows of x).
    #[arg(long, value_name = "M")]
    m: u32,
    /// Bits per weight of the up matrix (gate_up; default: --k).
    #[arg(long, value_name = "KU")]
    ku: Option<u32>,
    /// Trellis state bits, k < L <= 16.
    #[arg(long, value_name = "L", default_value_t = 12)]
    l: u32,
    /// Weights per block (a multiple of 32).
    #[arg(long, value_name = "T", default_value_t = 256)]
    t: usize,
    /// Code: 1mad, 3inst, mcg, mul1 or lut.
    #[arg(long, value_name = "CODE", default_value = "1mad")]
    code: String,
    /// Activation dtype: bf16, f16 or f32.
    #[arg(long, default_value = "bf16")]
    dtype: String,
    /// Numerics tier: exact or fast.
    #[arg(long, default_value = "exact")]
    tier: String,
    /// Backend whose tables are read (default: cuda for nvidia-*, metal for applegpu-*,
    /// metal-sim for metal-sim, else cpu).
    #[arg(long, value_name = "NAME")]
    backend: Option<String>,
    /// Directory of `*.toml` tables added after the embedded ones and $TRELLIS_TUNING_DIR.
    #[arg(long, value_name = "DIR")]
    tables: Option<PathBuf>,
}

use trellis::backend::AnyBackend;
use trellis::numerics::{Tail, Tier};

mod limits;
mod same_file;

// ---------------------------------------------------------------------------------------
// Backend dispatch: a name opens a backend from the registry; `reference` is the plain
// SPEC implementation.

/// The backend used when `--backend` is not given: the best one available here.
fn backend_or_default(b: &Option<String>) -> String {
    b.clone()
        .unwrap_or_else(|| trellis::backend::default_name().to_string())
}

/// `y = W x` on `backend` in `tier`. Inputs are already validated.
fn run_matvec(
    backend: &str,
    w: &QuantizedMatrix,
    x: &Activations,
    tier: Tier,
) -> Result<Activations> {
    if backend == "reference" {
        if tier == Tier::Fast {
            return reference::reduce_fast(w, x);
        }
        w.check_weights_finite(x.dtype)?; // as the facade does: no inf weight in T
        return reference::reduce(w, x);
    }
    AnyBackend::open(backend)?.matvec(w, x, tier)
}

/// `mid = silu(G x) * (U x)` on `backend` with `tail` in `tier`. Inputs are already
/// validated.
fn run_gate_up(
    backend: &str,
    gate: &QuantizedMatrix,
    up: &QuantizedMatrix,
    x: &Activations,
    tail: Tail,
    tier: Tier,
) -> Result<Activations> {
    if tail == Tail::Native && backend == "reference" {
        return Err(Error::invalid(
            "tail",
            tail,
            "the reference implements tail = exact only (native is a backend's own exp)",
        ));
    }
    if backend == "reference" {
        if tier == Tier::Fast {
            return reference::gate_up_fast(gate, up, x);
        }
        gate.check_weights_finite(x.dtype)
            .map_err(|e| e.of("gate"))?;
        up.check_weights_finite(x.dtype).map_err(|e| e.of("up"))?;
        return reference::gate_up(gate, up, x);
    }
    AnyBackend::open(backend)?.gate_up(gate, up, x, tail, tier)
}

// ---------------------------------------------------------------------------------------

fn main() -> ExitCode {
    // A bug must still end as one `error:` line and status 1, never a panic report.
    std::panic::set_hook(Box::new(|info| {
        let payload = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown failure".to_string());
        let at = info
            .location()
            .map(|l| format!(" ({}:{})", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!("error: internal error: {}{at}", one_line(&payload));
    }));
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                eprintln!("error: {}", missing_command());
                return ExitCode::FAILURE;
            }
            eprintln!("error: {} (see --help)", clap_message(&e));
            return ExitCode::FAILURE;
        }
    };
    match std::panic::catch_unwind(|| run(cli)) {
        Ok(Ok(lines)) => {
            use std::io::Write;
            let mut stdout = std::io::stdout().lock();
            match lines
                .iter()
                .try_for_each(|l| writeln!(stdout, "{l}"))
                .and_then(|()| stdout.flush())
            {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: cannot write to stdout: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Ok(Err(e)) => {
            eprintln!("error: {}", one_line(&e.to_string()));
            ExitCode::FAILURE
        }
        // The panic hook has printed the one line.
        Err(_) => ExitCode::FAILURE,
    }
}

/// The one line for `trellis` without a command: what the commands are.
fn missing_command() -> String {
    use clap::CommandFactory;
    let names: Vec<String> = Cli::command()
        .get_subcommands()
        .filter(|c| !c.is_hide_set() && c.get_name() != "help")
        .map(|c| c.get_name().to_string())
        .collect();
    format!(
        "no command given; expected one of: {} (see trellis --help, or trellis <command> --help)",
        names.join(", ")
    )
}

/// Clap's message (everything before its usage section) on one line, without its own
/// `error: ` prefix; its hints (`tip: a similar argument exists: '--rows'`) are kept.
fn clap_message(e: &clap::Error) -> String {
    let text = e.to_string();
    let msg = text
        .lines()
        .take_while(|l| !l.trim_start().starts_with("Usage:"))
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("For more information"))
        .map(|l| match l.strip_prefix("tip:") {
            Some(tip) => format!("({})", tip.trim()),
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ");
    msg.strip_prefix("error:")
        .unwrap_or(&msg)
        .trim()
        .to_string()
}

/// Name the file a non-file error came from ([`Error::in_file`]).
fn in_file(path: &Path) -> impl Fn(Error) -> Error + '_ {
    move |e| e.in_file(path)
}

/// Run a command; its stdout lines are returned, printed only when it succeeds (nothing
/// on stdout on failure).
fn run(cli: Cli) -> Result<Vec<String>> {
    // Where the output goes is asked before any work that would be lost (a quantize of
    // minutes, then "its directory does not exist"), as the write will ask it again.
    let out_path = match &cli.command {
        Command::Random(a) => Some(&a.out),
        Command::RandomX(a) => Some(&a.out),
        Command::RandomDense(a) => Some(&a.out),
        Command::Quantize(a) => Some(&a.out),
        Command::Matvec(a) => Some(&a.out),
        Command::GateUp(a) => Some(&a.out),
        Command::Info(_) | Command::Select(_) => None,
    };
    if let Some(path) = out_path {
        io::check_output(path).map_err(|e| match e {
            Error::File { path, reason } => Error::file(path, format!("--out: {reason}")),
            e => e,
        })?;
    }
    let mut out = Vec::new();
    match cli.command {
        Command::Random(a) => random(a, &mut out),
        Command::RandomX(a) => random_x(a, &mut out),
        Command::RandomDense(a) => random_dense(a, &mut out),
        Command::Quantize(a) => quantize(a, &mut out),
        Command::Matvec(a) => matvec(a, &mut out),
        Command::GateUp(a) => gate_up(a, &mut out),
        Command::Info(a) => info(a, &mut out),
        Command::Select(a) => select(a, &mut out),
    }?;
    Ok(out)
}

fn random(a: RandomArgs, out: &mut Vec<String>) -> Result<()> {
    let c = &a.coding;
    limits::check_elements(&[("rows", a.rows), ("cols", a.cols)])?;
    let g = Geometry::new(a.rows, a.cols, c.t, c.k, c.l, c.code)?;
    let mut rng = ChaCha8Rng::seed_from_u64(a.seed);
    let n = g.codes_shape().iter().product::<usize>();
    let mut codes: Vec<u32> = trellis::error::reserve(n, "rows x cols", format!("{n} elements"))?;
    codes.extend((0..n).map(|_| rng.random::<u32>()));
    let (scale_dtype, round): (ScaleDType, fn(f32) -> f32) = match a.scale_dtype {
        ScaleArg::F16 => (ScaleDType::F16, |v| f16::from_f32(v).to_f32()),
        ScaleArg::F32 => (ScaleDType::F32, |v| v),
    };
    let scales = (0..g.rows)
        .map(|_| round(rng.random_range(0.01f32..0.05)))
        .collect();
    let lut = match g.code {
        Code::Lut => Some(encode::gaussian_lut(g.l, a.seed)?),
        _ => None,
    };
    let w = QuantizedMatrix::new(g, codes, scales, scale_dtype, lut)?;
    io::write_quantized(&a.out, &a.prefix, &w)?;
    out.push(format!("{}: {} -> {}", a.prefix, g, a.out.display()));
    Ok(())
}

fn random_x(a: RandomXArgs, out: &mut Vec<String>) -> Result<()> {
    if a.m == 0 {
        return Err(Error::invalid("m", a.m, "must be at least 1"));
    }
    if a.cols == 0 {
        return Err(Error::invalid("cols", a.cols, "must be at least 1"));
    }
    let x = gaussian(a.m, a.cols, ("m", "cols"), a.dtype, 1.0, a.seed)?;
    io::write_activations(&a.out, &a.name, &x)?;
    out.push(format!(
        "{}: {} [{}, {}] -> {}",
        a.name,
        a.dtype,
        a.m,
        a.cols,
        a.out.display()
    ));
    Ok(())
}

/// Standard normal values times `std`, rounded to `dtype`, `[rows, cols]`; the flags
/// name the dimensions in a size error.
fn gaussian(
    rows: usize,
    cols: usize,
    flags: (&str, &str),
    dtype: DType,
    std: f32,
    seed: u64,
) -> Result<Activations> {
    limits::check_elements(&[(flags.0, rows), (flags.1, cols)])?;
    let n = rows * cols;
    let mut data: Vec<f32> = trellis::error::reserve(
        n,
        format!("{} x {}", flags.0, flags.1),
        format!("{n} elements"),
    )?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    data.extend((0..n).map(|_| rng.sample::<f32, _>(StandardNormal) * std));
    // A draw past the dtype's range (no file of such values is useful) is the flag's.
    if let Some(v) = data.iter().find(|v| !dtype.round(**v).is_finite()) {
        return Err(Error::invalid(
            "std",
            std,
            format!("draws past the {dtype} range (a value of {v})"),
        ));
    }
    Activations::from_f32(dtype, rows, cols, data)
}

fn random_dense(a: RandomDenseArgs, out: &mut Vec<String>) -> Result<()> {
    if a.rows == 0 {
        return Err(Error::invalid("rows", a.rows, "must be at least 1"));
    }
    if a.cols == 0 {
        return Err(Error::invalid("cols", a.cols, "must be at least 1"));
    }
    // Read as f64, so a value past f32's range is named as typed, not as `inf`.
    let std = a.std as f32;
    if !(std.is_finite() && std > 0.0) {
        return Err(Error::invalid(
            "std",
            format!("{:?}", a.std),
            "must be positive and within f32's range (1.2e-38 to 3.4e38)",
        ));
    }
    let w = gaussian(a.rows, a.cols, ("rows", "cols"), a.dtype, std, a.seed)?;
    io::write_activations(&a.out, &a.name, &w)?;
    out.push(format!(
        "{}: {} [{}, {}] -> {}",
        a.name,
        a.dtype,
        a.rows,
        a.cols,
        a.out.display()
    ));
    Ok(())
}

fn quantize(a: QuantizeArgs, out: &mut Vec<String>) -> Result<()> {
    let mut inputs = vec![("input", a.input.as_path())];
    if let Some(lut) = &a.lut {
        inputs.push(("lut", lut.as_path()));
    }
    same_file::refuse_overwrite(&a.out, &inputs)?;
    let (dense, rows, cols) = io::read_dense(&a.input, &a.tensor).map_err(in_file(&a.input))?;
    // Fail fast, naming the flag's field, before any encoding work.
    let c = &a.coding;
    let g = Geometry::new(rows, cols, c.t, c.k, c.l, c.code).map_err(|e| match e {
        Error::Invalid { ref field, .. } if field == "rows" || field == "cols" => Error::file(
            &a.input,
            format!("tensor `{}` [{rows}, {cols}]: {e}", a.tensor),
        ),
        e => e,
    })?;
    // The flags' T, k and L on this machine's threads (the encoder's memory), named as
    // the flags' own error, not the input's.
    encode::check_geometry(&g)?;
    if let Some(i) = dense.iter().position(|v| !v.is_finite()) {
        return Err(Error::file(
            &a.input,
            Error::invalid(
                format!("{}[{}, {}]", a.tensor, i / cols, i % cols),
                dense[i],
                "weights must be finite",
            ),
        ));
    }
    let lut = match (&a.lut, g.code) {
        (Some(path), Code::Lut) => {
            let (name, values) = io::read_lut_file(path).map_err(in_file(path))?;
            if values.len() != g.states() {
                return Err(Error::file(
                    path,
                    Error::invalid(
                        format!("{name} length"),
                        values.len(),
                        format!("must be 2^L = {} for L = {}", g.states(), g.l),
                    ),
                ));
            }
            encode::check_table_values(&name, &values).map_err(|e| Error::file(path, e))?;
            out.push(format!("lut: tensor `{name}` of {}", path.display()));
            Some(values)
        }
        (Some(_), code) => {
            return Err(Error::invalid(
                "code",
                code,
                "--lut is only used with --code lut",
            ))
        }
        (None, Code::Lut) => Some(encode::gaussian_lut(g.l, a.seed)?),
        (None, _) => None,
    };
    // On a terminal, a bar, cleared before the result (or the one error line) is
    // printed; elsewhere (a log, a pipe, a checker) nothing, so stderr stays one line
    // on failure and empty on success.
    let terminal = std::io::stderr().is_terminal();
    let opts = EncodeOptions {
        t: g.t,
        k: g.k,
        l: g.l,
        code: g.code,
        lut,
        progress: false,
    };
    let bar = if terminal {
        let bar = indicatif::ProgressBar::new(rows as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "quantize [{elapsed_precise}] {wide_bar} {pos}/{len} rows (eta {eta})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar.enable_steady_tick(std::time::Duration::from_millis(500));
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
    let enc =
        encode::quantize_with_progress(&dense, rows, cols, &opts, &|n| bar.set_position(n as u64));
    bar.finish_and_clear();
    // A row whose scale overflows f16 is an error in the input: name the file and tensor,
    // and a given table, whose magnitudes set the scales' (a tiny table, a huge scale).
    let with_lut = match &a.lut {
        Some(path) => format!(
            " (the scales are the rows' magnitudes over those of the values of the --lut \
             table {})",
            path.display()
        ),
        None => String::new(),
    };
    let enc = enc.map_err(|e| match e {
        Error::Invalid { ref field, .. } if field.starts_with("scale of row") => {
            Error::file(&a.input, format!("tensor `{}`: {e}{with_lut}", a.tensor))
        }
        e => e,
    })?;
    io::write_quantized(&a.out, &a.prefix, &enc.matrix)?;
    let power = dense.iter().map(|&v| (v as f64) * (v as f64)).sum::<f64>() / dense.len() as f64;
    // Rows too small for an f16 scale decode as zeros or coarse multiples: valid, but
    // worth a word (on stdout: stderr stays empty on success).
    let tiny: Vec<usize> = (0..rows)
        .filter(|&r| {
            enc.matrix.scales[r].abs() < half::f16::MIN_POSITIVE.to_f32()
                && dense[r * cols..(r + 1) * cols].iter().any(|&v| v != 0.0)
        })
        .collect();
    if let Some(&r) = tiny.first() {
        out.push(format!(
            "warning: {} rows have scales below f16's normal range (first: row {r}, scale {:e}): they decode as zeros or coarse multiples; scale the weights up{}",
            tiny.len(),
            enc.matrix.scales[r],
            // With a table, its magnitudes set the scales' too: a huge one, tiny scales.
            if a.lut.is_some() { ", or give a --lut table of smaller values" } else { "" }
        ));
    }
    out.push(format!("mse: {:e}", enc.mse));
    // An all-zero matrix has no relative error to speak of: its mse is 0, and so is this.
    let relative = if power > 0.0 { enc.mse / power } else { 0.0 };
    out.push(format!("relative mse: {relative:e}")); // as mse: a fixed 6 places read 0 below 5e-7
    out.push(format!("{}: {} -> {}", a.prefix, g, a.out.display()));
    Ok(())
}

/// Read `x` and check it against a matrix with `cols` input features; NaN and infinite
/// activations are rejected like NaN weights (before any kernel runs).
fn read_x(path: &Path, cols: usize) -> Result<Activations> {
    let x = io::read_activations(path, "x").map_err(in_file(path))?;
    if x.rows == 0 {
        return Err(Error::file(
            path,
            Error::invalid("x M", 0, "x must have at least one row"),
        ));
    }
    reference::check_activations(&x, cols).map_err(in_file(path))?;
    if let Some(i) = x.data.iter().position(|v| !v.is_finite()) {
        return Err(Error::file(
            path,
            Error::invalid(
                format!("x[{}, {}]", i / x.cols, i % x.cols),
                x.data[i],
                "activations must be finite",
            ),
        ));
    }
    Ok(x)
}

fn matvec(a: MatvecArgs, out: &mut Vec<String>) -> Result<()> {
    same_file::refuse_overwrite(&a.out, &[("weights", &a.weights), ("x", &a.x)])?;
    let w = io::read_quantized(&a.weights, &a.prefix).map_err(in_file(&a.weights))?;
    let x = read_x(&a.x, w.geometry.cols)?;
    let backend = backend_or_default(&a.backend);
    let tier: Tier = a.tier.parse()?;
    let y = run_matvec(&backend, &w, &x, tier)?;
    io::write_activations(&a.out, "y", &y)?;
    out.push(format!(
        "y: {} [{}, {}] ({}) -> {}",
        y.dtype,
        y.rows,
        y.cols,
        backend,
        a.out.display()
    ));
    Ok(())
}

fn gate_up(a: GateUpArgs, out: &mut Vec<String>) -> Result<()> {
    let tail: Tail = a.tail.parse()?;
    same_file::refuse_overwrite(&a.out, &[("gate", &a.gate), ("up", &a.up), ("x", &a.x)])?;
    let gate = io::read_quantized(&a.gate, &a.gate_prefix).map_err(in_file(&a.gate))?;
    let up = io::read_quantized(&a.up, &a.up_prefix).map_err(in_file(&a.up))?;
    reference::check_pair(&gate, &up)?;
    let x = read_x(&a.x, gate.geometry.cols)?;
    let backend = backend_or_default(&a.backend);
    let tier: Tier = a.tier.parse()?;
    let mid = run_gate_up(&backend, &gate, &up, &x, tail, tier)?;
    io::write_activations(&a.out, "mid", &mid)?;
    out.push(format!(
        "mid: {} [{}, {}] ({}, tail {}) -> {}",
        mid.dtype,
        mid.rows,
        mid.cols,
        backend,
        a.tail,
        a.out.display()
    ));
    Ok(())
}

fn info(a: InfoArgs, out: &mut Vec<String>) -> Result<()> {
    if a.devices {
        for (name, status) in trellis::backend::devices() {
            match status {
                Ok(d) => out.push(format!("{name}: {}", one_line(&d))),
                Err(r) => {
                    // The error's own "backend `x` is unavailable: " would repeat the line's.
                    let prefix = format!("backend `{name}` is unavailable: ");
                    let reason = r.strip_prefix(prefix.as_str()).unwrap_or(&r);
                    out.push(format!("{name}: unavailable: {}", one_line(reason)))
                }
            }
        }
        out.push(format!("default: {}", trellis::backend::default_name()));
    }
    match &a.file {
        Some(file) => info_file(file, out),
        None if a.devices => Ok(()),
        None => Err(Error::invalid(
            "FILE",
            "(none)",
            "give a safetensors file, or --devices",
        )),
    }
}

fn select(a: SelectArgs, out: &mut Vec<String>) -> Result<()> {
    use trellis::family::{Family, FamilyVisitor, ProblemSpec};
    use trellis::tune::Selector;
    let device = a.device.trim();
    if device.is_empty() {
        return Err(Error::invalid("device", "\"\"", "must not be empty"));
    }
    let backend = match &a.backend {
        Some(b) if trellis::backend::NAMES.contains(&b.as_str()) => b.clone(),
        Some(b) => {
            return Err(Error::invalid(
                "backend",
                b,
                format!("expected one of {}", trellis::backend::NAMES.join(", ")),
            ))
        }
        None => trellis::backend::kind_of_device(device).name.to_string(),
    };
    let spec = ProblemSpec {
        rows: a.rows,
        cols: a.cols,
        t: a.t,
        k: a.k,
        ku: a.ku,
        l: a.l,
        code: a.code.parse()?,
        dtype: a.dtype.parse()?,
        m: a.m,
    };
    let tier: Tier = a.tier.parse()?;
    let mut selector = Selector::from_env();
    if let Some(dir) = &a.tables {
        // Named on the command line: a directory that cannot be read is an error, not a
        // warning over the other tables' answer (a table in it that cannot be read is
        // named and skipped, as the selector does).
        std::fs::read_dir(dir)
            .map_err(|e| Error::file(dir, format!("cannot read the tables' directory: {e}")))?;
        selector.add_dir(dir);
    }
    for w in &selector.warnings {
        eprintln!("warning: {}", one_line(w));
    }
    // Whichever registered family the name picks answers; what would run is fitted to
    // the backend's limits (a bucket's winner that does not fit gives way).
    struct Select<'a> {
        name: &'a str,
        asked: &'a str,
        spec: ProblemSpec,
        tier: Tier,
        backend: &'a str,
        device: &'a str,
        selector: &'a Selector,
        out: Option<Result<Vec<String>>>,
    }
    impl FamilyVisitor for Select<'_> {
        fn visit<F: Family>(&mut self) {
            if self.out.is_some() || !trellis::families::is::<F>(self.name) {
                return;
            }
            self.out = Some(F::problem(&self.spec).and_then(|p| {
                // An alias names a kind of problem (`gate_up_mixed`: two k), also where
                // the tier maps it to another family: the flags must describe that kind,
                // or the answer would be for another key.
                let mixed = |n: &str| n.ends_with("_mixed");
                if (self.name != F::NAME && self.name != F::label(&p))
                    || (mixed(self.asked) && !mixed(F::label(&p)))
                {
                    return Err(Error::invalid(
                        "family",
                        self.asked,
                        format!(
                            "these flags describe a {} problem (a mixed pair needs --ku other than --k)",
                            F::label(&p)
                        ),
                    ));
                }
                // A family without variants in this tier has no answer for it.
                if F::candidates(&p, self.tier, true).is_empty() {
                    return Err(Error::invalid(
                        "tier",
                        self.tier,
                        format!("family {} has no {} variants", F::NAME, self.tier),
                    ));
                }
                let limits = trellis::backend::nominal_limits(self.backend);
                let sel = self
                    .selector
                    .select::<F>(self.backend, self.device, &p, self.tier);
                let sel = trellis::tune::fit::<F>(sel, &p, self.tier, &limits);
                Ok(vec![
                    format!("key: {}", F::key(&p, self.tier)),
                    format!("device: {} ({})", self.device, self.backend),
                    format!("variant: {}", sel.variant),
                    format!("source: {}", sel.source),
                ])
            }));
        }
    }
    // What `matvec|gate-up --tier` would run: the fast tier of reduce and gate_up is
    // the matrix-unit families'.
    let family = trellis::ops::family_for(&a.family, tier);
    if family != a.family {
        out.push(format!(
            "family: {family} (what the {tier} tier of {} runs)",
            a.family
        ));
    }
    let answer = |spec: ProblemSpec| {
        let mut v = Select {
            name: family,
            asked: &a.family,
            spec,
            tier,
            backend: &backend,
            device,
            selector: &selector,
            out: None,
        };
        trellis::families::for_each(&mut v);
        v.out.unwrap_or_else(|| {
            Err(Error::invalid(
                "family",
                &a.family,
                format!("expected one of {}", trellis::families::names().join(", ")),
            ))
        })
    };
    // An M beyond one launch runs as launches of the most samples and one of the rest
    // (`trellis::ops::matvec`): answer for each launch size.
    let max = trellis::ops::max_samples(tier);
    let t = spec.t;
    if spec.m == 0 {
        return Err(Error::invalid("m", spec.m, "must be at least 1"));
    }
    let lines = if spec.m <= max {
        answer(spec)?
    } else {
        let rest = spec.m % max;
        let mut lines = vec![format!(
            "M = {} runs as launches of at most {max} samples: {} of M = {max}{} \
             (each sample's result as in one launch)",
            spec.m,
            spec.m / max,
            if rest > 0 {
                format!(", 1 of M = {rest}")
            } else {
                String::new()
            }
        )];
        for m in std::iter::once(max).chain((rest > 0).then_some(rest)) {
            lines.extend(answer(ProblemSpec { m, ..spec.clone() })?);
        }
        lines
    };
    out.extend(lines);
    if t != trellis::tune::TUNED_T {
        out.push(format!(
            "note: the tables are measured at T = {}; T = {} takes their choice where it \
             fits (its speed at this T unmeasured)",
            trellis::tune::TUNED_T,
            t
        ));
    }
    Ok(())
}

/// `info FILE`: from the file's header and each matrix's scales and table, never its code
/// words (the bulk of the file): each matrix's metadata, tensors' dtypes and shapes, scales
/// and table checked as a read of it checks them, its size from its tensors' shapes.
fn info_file(file: &Path, out: &mut Vec<String>) -> Result<()> {
    let f = SafetensorsFile::open(file)?;
    let prefixes = f.quantized_prefixes();
    let mut owned = std::collections::HashSet::new();
    let mut lines = Vec::new();
    for p in &prefixes {
        // Every check of reading the matrix but its code words (the bulk of the file).
        let (g, scale_dtype) = f.quantized_checked_layout(p).map_err(in_file(file))?;
        let bytes = g.codes_shape().iter().product::<usize>() * 4
            + g.rows * scale_dtype.size()
            + g.lut_len().unwrap_or(0) * 4;
        lines.push(format!(
            "{p}: code={} k={} L={} T={} rows={} cols={} scales={} ({:.3} bits/weight with scales)",
            g.code,
            g.k,
            g.l,
            g.t,
            g.rows,
            g.cols,
            scale_dtype,
            (bytes * 8) as f64 / (g.rows * g.cols) as f64
        ));
        owned.insert(io::codes_name(p));
        owned.insert(io::scales_name(p));
        if g.code == Code::Lut {
            owned.insert(io::lut_name(p));
        }
    }
    if prefixes.is_empty() {
        out.push(format!("{}: no quantized matrices", file.display()));
    }
    out.extend(lines);
    for name in f.names() {
        if owned.contains(&name) {
            continue;
        }
        let t = f.tensor_info(&name)?;
        out.push(format!("{name}: {} {:?}", io::dtype_name(t.dtype), t.shape));
    }
    Ok(())
}
