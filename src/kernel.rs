//! The kernel framework: what a declared kernel is, how it is rendered per dialect and
//! how a backend launches it. `#[trellis::kernel]` (from `trellis-macros`) generates the
//! [`KernelSpec`] impl and the typed `launch` wrapper from a declaration; see
//! `src/kernels.rs` for this crate's kernels and `examples/downstream` for another crate's.

use crate::error::{Error, Result};
use std::fmt;

/// Target source language of a rendered kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dialect {
    /// Metal Shading Language, as the header and body `mlx_rs::fast::MetalKernel` takes.
    Metal,
    /// CUDA C++ for NVRTC.
    Cuda,
    /// C++ for the host compiler, 32 lanes emulated per row.
    Cpu,
}

impl Dialect {
    /// Every dialect.
    pub const ALL: [Dialect; 3] = [Dialect::Metal, Dialect::Cuda, Dialect::Cpu];

    /// Lower-case name, also the file extension stem used by `xtask render`.
    pub fn name(self) -> &'static str {
        match self {
            Dialect::Metal => "metal",
            Dialect::Cuda => "cuda",
            Dialect::Cpu => "cpu",
        }
    }

    /// File extension of a rendered source.
    pub fn extension(self) -> &'static str {
        match self {
            Dialect::Metal => "metal",
            Dialect::Cuda => "cu",
            Dialect::Cpu => "cpp",
        }
    }

    /// True for Metal, for templates: `{% if dialect.is_metal() %}`.
    pub fn is_metal(&self) -> bool {
        *self == Dialect::Metal
    }
    /// True for CUDA.
    pub fn is_cuda(&self) -> bool {
        *self == Dialect::Cuda
    }
    /// True for the CPU dialect.
    pub fn is_cpu(&self) -> bool {
        *self == Dialect::Cpu
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Element type of a kernel buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Elem {
    U32,
    F32,
    F16,
    Bf16,
}

impl Elem {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Elem::U32 | Elem::F32 => 4,
            Elem::F16 | Elem::Bf16 => 2,
        }
    }

    /// Name in errors and files.
    pub fn name(self) -> &'static str {
        match self {
            Elem::U32 => "u32",
            Elem::F32 => "f32",
            Elem::F16 => "f16",
            Elem::Bf16 => "bf16",
        }
    }

    /// The C type each dialect spells this element as (CPU and CUDA wrap 16-bit floats'
    /// bits in a struct and convert with their shims).
    pub fn c_type(self, dialect: Dialect) -> &'static str {
        match (self, dialect) {
            (Elem::U32, _) => "uint32_t",
            (Elem::F32, _) => "float",
            (Elem::F16, Dialect::Metal) => "half",
            (Elem::F16, Dialect::Cuda) => "f16_t",
            (Elem::Bf16, Dialect::Metal) => "bfloat16_t",
            (Elem::Bf16, Dialect::Cuda) => "bf16_t",
            (Elem::F16, Dialect::Cpu) => "f16_t",
            (Elem::Bf16, Dialect::Cpu) => "bf16_t",
        }
    }
}

impl fmt::Display for Elem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl From<crate::DType> for Elem {
    fn from(d: crate::DType) -> Self {
        match d {
            crate::DType::Bf16 => Elem::Bf16,
            crate::DType::F16 => Elem::F16,
            crate::DType::F32 => Elem::F32,
        }
    }
}

impl From<crate::ScaleDType> for Elem {
    fn from(d: crate::ScaleDType) -> Self {
        match d {
            crate::ScaleDType::F16 => Elem::F16,
            crate::ScaleDType::F32 => Elem::F32,
        }
    }
}

/// Name, element type and shape of one kernel argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSpec {
    pub name: &'static str,
    pub elem: Elem,
    pub shape: Vec<usize>,
}

impl TensorSpec {
    /// Elements in the tensor.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Check a concrete tensor against this spec; `kernel` prefixes the error.
    pub fn check(&self, kernel: &str, elem: Elem, shape: &[usize]) -> Result<()> {
        if elem != self.elem {
            return Err(Error::DType {
                name: format!("{kernel}.{}", self.name),
                actual: elem.to_string(),
                expected: self.elem.to_string(),
            });
        }
        if shape != self.shape.as_slice() {
            return Err(Error::Shape {
                name: format!("{kernel}.{}", self.name),
                actual: shape.to_vec(),
                expected: self.shape.clone(),
            });
        }
        Ok(())
    }
}

/// How a kernel is launched: `groups` threadgroups (CUDA blocks) of `threads` threads.
/// Threads come in simdgroups of 32; the CPU backend runs one group per task and
/// emulates its simdgroups' lanes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Grid {
    pub groups: [u32; 3],
    pub threads: u32,
}

/// A kernel rendered for one dialect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rendered {
    pub dialect: Dialect,
    /// Device functions and constants (Metal: MLX's `header`).
    pub header: String,
    /// The kernel body (Metal: MLX's `source`; MLX writes the signature).
    pub body: String,
}

/// A kernel declaration, implemented by `#[trellis::kernel]`.
pub trait KernelSpec: fmt::Debug {
    /// Base name of the kernel family.
    const NAME: &'static str;

    /// Symbol of this specialization: the family name and a hash of its parameters.
    fn symbol(&self) -> String {
        format!(
            "{}_{:016x}",
            Self::NAME,
            fnv1a(format!("{self:?}").as_bytes())
        )
    }
    /// Inputs, in signature order.
    fn inputs(&self) -> Vec<TensorSpec>;
    /// Outputs, in signature order.
    fn outputs(&self) -> Vec<TensorSpec>;
    /// The launch grid.
    fn grid(&self) -> Grid;
    /// Checks of the specialization itself (ranges, resource limits).
    fn validate(&self) -> Result<()> {
        Ok(())
    }
    /// Threadgroup/shared memory the body declares, in bytes.
    fn shared_bytes(&self) -> usize {
        0
    }
    /// Render header and body for a dialect.
    fn render(&self, dialect: Dialect) -> Result<Rendered>;
}

/// A launch request as a backend sees it: everything but the typed wrapper.
pub struct Launch<'a> {
    pub kernel: &'static str,
    pub symbol: String,
    pub grid: Grid,
    pub shared_bytes: usize,
    pub inputs: Vec<TensorSpec>,
    pub outputs: Vec<TensorSpec>,
    /// Renders the source; called only when the backend's cache misses.
    pub render: &'a dyn Fn(Dialect) -> Result<Rendered>,
}

/// A tensor living on a backend.
pub trait DeviceTensor {
    /// Element type.
    fn elem(&self) -> Elem;
    /// Shape.
    fn shape(&self) -> Vec<usize>;
}

/// A place kernels run: the CPU, a CUDA device, a Metal device.
pub trait Backend {
    /// Its tensors.
    type Tensor: DeviceTensor;
    /// Short name (`cpu`, `cuda`, `metal`).
    fn name(&self) -> &'static str;
    /// Dialect it compiles.
    fn dialect(&self) -> Dialect;
    /// Stable device id for tuning tables (`nvidia-h200`, `applegpu_g13s`, `cpu-<model>`).
    fn device_id(&self) -> String;
    /// Wait for queued work (GPU backends run asynchronously).
    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
    /// Time `f`, which enqueues work, in milliseconds of device time (CUDA events on
    /// CUDA; wall time around a synchronous run elsewhere).
    fn time_ms(&self, f: &mut dyn FnMut() -> Result<()>) -> Result<f64> {
        self.synchronize()?;
        let t = std::time::Instant::now();
        f()?;
        self.synchronize()?;
        Ok(t.elapsed().as_secs_f64() * 1e3)
    }
    /// What [`Backend::time_ms`] measures: GPU time (device timestamps) or wall-clock
    /// time around a synchronous run. Reports and tuning tables say which.
    fn time_source(&self) -> &'static str {
        "wall clock (around a synchronous run)"
    }
    /// Allocate a zeroed tensor.
    fn alloc(&self, spec: &TensorSpec) -> Result<Self::Tensor>;
    /// Copy host bytes (little-endian elements) to a new tensor.
    fn upload(&self, elem: Elem, shape: &[usize], bytes: &[u8]) -> Result<Self::Tensor>;
    /// Copy a tensor's bytes back to the host.
    fn download(&self, t: &Self::Tensor) -> Result<Vec<u8>>;
    /// Compile (or fetch from cache) and run; outputs are preallocated and checked.
    fn launch_into(
        &self,
        launch: &Launch<'_>,
        inputs: &[&Self::Tensor],
        outputs: &mut [&mut Self::Tensor],
    ) -> Result<()>;
    /// Compile (or fetch from cache) and run, allocating the outputs.
    fn launch(&self, launch: &Launch<'_>, inputs: &[&Self::Tensor]) -> Result<Vec<Self::Tensor>> {
        let mut outs = launch
            .outputs
            .iter()
            .map(|s| self.alloc(s))
            .collect::<Result<Vec<_>>>()?;
        let mut refs: Vec<&mut Self::Tensor> = outs.iter_mut().collect();
        self.launch_into(launch, inputs, &mut refs)?;
        Ok(outs)
    }
    /// Threadgroup/shared memory a kernel may declare on this device (Metal: 32 KB);
    /// verification skips specializations that need more.
    fn max_shared_bytes(&self) -> usize {
        crate::kernels::MAX_SHARED_BYTES
    }
    /// Compile many kernels ahead of use (the CPU backend batches them into one
    /// compiler call). The default compiles nothing in advance.
    fn precompile(&self, _launches: &[Launch<'_>]) -> Result<()> {
        Ok(())
    }
}

/// Check tensors against specs before a launch (used by generated wrappers).
pub fn check_args<T: DeviceTensor>(
    kernel: &str,
    specs: &[TensorSpec],
    tensors: &[&T],
) -> Result<()> {
    for (spec, t) in specs.iter().zip(tensors) {
        spec.check(kernel, t.elem(), &t.shape())?;
    }
    Ok(())
}

/// The dialect shim and the shared device functions (SPEC 3 codes, `exp_spec`, the
/// state window) that precede every kernel header.
pub fn prelude(dialect: Dialect) -> String {
    use askama::Template as _;
    let shim = match dialect {
        Dialect::Metal => include_str!("../templates/dialect/metal.h"),
        Dialect::Cuda => include_str!("../templates/dialect/cuda.h"),
        Dialect::Cpu => include_str!("../templates/dialect/cpu.h"),
    };
    let common = CommonHeader {
        c: crate::codes::CodeConstants::spec(),
    }
    .render()
    .expect("common header renders");
    format!("{shim}\n{common}\n")
}

/// Finish a rendered body for its dialect. Metal: MLX declares a thread attribute only
/// when its name appears in the body, so the body starts by binding the ones the dialect
/// shim's vocabulary (`GROUP_X`, `LANE_ID`, ...) reads. Other dialects bind them in
/// their entry points.
pub fn bind_body(dialect: Dialect, body: String) -> String {
    match dialect {
        Dialect::Metal => format!(
            "  const uint group_x_ = threadgroup_position_in_grid.x, group_y_ = threadgroup_position_in_grid.y;\n  \
             const uint thread_in_group_ = thread_position_in_threadgroup.x, group_threads_ = threads_per_threadgroup.x;\n  \
             const uint simdgroup_id_ = simdgroup_index_in_threadgroup, lane_id_ = thread_index_in_simdgroup;\n{body}"
        ),
        _ => body,
    }
}

#[derive(askama::Template)]
#[template(path = "common.h", escape = "none")]
struct CommonHeader {
    c: crate::codes::CodeConstants,
}

/// Check a launch's inputs and outputs against its specs: every backend does this before
/// it hands buffers to a kernel, whatever the caller checked before.
pub fn check_launch<T: DeviceTensor>(
    launch: &Launch<'_>,
    inputs: &[&T],
    outputs: &[&mut T],
) -> Result<()> {
    if inputs.len() != launch.inputs.len() || outputs.len() != launch.outputs.len() {
        return Err(Error::invalid(
            format!("{} arguments", launch.kernel),
            format!("{} in, {} out", inputs.len(), outputs.len()),
            format!(
                "the kernel takes {} in, {} out",
                launch.inputs.len(),
                launch.outputs.len()
            ),
        ));
    }
    check_args(launch.kernel, &launch.inputs, inputs)?;
    let outs: Vec<&T> = outputs.iter().map(|t| &**t).collect();
    check_args(launch.kernel, &launch.outputs, &outs)
}

/// FNV-1a, a stable 64-bit hash for symbols and cache keys (std's hasher is not stable
/// across releases, and these names land on disk).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}
