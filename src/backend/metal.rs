//! The Metal backend (macOS): each specialization becomes an `mlx_rs::fast::MetalKernel`
//! (header = the Metal prelude and the kernel's header, source = its body; MLX writes the
//! signature, see [`crate::codegen::metal::standalone`] for the complete source it builds),
//! tensors are `mlx_rs::Array`s, and MLX compiles each kernel on its first evaluation
//! with its default (safe) math mode.
//!
//! MLX evaluates lazily, and a custom kernel's compile errors and its threadgroup-size
//! check (`maxTotalThreadsPerThreadgroup`, which depends on the compiled pipeline) only
//! fail at evaluation. So the first launch of a symbol evaluates its outputs before it
//! returns: a source that does not compile is `Error::Compile` and a threadgroup the
//! pipeline cannot run is `Error::Invalid`, both naming the kernel, at the launch that
//! caused them. Later launches of the symbol (same source, same threadgroup) only start
//! the work (`async_eval`).
//!
//! `launch_into` writes the results into the caller's output tensors: each caller's
//! tensor takes the kernel's output `Array`, after its shape and dtype are checked. (MLX arrays are immutable values: other handles to the
//! old value, made by cloning, keep it, as with any MLX operation.)
//!
//! Timing is wall-clock: mlx-rs 0.33 (and mlx-c) expose no GPU timestamps for a custom
//! kernel, so [`Backend::time_ms`] is the default, wall time around a synchronous run,
//! and [`Backend::timer`] says so.
//!
//! The source, the signature MLX writes and the dispatch geometry come from
//! [`crate::codegen::metal`], the code the `metal-sim` backend runs on any host.

use crate::codegen::metal::{mlx_header, MlxDispatch, MAX_THREADS_PER_THREADGROUP};
use crate::codegen::Dialect;
use crate::error::{Error, Result};
use crate::kernel::{Backend, DeviceTensor, Elem, KernelId, Launch, Limits, TensorSpec};
use mlx_rs::error::Exception;
use mlx_rs::fast::{MetalKernel, MetalKernelApplyOptions, MetalKernelOptions, MetalKernelOutput};
use mlx_rs::{Array, Dtype, Stream};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::{c_char, CStr};
use std::rc::Rc;

pub use crate::codegen::metal::MAX_THREADGROUP_MEMORY;

/// Environment variable MLX reads to override the GPU architecture; it wins here too.
pub const ARCH_ENV: &str = "MLX_METAL_GPU_ARCH";

fn mlx_err(e: Exception) -> Error {
    Error::backend("metal", e.what())
}

fn dtype_of(elem: Elem) -> Dtype {
    match elem {
        Elem::U32 => Dtype::Uint32,
        Elem::F32 => Dtype::Float32,
        Elem::F16 => Dtype::Float16,
        Elem::Bf16 => Dtype::Bfloat16,
    }
}

fn elem_of(dtype: Dtype) -> Option<Elem> {
    match dtype {
        Dtype::Uint32 => Some(Elem::U32),
        Dtype::Float32 => Some(Elem::F32),
        Dtype::Float16 => Some(Elem::F16),
        Dtype::Bfloat16 => Some(Elem::Bf16),
        _ => None,
    }
}

fn mlx_shape(name: &str, shape: &[usize]) -> Result<Vec<i32>> {
    let len = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
    // Each extent too: with another extent 0 the product passes, and a cast would wrap.
    if len.is_none_or(|n| n > i32::MAX as usize) || shape.iter().any(|&d| d > i32::MAX as usize) {
        return Err(Error::invalid(
            name,
            format!("{shape:?}"),
            "MLX arrays hold at most 2^31 - 1 elements here",
        ));
    }
    Ok(shape.iter().map(|&d| d as i32).collect())
}

/// A tensor on the Metal device: an MLX array with the element type and shape the kernel
/// specs speak of.
#[derive(Clone)]
pub struct MetalTensor {
    elem: Elem,
    shape: Vec<usize>,
    array: Array,
}

impl MetalTensor {
    /// Wrap an MLX array (u32, f32, f16 or bf16). Any layout: kernels get inputs made
    /// row-contiguous (`ensure_row_contiguous`), and a download reads them in row order.
    pub fn from_array(array: Array) -> Result<Self> {
        let elem = elem_of(array.dtype()).ok_or_else(|| {
            Error::invalid(
                "dtype",
                format!("{:?}", array.dtype()),
                "Metal kernels take u32, f32, f16 or bf16 arrays",
            )
        })?;
        let shape = array.shape().iter().map(|&d| d as usize).collect();
        Ok(MetalTensor { elem, shape, array })
    }
    /// The MLX array.
    pub fn array(&self) -> &Array {
        &self.array
    }
    /// The MLX array, by value.
    pub fn into_array(self) -> Array {
        self.array
    }
}

impl DeviceTensor for MetalTensor {
    fn elem(&self) -> Elem {
        self.elem
    }
    fn shape(&self) -> Vec<usize> {
        self.shape.clone()
    }
}

/// What `trellis info --devices` and the tuner report about the GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetalDeviceInfo {
    /// MLX's `device_name` (e.g. `Apple M1 Pro`).
    pub name: String,
    /// MLX's `architecture` (e.g. `applegpu_g13s`), or `$MLX_METAL_GPU_ARCH`.
    pub architecture: String,
    /// Stable id for tuning tables: the architecture, lower case, underscores kept.
    pub id: String,
}

/// The default GPU as MLX sees it. MLX's kernel handles are not thread-safe, so neither
/// is the backend (`!Send`, `!Sync`); its tensors are `Send`.
pub struct MetalBackend {
    info: MetalDeviceInfo,
    kernels: RefCell<HashMap<KernelId, Compiled>>,
}

/// A built MLX kernel, and whether a launch of it has been evaluated (the first one is,
/// synchronously, so errors MLX defers surface at that launch); and which kernel it is (a
/// launch binds only its own kernel).
#[derive(Clone)]
pub struct Compiled(Rc<(MetalKernel, Cell<bool>)>, KernelId);

/// A Metal kernel with its arrays bound: launching applies it and sets the caller's
/// output arrays to its results.
pub struct Bound<'a> {
    compiled: Compiled,
    kernel: &'static str,
    id: KernelId,
    dispatch: MlxDispatch,
    threads: u64,
    inputs: Vec<Array>,
    out_specs: Vec<MetalKernelOutput>,
    specs: Vec<TensorSpec>,
    /// MLX makes fresh outputs per launch: fill them with zeros (`zero_outputs`).
    zero_outputs: bool,
    /// The caller's output tensors: a launch hands each its result.
    outputs: Vec<&'a mut MetalTensor>,
    /// No threadgroups ([`crate::kernel::Grid::is_empty`]): runs nothing (MLX would clamp the
    /// threadgroup to 0 threads, which Metal refuses).
    empty: bool,
}

/// `architecture` kept as MLX spells it: lower case, `[a-z0-9_]`, anything else a dash.
fn arch_id(arch: &str) -> String {
    let id: String = arch
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    id.trim_matches('-').to_string()
}

/// `device_name` and `architecture` of GPU 0 through mlx-c's device info.
fn query_device() -> Result<(String, String)> {
    let unavailable = |reason: &str| Error::Unavailable {
        backend: "metal".into(),
        reason: reason.into(),
    };
    // mlx-rs installs its error handler (MLX errors become values instead of exiting the
    // process) on its first fallible call; make that happen before calling mlx-sys.
    let _ = mlx_rs::Device::try_default();
    // SAFETY: plain mlx-c calls on objects created and freed here; `get_string` returns a
    // pointer into `info`, copied before `info` is freed.
    unsafe {
        let dev = mlx_sys::mlx_device_new_type(mlx_sys::mlx_device_type__MLX_GPU, 0);
        let mut available = false;
        if mlx_sys::mlx_device_is_available(&mut available, dev) != 0 || !available {
            mlx_sys::mlx_device_free(dev);
            return Err(unavailable("MLX reports no Metal GPU"));
        }
        let mut info = mlx_sys::mlx_device_info_new();
        let status = mlx_sys::mlx_device_info_get(&mut info, dev);
        let get = |key: &CStr| -> Option<String> {
            let mut value: *const c_char = std::ptr::null();
            (mlx_sys::mlx_device_info_get_string(&mut value, info, key.as_ptr()) == 0
                && !value.is_null())
            .then(|| CStr::from_ptr(value).to_string_lossy().into_owned())
        };
        let found = (status == 0).then(|| (get(c"device_name"), get(c"architecture")));
        mlx_sys::mlx_device_info_free(info);
        mlx_sys::mlx_device_free(dev);
        match found {
            None => Err(unavailable("MLX could not describe the Metal GPU")),
            Some((name, arch)) => {
                let arch = arch.unwrap_or_default();
                Ok((name.unwrap_or_else(|| arch.clone()), arch))
            }
        }
    }
}

impl MetalBackend {
    /// The default GPU; `Error::Unavailable` when MLX finds none.
    pub fn new() -> Result<Self> {
        let (name, mlx_arch) = query_device()?;
        let architecture = std::env::var(ARCH_ENV)
            .ok()
            .filter(|a| !a.trim().is_empty())
            .unwrap_or(mlx_arch);
        let id = arch_id(&architecture);
        if id.is_empty() {
            return Err(Error::Unavailable {
                backend: "metal".into(),
                reason: format!("MLX reports no architecture for `{name}` (set {ARCH_ENV})"),
            });
        }
        Ok(MetalBackend {
            info: MetalDeviceInfo {
                name,
                architecture,
                id,
            },
            kernels: RefCell::new(HashMap::new()),
        })
    }

    /// The device's identity.
    pub fn info(&self) -> &MetalDeviceInfo {
        &self.info
    }

    /// The cached kernel of a launch (built on a miss).
    fn kernel(&self, launch: &Launch<'_>) -> Result<Compiled> {
        if let Some(k) = self.kernels.borrow().get(&launch.id) {
            return Ok(k.clone());
        }
        let rendered = (launch.render)(Dialect::Metal)?;
        let inputs: Vec<&str> = launch.inputs.iter().map(|t| t.name).collect();
        let outputs: Vec<&str> = launch.outputs.iter().map(|t| t.name).collect();
        let options = MetalKernelOptions {
            header: mlx_header(&rendered),
            // Kernels index inputs as flat row-major buffers; MLX copies only an input that
            // is not row-contiguous (a foreign view), at evaluation.
            ensure_row_contiguous: true,
            atomic_outputs: false,
        };
        let symbol = launch.id.unique_symbol();
        let kernel = MetalKernel::new(&symbol, &inputs, &outputs, &rendered.body, options)
            .map_err(|e| Error::Compile {
                kernel: symbol.clone(),
                backend: "metal".into(),
                log: e.what().to_string(),
            })?;
        let k = Compiled(Rc::new((kernel, Cell::new(false))), launch.id);
        self.kernels.borrow_mut().insert(launch.id, k.clone());
        Ok(k)
    }

    /// What MLX raised for a bound launch, as the error of that kernel: its source
    /// (MLX's "Unable to build metal library" / "Unable to load", a compile error) or its
    /// threadgroup (MLX's "Thread group size (N) is greater than the maximum allowed
    /// threads per threadgroup (M)", from the pipeline's maxTotalThreadsPerThreadgroup)
    /// on its first evaluation, which also drops the kernel from the cache; anything
    /// else (raised by `apply` itself, or by a lazy input) a plain backend error.
    fn failed(&self, b: &Bound<'_>, first: bool, e: Exception) -> Error {
        let what = e.what().to_string();
        let who = format!("{} ({})", b.kernel, b.id);
        let threads =
            what.contains("Thread group size") || what.contains("threads per threadgroup");
        let compile =
            what.contains("Unable to build metal library") || what.contains("Unable to load");
        if !first || !(threads || compile) {
            return Error::backend("metal", format!("{who}: {what}"));
        }
        self.kernels.borrow_mut().remove(&b.id);
        if threads {
            Error::invalid(
                format!("{who} threads per threadgroup"),
                b.threads,
                format!("this pipeline on {} runs fewer: {what}", self.info.id),
            )
        } else {
            Error::Compile {
                kernel: who,
                backend: format!("metal ({})", self.info.id),
                log: what,
            }
        }
    }
}

impl Backend for MetalBackend {
    type Tensor = MetalTensor;
    type Compiled = Compiled;
    type Bound<'a> = Bound<'a>;

    fn name(&self) -> &'static str {
        "metal"
    }

    fn dialect(&self) -> Dialect {
        Dialect::Metal
    }

    fn timer(&self) -> &'static str {
        "wall clock (mlx-rs exposes no GPU timestamps for custom kernels)"
    }

    fn limits(&self) -> Limits {
        Limits {
            threadgroup_bytes: MAX_THREADGROUP_MEMORY,
            threads_per_group: MAX_THREADS_PER_THREADGROUP as u32,
        }
    }

    fn device_id(&self) -> String {
        self.info.id.clone()
    }

    fn synchronize(&self) -> Result<()> {
        let stream = Stream::thread_local_or_gpu();
        // SAFETY: a valid stream handle owned by `stream` for the duration of the call.
        let status = unsafe { mlx_sys::mlx_synchronize(stream.as_ptr()) };
        if status != 0 {
            return Err(Error::backend(
                "metal",
                format!("waiting for the GPU stream failed (mlx-c status {status})"),
            ));
        }
        Ok(())
    }

    fn alloc(&self, spec: &TensorSpec) -> Result<MetalTensor> {
        let shape = mlx_shape(spec.name, &spec.shape)?;
        let array = mlx_rs::ops::zeros_dtype(&shape, dtype_of(spec.elem)).map_err(mlx_err)?;
        Ok(MetalTensor {
            elem: spec.elem,
            shape: spec.shape.clone(),
            array,
        })
    }

    fn upload(&self, elem: Elem, shape: &[usize], bytes: &[u8]) -> Result<MetalTensor> {
        let dims = mlx_shape("upload shape", shape)?;
        let want = shape.iter().product::<usize>() * elem.size();
        if bytes.len() != want {
            return Err(Error::invalid(
                "upload bytes",
                bytes.len(),
                format!("{elem} tensor of shape {shape:?} needs {want}"),
            ));
        }
        let array = match elem {
            Elem::U32 => {
                let v: Vec<u32> = bytes
                    .chunks_exact(4)
                    .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect();
                Array::from_slice(&v, &dims)
            }
            Elem::F32 => {
                let v: Vec<f32> = bytes
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect();
                Array::from_slice(&v, &dims)
            }
            Elem::F16 => {
                let v: Vec<half::f16> = bytes
                    .chunks_exact(2)
                    .map(|b| half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])))
                    .collect();
                Array::from_slice(&v, &dims)
            }
            Elem::Bf16 => {
                let v: Vec<half::bf16> = bytes
                    .chunks_exact(2)
                    .map(|b| half::bf16::from_bits(u16::from_le_bytes([b[0], b[1]])))
                    .collect();
                Array::from_slice(&v, &dims)
            }
        };
        Ok(MetalTensor {
            elem,
            shape: shape.to_vec(),
            array,
        })
    }

    fn download(&self, t: &MetalTensor) -> Result<Vec<u8>> {
        // A view (a transpose, a strided slice) is not a row-major slice: copy it into
        // one; MLX shares the buffer where it already is.
        let array = t.array.contiguous().map_err(mlx_err)?;
        array.eval().map_err(mlx_err)?;
        if array.size() == 0 {
            return Ok(Vec::new());
        }
        let slice_err = |e: mlx_rs::error::AsSliceError| Error::backend("metal", e);
        let bytes = match t.elem {
            Elem::U32 => array
                .try_as_slice::<u32>()
                .map_err(slice_err)?
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect(),
            Elem::F32 => array
                .try_as_slice::<f32>()
                .map_err(slice_err)?
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect(),
            Elem::F16 => array
                .try_as_slice::<half::f16>()
                .map_err(slice_err)?
                .iter()
                .flat_map(|v| v.to_bits().to_le_bytes())
                .collect(),
            Elem::Bf16 => array
                .try_as_slice::<half::bf16>()
                .map_err(slice_err)?
                .iter()
                .flat_map(|v| v.to_bits().to_le_bytes())
                .collect(),
        };
        Ok(bytes)
    }

    fn compile(&self, launch: &Launch<'_>) -> Result<Compiled> {
        self.limits()
            .check(launch, &format!("Metal ({})", self.info.id))?;
        self.kernel(launch)
    }

    fn bind<'a>(
        &self,
        compiled: &Compiled,
        launch: &Launch<'_>,
        inputs: &[&'a MetalTensor],
        outputs: &'a mut [&mut MetalTensor],
    ) -> Result<Bound<'a>> {
        crate::kernel::check_launch(launch, inputs, outputs)?;
        crate::kernel::check_compiled(compiled.1, launch)?;
        // MLX dispatches threads, not groups: the grid is in threads.
        let dispatch = MlxDispatch::of(launch.kernel, launch.grid)?;
        let threads = dispatch.thread_group.0 as u64
            * dispatch.thread_group.1 as u64
            * dispatch.thread_group.2 as u64;
        if threads > MAX_THREADS_PER_THREADGROUP {
            return Err(Error::invalid(
                format!("{} ({}) threads per threadgroup", launch.kernel, launch.id),
                threads,
                format!("Metal runs at most {MAX_THREADS_PER_THREADGROUP}"),
            ));
        }
        let out_specs = launch
            .outputs
            .iter()
            .map(|s| {
                Ok(MetalKernelOutput {
                    shape: mlx_shape(s.name, &s.shape)?,
                    dtype: dtype_of(s.elem),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Bound {
            compiled: compiled.clone(),
            kernel: launch.kernel,
            id: launch.id,
            dispatch,
            threads,
            inputs: inputs.iter().map(|t| t.array.clone()).collect(),
            out_specs,
            specs: launch.outputs.clone(),
            zero_outputs: launch.zero_outputs,
            outputs: outputs.iter_mut().map(|t| &mut **t).collect(),
            empty: launch.grid.is_empty(),
        })
    }

    fn run(&self, b: &mut Bound<'_>) -> Result<()> {
        if b.empty {
            return Ok(());
        }
        let (kernel, evaluated) = &*b.compiled.0;
        let first = !evaluated.get();
        let arrays_in: Vec<&Array> = b.inputs.iter().collect();
        // SAFETY: input and output shapes and dtypes match the kernel's declared specs
        // (checked in `bind`), and the launch keeps its `KernelSpec`'s promise: it reads
        // only inside its inputs, never writes them, and writes only inside its outputs,
        // within the grid built from its own `grid()`: each element it writes once, or
        // (split-K arrival counters and workspaces) through atomics and fences on outputs
        // MLX zeroes first (`zero_outputs`, MLX's `init_value`). An output a kernel does
        // not write (`reduce_mma`'s one-word `ws` without split-K) is returned as MLX
        // allocated it: no caller reads it.
        let arrays = unsafe {
            kernel.apply(
                &arrays_in,
                &b.out_specs,
                b.dispatch.grid,
                b.dispatch.thread_group,
                MetalKernelApplyOptions {
                    init_value: b.zero_outputs.then_some(0.0),
                    ..Default::default()
                },
            )
        }
        .map_err(|e| self.failed(b, first, e))?;
        if arrays.len() != b.outputs.len() {
            return Err(Error::backend(
                "metal",
                format!(
                    "{}: MLX returned {} outputs for {}",
                    b.id,
                    arrays.len(),
                    b.outputs.len()
                ),
            ));
        }
        // The first launch waits, so what MLX defers to evaluation surfaces here (see
        // `failed`); later ones only start the work.
        if first {
            mlx_rs::transforms::eval(&arrays).map_err(|e| self.failed(b, true, e))?;
            evaluated.set(true);
        } else {
            mlx_rs::transforms::async_eval(&arrays).map_err(|e| self.failed(b, false, e))?;
        }
        for ((slot, array), spec) in b.outputs.iter_mut().zip(arrays).zip(&b.specs) {
            let got: Vec<usize> = array.shape().iter().map(|&d| d as usize).collect();
            if elem_of(array.dtype()) != Some(spec.elem) || got != spec.shape {
                return Err(Error::backend(
                    "metal",
                    format!(
                        "{}: MLX returned {:?} {got:?} for output {} ({} {:?})",
                        b.id,
                        array.dtype(),
                        spec.name,
                        spec.elem,
                        spec.shape
                    ),
                ));
            }
            // The caller's tensor now holds the kernel's output (its clones, separate
            // MLX arrays, keep the old value, as with any MLX operation).
            slot.array = array;
        }
        Ok(())
    }
}
