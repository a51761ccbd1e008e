//! The CUDA backend: cudarc loads the driver and NVRTC at run time, NVRTC compiles each
//! specialization for the device's own `sm_XY` with contraction and flush-to-zero off
//! (SPEC 5), and compiled PTX is cached per specialization in memory and on disk.

use crate::error::{Error, Result};
use crate::kernel::{fnv1a, Backend, DeviceTensor, Dialect, Elem, Launch, Rendered, TensorSpec};
use cudarc::driver::sys::{CUdevice_attribute, CUevent_flags};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::Ptx;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// What the tuner and `trellis info --devices` report about a GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaDeviceInfo {
    pub name: String,
    pub compute_capability: (i32, i32),
    pub sm_count: i32,
    pub memory_bytes: usize,
    pub shared_per_block: usize,
    /// Stable id for tuning tables, e.g. `nvidia-h200`.
    pub id: String,
}

/// A buffer in device memory.
pub struct CudaTensor {
    elem: Elem,
    shape: Vec<usize>,
    buf: CudaSlice<u8>,
}

impl DeviceTensor for CudaTensor {
    fn elem(&self) -> Elem {
        self.elem
    }
    fn shape(&self) -> Vec<usize> {
        self.shape.clone()
    }
}

/// One CUDA device and a stream on it.
pub struct CudaBackend {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    arch: &'static str,
    info: CudaDeviceInfo,
    cache_dir: PathBuf,
    kernels: Mutex<HashMap<String, CudaFunction>>,
}

fn driver_err(e: impl std::fmt::Debug) -> Error {
    Error::backend("cuda", format!("{e:?}"))
}

/// Whether the driver and NVRTC libraries can be loaded, with the reason when not.
pub fn probe() -> Result<()> {
    // SAFETY: these only try to dlopen the libraries.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(Error::Unavailable {
            backend: "cuda".into(),
            reason: "no NVIDIA driver library (libcuda.so) could be loaded".into(),
        });
    }
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(Error::Unavailable {
            backend: "cuda".into(),
            reason: "no NVRTC library (libnvrtc.so) could be loaded".into(),
        });
    }
    let n = CudaContext::device_count().map_err(|e| Error::Unavailable {
        backend: "cuda".into(),
        reason: format!("driver reports {e:?}"),
    })?;
    if n < 1 {
        return Err(Error::Unavailable {
            backend: "cuda".into(),
            reason: "the driver sees no CUDA device".into(),
        });
    }
    Ok(())
}

impl CudaBackend {
    /// Open device `ordinal`; `Error::Unavailable` when there is no driver, NVRTC or device.
    pub fn new(ordinal: usize) -> Result<Self> {
        probe()?;
        let ctx = CudaContext::new(ordinal).map_err(|e| Error::Unavailable {
            backend: "cuda".into(),
            reason: format!("cannot open device {ordinal}: {e:?}"),
        })?;
        let stream = ctx.default_stream();
        let name = ctx.name().map_err(driver_err)?;
        let cc = ctx.compute_capability().map_err(driver_err)?;
        let attr = |a| ctx.attribute(a).map_err(driver_err);
        let info = CudaDeviceInfo {
            id: crate::backend::slug(&name),
            name,
            compute_capability: cc,
            sm_count: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
            memory_bytes: ctx.total_mem().map_err(driver_err)?,
            shared_per_block: attr(
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK,
            )? as usize,
        };
        let arch: &'static str = Box::leak(format!("sm_{}{}", cc.0, cc.1).into_boxed_str());
        let cache_dir = crate::backend::cpu::cache_root().join("cuda");
        std::fs::create_dir_all(&cache_dir).map_err(|e| Error::file(&cache_dir, e))?;
        Ok(CudaBackend {
            ctx,
            stream,
            arch,
            info,
            cache_dir,
            kernels: Mutex::new(HashMap::new()),
        })
    }

    /// The device's identity.
    pub fn info(&self) -> &CudaDeviceInfo {
        &self.info
    }

    /// The stream kernels run on (for timing with events).
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The context (for cuBLAS and events).
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// NVRTC flags: the device's own architecture (so NVRTC emits SASS, compiled in
    /// parallel, instead of PTX that the driver would JIT one by one at load), and no
    /// contraction, flush-to-zero or approximate division (SPEC 5).
    fn options(&self) -> Vec<String> {
        [
            "--ftz=false",
            "--prec-div=true",
            "--prec-sqrt=true",
            "--fmad=false",
            "--std=c++17",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([format!("--gpu-architecture={}", self.arch)])
        .collect()
    }

    /// The full NVRTC source of a kernel: shim, shared functions, header, entry.
    pub fn source(
        symbol: &str,
        rendered: &Rendered,
        inputs: &[TensorSpec],
        outputs: &[TensorSpec],
    ) -> String {
        let mut params = Vec::new();
        for t in inputs {
            params.push(format!(
                "const {}* __restrict__ {}",
                t.elem.c_type(Dialect::Cuda),
                t.name
            ));
        }
        for t in outputs {
            params.push(format!(
                "{}* __restrict__ {}",
                t.elem.c_type(Dialect::Cuda),
                t.name
            ));
        }
        format!(
            "{prelude}\n{header}\nextern \"C\" __global__ void {symbol}({params}) {{\n{body}\n}}\n",
            prelude = crate::kernel::prelude(Dialect::Cuda),
            header = rendered.header,
            params = params.join(", "),
            body = rendered.body,
        )
    }

    fn cubin(&self, symbol: &str, src: &str) -> Result<Vec<u8>> {
        let opts = self.options();
        let key = fnv1a(format!("{opts:?}|{src}").as_bytes());
        let path = self.cache_dir.join(format!("{symbol}-{key:016x}.cubin"));
        if let Ok(bin) = std::fs::read(&path) {
            return Ok(bin);
        }
        let bin = nvrtc_cubin(src, &opts).map_err(|log| Error::Compile {
            kernel: symbol.into(),
            backend: format!("cuda ({})", self.arch),
            log,
        })?;
        let tmp = path.with_extension(format!("{}.tmp", std::process::id()));
        if std::fs::write(&tmp, &bin).is_ok() {
            let _ = std::fs::rename(&tmp, &path);
        }
        Ok(bin)
    }

    fn function(&self, launch: &Launch<'_>) -> Result<CudaFunction> {
        if let Some(f) = self
            .kernels
            .lock()
            .expect("kernel cache lock")
            .get(&launch.symbol)
        {
            return Ok(f.clone());
        }
        let rendered = (launch.render)(Dialect::Cuda)?;
        let src = Self::source(&launch.symbol, &rendered, &launch.inputs, &launch.outputs);
        let bin = self.cubin(&launch.symbol, &src)?;
        self.load(&launch.symbol, bin)
    }

    fn load(&self, symbol: &str, cubin: Vec<u8>) -> Result<CudaFunction> {
        let module = self
            .ctx
            .load_module(Ptx::from_binary(cubin))
            .map_err(|e| Error::Compile {
                kernel: symbol.into(),
                backend: "cuda".into(),
                log: format!("loading the module: {e:?}"),
            })?;
        let f = module.load_function(symbol).map_err(driver_err)?;
        self.kernels
            .lock()
            .expect("kernel cache lock")
            .insert(symbol.to_string(), f.clone());
        Ok(f)
    }

    fn check_device(&self, t: &CudaTensor, name: &str) -> Result<()> {
        if t.buf.context().cu_ctx() != self.ctx.cu_ctx() {
            return Err(Error::invalid(
                name,
                format!("device {}", t.buf.ordinal()),
                format!(
                    "tensor lives on another CUDA context than this backend's device {}",
                    self.ctx.ordinal()
                ),
            ));
        }
        Ok(())
    }
}

impl Backend for CudaBackend {
    type Tensor = CudaTensor;

    fn name(&self) -> &'static str {
        "cuda"
    }

    fn dialect(&self) -> Dialect {
        Dialect::Cuda
    }

    fn device_id(&self) -> String {
        self.info.id.clone()
    }

    fn synchronize(&self) -> Result<()> {
        self.stream.synchronize().map_err(driver_err)
    }

    fn time_source(&self) -> &'static str {
        "GPU (CUDA events)"
    }

    fn time_ms(&self, f: &mut dyn FnMut() -> Result<()>) -> Result<f64> {
        let start = self
            .ctx
            .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(driver_err)?;
        let end = self
            .ctx
            .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(driver_err)?;
        start.record(&self.stream).map_err(driver_err)?;
        f()?;
        end.record(&self.stream).map_err(driver_err)?;
        end.synchronize().map_err(driver_err)?;
        Ok(start.elapsed_ms(&end).map_err(driver_err)? as f64)
    }

    fn alloc(&self, spec: &TensorSpec) -> Result<CudaTensor> {
        let bytes = (spec.len() * spec.elem.size()).max(1);
        Ok(CudaTensor {
            elem: spec.elem,
            shape: spec.shape.clone(),
            buf: self.stream.alloc_zeros::<u8>(bytes).map_err(driver_err)?,
        })
    }

    fn upload(&self, elem: Elem, shape: &[usize], bytes: &[u8]) -> Result<CudaTensor> {
        let want = shape.iter().product::<usize>() * elem.size();
        if bytes.len() != want {
            return Err(Error::invalid(
                "upload bytes",
                bytes.len(),
                format!("{elem} tensor of shape {shape:?} needs {want}"),
            ));
        }
        let buf = if bytes.is_empty() {
            self.stream.alloc_zeros::<u8>(1).map_err(driver_err)?
        } else {
            self.stream.clone_htod(bytes).map_err(driver_err)?
        };
        Ok(CudaTensor {
            elem,
            shape: shape.to_vec(),
            buf,
        })
    }

    fn download(&self, t: &CudaTensor) -> Result<Vec<u8>> {
        let n = t.shape.iter().product::<usize>() * t.elem.size();
        let mut v = self.stream.clone_dtoh(&t.buf).map_err(driver_err)?;
        v.truncate(n);
        Ok(v)
    }

    fn launch_into(
        &self,
        launch: &Launch<'_>,
        inputs: &[&CudaTensor],
        outputs: &mut [&mut CudaTensor],
    ) -> Result<()> {
        crate::kernel::check_launch(launch, inputs, outputs)?;
        for (t, s) in inputs.iter().zip(&launch.inputs) {
            self.check_device(t, &format!("{}.{}", launch.kernel, s.name))?;
        }
        for (t, s) in outputs.iter().zip(&launch.outputs) {
            self.check_device(t, &format!("{}.{}", launch.kernel, s.name))?;
        }
        if launch.shared_bytes > self.info.shared_per_block {
            return Err(Error::invalid(
                "threadgroup memory",
                launch.shared_bytes,
                format!(
                    "{} allows {} bytes per block",
                    self.info.name, self.info.shared_per_block
                ),
            ));
        }
        let f = self.function(launch)?;
        let cfg = LaunchConfig {
            grid_dim: (
                launch.grid.groups[0],
                launch.grid.groups[1],
                launch.grid.groups[2],
            ),
            block_dim: (launch.grid.threads, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut builder = self.stream.launch_builder(&f);
        for t in inputs {
            builder.arg(&t.buf);
        }
        for t in outputs.iter_mut() {
            builder.arg(&mut t.buf);
        }
        // SAFETY: argument count and element types follow the kernel's declared specs,
        // checked above; every validated specialization indexes within them.
        unsafe { builder.launch(cfg) }.map_err(driver_err)?;
        Ok(())
    }

    fn precompile(&self, launches: &[Launch<'_>]) -> Result<()> {
        use rayon::prelude::*;
        let known: std::collections::HashSet<String> = self
            .kernels
            .lock()
            .expect("kernel cache lock")
            .keys()
            .cloned()
            .collect();
        let mut seen = std::collections::HashSet::new();
        let mut todo = Vec::new();
        for l in launches {
            if !known.contains(&l.symbol) && seen.insert(l.symbol.clone()) {
                let r = (l.render)(Dialect::Cuda)?;
                todo.push((
                    l.symbol.clone(),
                    Self::source(&l.symbol, &r, &l.inputs, &l.outputs),
                ));
            }
        }
        // NVRTC is thread-safe; compile in parallel, load on this thread. A failure is
        // left for the launch to report, so one bad specialization does not hide the rest.
        let bins: Vec<(String, Result<Vec<u8>>)> = todo
            .par_iter()
            .map(|(s, src)| (s.clone(), self.cubin(s, src)))
            .collect();
        for (symbol, bin) in bins {
            if let Ok(bin) = bin {
                let _ = self.load(&symbol, bin);
            }
        }
        Ok(())
    }
}

/// Compile `src` with NVRTC straight to a CUBIN; `Err` holds the compiler log.
fn nvrtc_cubin(src: &str, options: &[String]) -> std::result::Result<Vec<u8>, String> {
    use cudarc::nvrtc::{result, sys};
    let csrc = std::ffi::CString::new(src).map_err(|e| e.to_string())?;
    let prog = result::create_program(&csrc, None).map_err(|e| format!("{e:?}"))?;
    // SAFETY: `prog` was just created and is destroyed exactly once below; the buffers
    // passed to NVRTC are sized by NVRTC's own size queries.
    unsafe {
        let out = match result::compile_program(prog, options) {
            Err(e) => {
                let log = result::get_program_log(prog)
                    .map(|l| {
                        std::ffi::CStr::from_ptr(l.as_ptr())
                            .to_string_lossy()
                            .into_owned()
                    })
                    .unwrap_or_default();
                Err(format!("{e:?}\n{log}"))
            }
            Ok(()) => {
                let mut size = 0usize;
                sys::nvrtcGetCUBINSize(prog, &mut size)
                    .result()
                    .map_err(|e| format!("{e:?}"))
                    .and_then(|_| {
                        let mut bin = vec![0u8; size];
                        sys::nvrtcGetCUBIN(prog, bin.as_mut_ptr() as *mut std::ffi::c_char)
                            .result()
                            .map(|_| bin)
                            .map_err(|e| format!("{e:?}"))
                    })
            }
        };
        let _ = result::destroy_program(prog);
        out
    }
}
