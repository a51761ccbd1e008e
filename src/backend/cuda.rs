//! The CUDA backend: cudarc loads the driver and NVRTC at run time, NVRTC compiles each
//! specialization for the device's own `sm_XY` with contraction and flush-to-zero off
//! (SPEC 5), and each specialization's CUBIN is cached in memory and on disk.

use crate::codegen::{cuda_unit, Dialect};
use crate::error::{Error, Result};
use crate::kernel::{
    fnv1a, AheadCompiler, Backend, DeviceTensor, Elem, KernelId, Launch, Limits, TensorSpec,
};
use cudarc::driver::sys::{CUdevice_attribute, CUevent_flags, CUfunction_attribute};
use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut,
    PinnedHostSlice,
};
use cudarc::nvrtc::Ptx;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// What the tuner and `trellis info --devices` report about a GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaDeviceInfo {
    /// The driver's device name (e.g. `NVIDIA H200`).
    pub name: String,
    /// Compute capability as `(major, minor)`; the backend compiles for `sm_{major}{minor}`.
    pub compute_capability: (i32, i32),
    /// Number of streaming multiprocessors.
    pub sm_count: i32,
    /// Total device memory in bytes.
    pub memory_bytes: usize,
    /// Shared memory per block in bytes without opt-in (`MAX_SHARED_MEMORY_PER_BLOCK`).
    pub shared_per_block: usize,
    /// Shared memory per block in bytes a kernel gets by opting in
    /// (`MAX_SHARED_MEMORY_PER_BLOCK_OPTIN`; the H200: 227 KB).
    pub shared_per_block_opt_in: usize,
    /// Stable id for tuning tables, e.g. `nvidia-h200`.
    pub id: String,
}

/// A buffer in device memory.
pub struct CudaTensor {
    elem: Elem,
    shape: Vec<usize>,
    buf: CudaSlice<u8>,
    /// The completion of a [`Backend::download_later`] copy that may still read `buf`
    /// (the copy runs on the backend's side stream; its `Later` clears this once the
    /// copy has landed). Only a `Later` leaked (`mem::forget`) leaves it here at drop.
    copy_out: Mutex<Option<Arc<CudaEvent>>>,
}

impl Drop for CudaTensor {
    fn drop(&mut self) {
        // The free (cudarc's, on `buf`'s stream) after a copy still reading it. Nowhere
        // to report a failure; a failed wait leaves the context broken for every call.
        let copy_out = self.copy_out.get_mut();
        if let Some(copied) = copy_out.unwrap_or_else(|e| e.into_inner()).take() {
            let _ = self.buf.stream().wait(&copied);
        }
    }
}

impl CudaTensor {
    /// The device address of the first element, for interop (a cuBLAS call writing
    /// into a tensor of this backend). Ordered on `stream` like the backend's launches.
    pub fn device_ptr(&self, stream: &CudaStream) -> u64 {
        self.buf.device_ptr(stream).0
    }
}

impl DeviceTensor for CudaTensor {
    fn elem(&self) -> Elem {
        self.elem
    }
    fn shape(&self) -> Vec<usize> {
        self.shape.clone()
    }
}

/// One CUDA device and a stream on it (launches, uploads, writes, downloads), with a
/// second for [`Backend::download_later`]'s copies.
pub struct CudaBackend {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    info: CudaDeviceInfo,
    cubins: Arc<Cubins>,
    kernels: Mutex<HashMap<KernelId, CudaFunction>>,
    /// Page-locked memory that downloads of up to [`STAGED_BYTES`] go through (made at
    /// the first): a copy from the device into pageable memory took about 24 us for a
    /// facade call's y (35 KB), 11.7 through this (on an H100). Uploads do not: through
    /// page-locked slots (the slack zeroed there, an event before a slot's reuse) x's
    /// upload took 12.1 us against 8.4 for the pageable copy (an H100, fiftieth session:
    /// two event calls more than the zeroing they save).
    /// `None` inside where the driver had none to give (made once either way).
    staging: std::sync::OnceLock<Option<Mutex<PinnedHostSlice<u8>>>>,
    /// A stream of its own for [`Backend::download_later`]'s copies (made at the
    /// first; `None` inside where none could be had: they then go on `stream`): a copy
    /// on `stream` would hold the kernels queued after it until it lands, the copy
    /// engine's round trip between two kernels.
    side: std::sync::OnceLock<Option<Arc<CudaStream>>>,
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        // A leaked `Later` (`mem::forget`) ends its borrow of the backend without waiting
        // for its copy, and the staging's own free waits only on cudarc's event, which
        // that raw copy never records: wait for the side stream before the staging goes.
        // Nowhere to report a failure; a broken context has no copy left to wait for.
        // Where no side stream could be had, the copies went on the main stream.
        let copies = match self.side.get() {
            Some(Some(side)) => side,
            Some(None) => &self.stream,
            None => return,
        };
        let _ = copies.synchronize();
    }
}

/// A copy into the page-locked staging still in flight ([`CudaBackend::download_later`]):
/// it holds the staging, and dropped (its bytes taken or not) it waits for the copy, so
/// nothing else reuses the memory while the copy may still write it, and clears its
/// tensor's [`CudaTensor::copy_out`].
struct InFlight<'a> {
    copied: Arc<CudaEvent>,
    from: &'a CudaTensor,
    _staging: std::sync::MutexGuard<'a, PinnedHostSlice<u8>>,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        // Nowhere to report a failure here; a failed wait leaves the context broken
        // for every later call, which reports it (and the tensor keeps the event).
        if self.copied.synchronize().is_ok() {
            let copy_out = self.from.copy_out.lock();
            *copy_out.unwrap_or_else(|e| e.into_inner()) = None;
        }
    }
}

/// The largest download that goes through [`CudaBackend`]'s page-locked staging.
const STAGED_BYTES: usize = 1 << 20;

/// The staging, unless a copy holds it: a `Later` not yet taken (on this thread, waiting
/// for it would never end; a leaked one never lets go) or another thread's download.
/// Where it is held the caller copies through pageable memory instead.
fn free_staging(
    staging: &Mutex<PinnedHostSlice<u8>>,
) -> Option<std::sync::MutexGuard<'_, PinnedHostSlice<u8>>> {
    match staging.try_lock() {
        Ok(pinned) => Some(pinned),
        Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

/// NVRTC for one architecture with the CUBIN cache on disk: needs no device, so it also
/// serves [`CudaAhead`] on another thread.
struct Cubins {
    arch: String,
    dir: PathBuf,
    /// NVRTC's version, part of the cache key: a newer NVRTC compiles anew.
    nvrtc: (i32, i32),
}

impl Cubins {
    /// The CUBIN of a unit: from the disk cache (keyed by symbol, NVRTC's version,
    /// options and source), else compiled by NVRTC and cached.
    fn get(&self, symbol: &str, src: &str, cap: Option<u32>) -> Result<Vec<u8>> {
        self.lookup(symbol, src, cap).map(|(bin, _)| bin)
    }

    /// [`Cubins::get`], and whether the CUBIN came from the disk cache.
    fn lookup(&self, symbol: &str, src: &str, cap: Option<u32>) -> Result<(Vec<u8>, bool)> {
        let path = self.path(symbol, src, cap);
        if let Some(bin) = crate::backend::cache::read_blob(&path) {
            return Ok((bin, true));
        }
        self.compile_to(&path, symbol, src, cap)
            .map(|bin| (bin, false))
    }

    fn path(&self, symbol: &str, src: &str, cap: Option<u32>) -> PathBuf {
        let opts = nvrtc_options(&self.arch, cap);
        let key = fnv1a(format!("{:?}|{opts:?}|{src}", self.nvrtc).as_bytes());
        self.dir.join(format!("{symbol}-{key:016x}.cubin"))
    }

    /// Compile a unit with NVRTC and cache its CUBIN at `path` (replacing a cached one).
    fn compile_to(
        &self,
        path: &Path,
        symbol: &str,
        src: &str,
        cap: Option<u32>,
    ) -> Result<Vec<u8>> {
        let opts = nvrtc_options(&self.arch, cap);
        let (bin, _) = nvrtc_cubin(src, &opts).map_err(|log| Error::Compile {
            kernel: symbol.into(),
            backend: format!("cuda ({})", self.arch),
            log,
        })?;
        crate::backend::cache::write_blob(path, &bin);
        Ok(bin)
    }

    /// The units of `launches` (each id once) that `skip` does not hold, rendered: the
    /// launch's index, its symbol and its source.
    fn units(
        launches: &[Launch<'_>],
        skip: impl Fn(&KernelId) -> bool,
    ) -> Result<Vec<(usize, String, String)>> {
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for (i, l) in launches.iter().enumerate() {
            if !skip(&l.id) && seen.insert(l.id) {
                let r = (l.render)(Dialect::Cuda)?;
                let symbol = l.id.to_string();
                let src = cuda_unit(&symbol, &r, &l.inputs, &l.outputs);
                out.push((i, symbol, src));
            }
        }
        Ok(out)
    }
}

/// The CUDA backend's [`AheadCompiler`]: NVRTC into the disk cache on its own threads,
/// two fewer than the host has, so the thread timing kernels keeps a core.
struct CudaAhead {
    cubins: Arc<Cubins>,
    pool: rayon::ThreadPool,
}

impl AheadCompiler for CudaAhead {
    fn compile_ahead(&self, launches: &[Launch<'_>]) {
        use rayon::prelude::*;
        let Ok(units) = Cubins::units(launches, |_| false) else {
            return;
        };
        self.pool.install(|| {
            units.par_iter().for_each(|(_, symbol, src)| {
                let _ = self.cubins.get(symbol, src, None);
            })
        });
    }
}

fn driver_err(e: impl std::fmt::Debug) -> Error {
    Error::backend("cuda", format!("{e:?}"))
}

/// Whether the NVRTC library can be loaded (it needs no driver).
fn nvrtc_loadable() -> Result<()> {
    // SAFETY: this only tries to dlopen the library.
    if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(Error::Unavailable {
            backend: "cuda".into(),
            reason: "no NVRTC library (libnvrtc.so) could be loaded".into(),
        })
    }
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
    nvrtc_loadable()?;
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
        // SAFETY: before any buffer is made. This backend orders its streams itself:
        // the side stream (`download_later`) waits for the main stream's work before it
        // copies, and the tensor it copies stays borrowed until the copy has landed, so
        // cudarc's per-buffer events (which every launch would pay for once a context
        // has two streams) are not needed.
        unsafe { ctx.disable_event_tracking() };
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
            shared_per_block_opt_in: attr(
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            )? as usize,
        };
        let arch = format!("sm_{}{}", cc.0, cc.1);
        let cache_dir = crate::backend::cache::dir("cuda")?;
        Ok(CudaBackend {
            ctx,
            stream,
            info,
            cubins: Arc::new(Cubins {
                arch,
                dir: cache_dir,
                nvrtc: nvrtc_version()?,
            }),
            kernels: Mutex::new(HashMap::new()),
            staging: std::sync::OnceLock::new(),
            side: std::sync::OnceLock::new(),
        })
    }

    /// The device's identity.
    pub fn info(&self) -> &CudaDeviceInfo {
        &self.info
    }

    /// The stream kernels run on (for timing with events): work of one's own on this
    /// backend's tensors goes here, in order with its launches and copies.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The context (for cuBLAS and events). Its cudarc event tracking is off (this
    /// backend orders its own side stream), so a stream made on it is not ordered with
    /// this backend's work: use [`CudaBackend::stream`].
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    fn function(&self, launch: &Launch<'_>) -> Result<CudaFunction> {
        if let Some(f) = self
            .kernels
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&launch.id)
        {
            return Ok(f.clone());
        }
        let rendered = (launch.render)(Dialect::Cuda)?;
        let symbol = launch.id.to_string();
        let src = cuda_unit(&symbol, &rendered, &launch.inputs, &launch.outputs);
        let (bin, cached) = self.cubins.lookup(&symbol, &src, None)?;
        match self.load_fitting(launch, &symbol, &src, bin) {
            // A cached CUBIN that does not load here (written by another driver, or
            // damaged) is compiled again once; a fresh one that fails is the error.
            Err(_) if cached => {
                let path = self.cubins.path(&symbol, &src, None);
                let fresh = self.cubins.compile_to(&path, &symbol, &src, None)?;
                self.load_fitting(launch, &symbol, &src, fresh)
            }
            loaded => loaded,
        }
    }

    /// Load a compiled kernel; if ptxas gave it more registers than a threadgroup of
    /// the launch's threads has (the launch would fail with `LAUNCH_OUT_OF_RESOURCES`),
    /// compile it again under [`register_cap`] (spilling instead) and load that. A kernel
    /// that sizes shared memory at launch opts in to the bytes it asks for.
    fn load_fitting(
        &self,
        launch: &Launch<'_>,
        symbol: &str,
        src: &str,
        bin: Vec<u8>,
    ) -> Result<CudaFunction> {
        let (id, threads) = (launch.id, launch.grid.threads);
        let mut f = self.load(symbol, bin)?;
        if f.max_threads_per_block().map_err(driver_err)? < threads as i32 {
            let bin = self.cubins.get(symbol, src, Some(register_cap(threads)))?;
            f = self.load(symbol, bin)?;
            let fits = f.max_threads_per_block().map_err(driver_err)?;
            if fits < threads as i32 {
                return Err(Error::Compile {
                    kernel: symbol.into(),
                    backend: "cuda".into(),
                    log: format!(
                        "launches at most {fits} threads per threadgroup even under a cap of {} registers; the variant asks for {threads}",
                        register_cap(threads)
                    ),
                });
            }
        }
        if launch.dynamic_shared_bytes > 0 {
            let bytes = i32::try_from(launch.dynamic_shared_bytes).map_err(|_| {
                Error::invalid(
                    format!("{} dynamic threadgroup memory", launch.kernel),
                    launch.dynamic_shared_bytes,
                    "must fit in 32 bits",
                )
            })?;
            f.set_attribute(
                CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                bytes,
            )
            .map_err(|e| Error::Compile {
                kernel: symbol.into(),
                backend: "cuda".into(),
                log: format!(
                    "opting in to {} bytes of dynamic shared memory: {e:?}",
                    launch.dynamic_shared_bytes
                ),
            })?;
        }
        // Cached only once it fits: a kernel that cannot launch is never handed out.
        self.kernels
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(id, f.clone());
        Ok(f)
    }

    fn load(&self, symbol: &str, cubin: Vec<u8>) -> Result<CudaFunction> {
        let failed = |what: &str, e: cudarc::driver::DriverError| Error::Compile {
            kernel: symbol.into(),
            backend: "cuda".into(),
            log: format!("loading the {what}: {e:?}"),
        };
        let module = self
            .ctx
            .load_module(Ptx::from_binary(cubin))
            .map_err(|e| failed("module", e))?;
        module
            .load_function(symbol)
            .map_err(|e| failed("function", e))
    }

    /// Bytes `range` of `t` (within its elements: the caller checked), after the queued
    /// work: through the page-locked staging where it is free and large enough (a copy
    /// into pageable memory costs a staging of the driver's own and more latency: the
    /// fused kernels' flags are a few words read after every call), else pageable.
    fn copy_to_host(&self, t: &CudaTensor, range: std::ops::Range<usize>) -> Result<Vec<u8>> {
        let n = range.len();
        // Into memory reserved first: a huge output is an error, not an allocation abort.
        let mut v = crate::error::reserve(n, "download", format!("{:?}", t.shape))?;
        v.resize(n, 0);
        if n == 0 {
            return Ok(v);
        }
        match self.staging_for(n).and_then(free_staging) {
            Some(mut pinned) => {
                let ptr = pinned.as_mut_ptr().map_err(driver_err)?;
                // SAFETY: n is within the buffer's STAGED_BYTES (zeroed when made), and
                // the lock keeps every other use out until the stream has finished this
                // copy. (cudarc copies a whole host slice: the pinned slice itself would
                // ask for all of it.)
                let dst = unsafe { std::slice::from_raw_parts_mut(ptr, n) };
                self.stream
                    .memcpy_dtoh(&t.buf.slice(range), dst)
                    .map_err(driver_err)?;
                // A copy into page-locked memory is asynchronous: wait for it.
                self.stream.synchronize().map_err(driver_err)?;
                v.copy_from_slice(dst);
            }
            // Past the staging, none could be had, or it is held: pageable memory
            // (synchronous).
            None => self
                .stream
                .memcpy_dtoh(&t.buf.slice(range), &mut v)
                .map_err(driver_err)?,
        }
        Ok(v)
    }

    /// The page-locked staging for a copy of `n` bytes back to the host, made on first
    /// need; `None` past [`STAGED_BYTES`] or where none could be had.
    fn staging_for(&self, n: usize) -> Option<&Mutex<PinnedHostSlice<u8>>> {
        (n <= STAGED_BYTES)
            .then(|| {
                self.staging
                    .get_or_init(|| self.staging_buffer().map(Mutex::new))
            })
            .and_then(Option::as_ref)
    }

    /// The side stream for [`Backend::download_later`], made on first need.
    fn side_stream(&self) -> Option<&Arc<CudaStream>> {
        self.side
            .get_or_init(|| self.ctx.new_stream().ok())
            .as_ref()
    }

    /// The page-locked staging for downloads, zeroed (a slice over memory never written
    /// would be undefined behaviour), or `None` where the driver has none to give (the
    /// downloads then go through pageable memory).
    fn staging_buffer(&self) -> Option<PinnedHostSlice<u8>> {
        // Not write-combined (flags 0): the host reads it back.
        // SAFETY: zeroed (through cudarc's own slice of it) before anything reads it.
        let mut p = unsafe { self.ctx.alloc_pinned_with_flags::<u8>(STAGED_BYTES, 0) }.ok()?;
        p.as_mut_slice().ok()?.fill(0);
        Some(p)
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

/// The most registers per thread with which a threadgroup of `threads` threads launches
/// (64 K registers per threadgroup, allocated per warp in steps of 256, at most 255 per
/// thread). ptxas may take more (a fast kernel of k = 8 with f32 x at 16 simdgroups did),
/// and such a launch fails with `CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES`; compiled again under
/// the cap, it spills instead. Only those kernels get it: ptxas aims at a cap it is given
/// (a 16-simdgroup `reduce_mma` that takes 62 registers without one takes 91 under 128,
/// one threadgroup per SM instead of two), so a cap for all would change tuned kernels.
pub fn register_cap(threads: u32) -> u32 {
    let warps = threads.div_ceil(32).max(1);
    (65536 / (warps * 32) / 8 * 8).min(255)
}

/// Most buffers a kernel binds (this crate's kernels take at most eleven:
/// `gate_up_mma_parts`).
const MAX_ARGS: usize = 16;

/// A compiled CUDA kernel: its function, and which kernel it is (a launch binds only its
/// own kernel's function).
#[derive(Clone)]
pub struct Compiled {
    id: KernelId,
    function: CudaFunction,
}

/// A CUDA kernel with its buffers bound: the function, launch shape and device pointers
/// (kept in a fixed array, so a launch allocates nothing).
pub struct Bound<'a> {
    function: CudaFunction,
    grid: (u32, u32, u32),
    threads: u32,
    dynamic_shared: u32,
    ptrs: [u64; MAX_ARGS],
    args: usize,
    /// No threadgroups ([`crate::kernel::Grid::is_empty`]): runs nothing (the driver would refuse it).
    empty: bool,
    _buffers: std::marker::PhantomData<&'a mut CudaTensor>,
}

impl Backend for CudaBackend {
    type Tensor = CudaTensor;
    type Compiled = Compiled;
    type Bound<'a> = Bound<'a>;

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
        self.stream.synchronize().map_err(driver_err)?;
        match self.side.get().and_then(Option::as_ref) {
            Some(side) => side.synchronize().map_err(driver_err),
            None => Ok(()),
        }
    }

    fn timer(&self) -> &'static str {
        "device events (CUDA)"
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
        let bytes = crate::kernel::tensor_bytes(spec.elem, &spec.shape)?.max(1);
        Ok(CudaTensor {
            elem: spec.elem,
            shape: spec.shape.clone(),
            buf: self
                .stream
                .alloc_zeros::<u8>(bytes.saturating_add(super::READ_SLACK_BYTES))
                .map_err(driver_err)?,
            copy_out: Mutex::new(None),
        })
    }

    fn upload(&self, elem: Elem, shape: &[usize], bytes: &[u8]) -> Result<CudaTensor> {
        let want = crate::kernel::tensor_bytes(elem, shape)?;
        if bytes.len() != want {
            return Err(Error::invalid(
                "upload bytes",
                bytes.len(),
                format!("{elem} tensor of shape {shape:?} needs {want}"),
            ));
        }
        // Zeroed slack past the elements (`READ_SLACK_BYTES`), then the elements.
        let mut buf = self
            .stream
            .alloc_zeros::<u8>(bytes.len().saturating_add(super::READ_SLACK_BYTES))
            .map_err(driver_err)?;
        if !bytes.is_empty() {
            self.stream
                .memcpy_htod(bytes, &mut buf)
                .map_err(driver_err)?;
        }
        Ok(CudaTensor {
            elem,
            shape: shape.to_vec(),
            buf,
            copy_out: Mutex::new(None),
        })
    }

    fn download(&self, t: &CudaTensor) -> Result<Vec<u8>> {
        let n = t.shape.iter().product::<usize>() * t.elem.size();
        // The elements only, not the slack after them.
        self.copy_to_host(t, 0..n)
    }

    fn download_range(&self, t: &CudaTensor, range: std::ops::Range<usize>) -> Result<Vec<u8>> {
        crate::kernel::check_range(t, &range)?;
        self.copy_to_host(t, range)
    }

    fn download_later<'a>(&'a self, t: &'a CudaTensor) -> Result<crate::kernel::Later<'a>> {
        let n = t.shape.iter().product::<usize>() * t.elem.size();
        // The staging, held until the bytes are taken: the copy lands there (past it, or
        // while a copy holds it, the bytes are read now).
        let Some(mut pinned) = self.staging_for(n).filter(|_| n > 0).and_then(free_staging) else {
            let bytes = self.download(t)?;
            return Ok(Box::new(move || Ok(bytes)));
        };
        let ptr = pinned.as_mut_ptr().map_err(driver_err)?;
        // SAFETY: n is within the buffer's STAGED_BYTES (zeroed when made), and the lock,
        // held by the closure below, keeps every other use out until it has read them.
        let dst = unsafe { std::slice::from_raw_parts_mut(ptr, n) };
        // The event made first: once the copy is queued, nothing may fail before its
        // guard exists (or the staging would go back while the copy may still write it).
        let event = || {
            self.ctx
                .new_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING))
                .map_err(driver_err)
        };
        let copied = Arc::new(event()?);
        // On the side stream, once the work queued so far is done (the kernels queued
        // after this run beside the copy); on the main stream where there is none.
        let stream = match self.side_stream() {
            Some(side) => {
                let queued = event()?;
                queued.record(&self.stream).map_err(driver_err)?;
                side.wait(&queued).map_err(driver_err)?;
                side
            }
            None => &self.stream,
        };
        stream
            .memcpy_dtoh(&t.buf.slice(0..n), dst)
            .map_err(driver_err)?;
        if let Err(e) = copied.record(stream) {
            let _ = stream.synchronize();
            return Err(driver_err(e));
        }
        // The tensor stays borrowed until the `Later` is taken or dropped, which waits
        // for the copy; only a leaked one ends the borrow first, and then the tensor's
        // drop orders its free after the copy.
        *t.copy_out.lock().unwrap_or_else(|e| e.into_inner()) = Some(copied.clone());
        let copy = InFlight {
            copied,
            from: t,
            _staging: pinned,
        };
        Ok(Box::new(move || {
            copy.copied.synchronize().map_err(driver_err)?;
            // SAFETY: as above; the copy has landed (its event has completed).
            Ok(unsafe { std::slice::from_raw_parts(ptr, n) }.to_vec())
        }))
    }

    fn write(&self, t: &mut CudaTensor, bytes: &[u8]) -> Result<()> {
        let n = crate::kernel::check_write(t.elem, &t.shape, bytes)?;
        if n > 0 {
            // On the stream, after the work queued there (pageable: the copy has read
            // `bytes` when it returns). The slack stays zero.
            self.stream
                .memcpy_htod(bytes, &mut t.buf.slice_mut(0..n))
                .map_err(driver_err)?;
        }
        Ok(())
    }

    fn limits(&self) -> Limits {
        Limits {
            threadgroup_bytes: self.info.shared_per_block_opt_in,
            threads_per_group: 1024,
        }
    }

    fn compile(&self, launch: &Launch<'_>) -> Result<Compiled> {
        // Past the static limit only by opting in (`validate` holds the others to it).
        let limits = if launch.dynamic_shared_bytes > 0 {
            self.limits()
        } else {
            Limits {
                threadgroup_bytes: self.info.shared_per_block,
                ..self.limits()
            }
        };
        limits.check(launch, &self.info.name)?;
        Ok(Compiled {
            id: launch.id,
            function: self.function(launch)?,
        })
    }

    fn bind<'a>(
        &self,
        compiled: &Compiled,
        launch: &Launch<'_>,
        inputs: &[&'a CudaTensor],
        outputs: &'a mut [&mut CudaTensor],
    ) -> Result<Bound<'a>> {
        crate::kernel::check_launch(launch, inputs, outputs)?;
        crate::kernel::check_compiled(compiled.id, launch)?;
        let mut ptrs = [0u64; MAX_ARGS];
        if inputs.len() + outputs.len() > MAX_ARGS {
            return Err(Error::invalid(
                format!("{} arguments", launch.kernel),
                inputs.len() + outputs.len(),
                format!("the cuda backend binds at most {MAX_ARGS}"),
            ));
        }
        for (i, (t, s)) in inputs.iter().zip(&launch.inputs).enumerate() {
            self.check_device(t, &format!("{}.{}", launch.kernel, s.name))?;
            ptrs[i] = t.buf.device_ptr(&self.stream).0;
        }
        for (i, (t, s)) in outputs.iter_mut().zip(&launch.outputs).enumerate() {
            self.check_device(t, &format!("{}.{}", launch.kernel, s.name))?;
            if launch.zero_outputs {
                // Ordered on the stream before every launch of this binding.
                self.stream.memset_zeros(&mut t.buf).map_err(driver_err)?;
            }
            ptrs[inputs.len() + i] = t.buf.device_ptr_mut(&self.stream).0;
        }
        let g = launch.grid;
        let dynamic_shared = u32::try_from(launch.dynamic_shared_bytes).map_err(|_| {
            Error::invalid(
                format!("{} dynamic threadgroup memory", launch.kernel),
                launch.dynamic_shared_bytes,
                "must fit in 32 bits",
            )
        })?;
        Ok(Bound {
            function: compiled.function.clone(),
            grid: (g.groups[0], g.groups[1], g.groups[2]),
            threads: g.threads,
            dynamic_shared,
            ptrs,
            args: inputs.len() + outputs.len(),
            empty: g.is_empty(),
            _buffers: std::marker::PhantomData,
        })
    }

    fn run(&self, bound: &mut Bound<'_>) -> Result<()> {
        if bound.empty {
            return Ok(());
        }
        // The launch goes to the current context: make it this backend's (a bound kernel
        // may run on another thread, or beside another device's backend).
        self.ctx.bind_to_thread().map_err(driver_err)?;
        let mut params = [std::ptr::null_mut::<std::ffi::c_void>(); MAX_ARGS];
        for (p, v) in params.iter_mut().zip(bound.ptrs.iter_mut()) {
            *p = v as *mut u64 as *mut std::ffi::c_void;
        }
        // SAFETY: the arguments were checked against the kernel's declared specs in
        // `bind` and stay borrowed for the bound's lifetime; every validated
        // specialization indexes within them.
        unsafe {
            cudarc::driver::result::launch_kernel(
                bound.function.cu_function(),
                bound.grid,
                (bound.threads, 1, 1),
                bound.dynamic_shared,
                self.stream.cu_stream(),
                &mut params[..bound.args],
            )
        }
        .map_err(driver_err)
    }

    fn precompile(&self, launches: &[Launch<'_>]) -> Result<()> {
        use rayon::prelude::*;
        let known: std::collections::HashSet<KernelId> = self
            .kernels
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .keys()
            .copied()
            .collect();
        let units = Cubins::units(launches, |id| known.contains(id))?;
        // NVRTC is thread-safe; compile in parallel, load on this thread. A failure is
        // left for the launch to report, so one bad specialization does not hide the rest.
        let bins: Vec<Result<Vec<u8>>> = units
            .par_iter()
            .map(|(_, symbol, src)| self.cubins.get(symbol, src, None))
            .collect();
        for ((i, symbol, src), bin) in units.iter().zip(bins) {
            if let Ok(bin) = bin {
                let _ = self.load_fitting(&launches[*i], symbol, src, bin);
            }
        }
        Ok(())
    }

    fn ahead_compiler(&self) -> Option<Arc<dyn AheadCompiler>> {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads.saturating_sub(2).max(1))
            .build()
            .ok()?;
        Some(Arc::new(CudaAhead {
            cubins: self.cubins.clone(),
            pool,
        }))
    }
}

/// NVRTC flags: the device's own architecture (so NVRTC emits SASS, compiled in
/// parallel, instead of PTX that the driver would JIT one by one at load), and no
/// contraction, flush-to-zero or approximate division (SPEC 5). `cap`: a register
/// budget for the whole unit ([`register_cap`]), only for a kernel that did not fit its
/// threadgroup without one (ptxas takes a cap as its target, so kernels that fit
/// compile without).
fn nvrtc_options(arch: &str, cap: Option<u32>) -> Vec<String> {
    [
        "--ftz=false",
        "--prec-div=true",
        "--prec-sqrt=true",
        "--fmad=false",
        "--std=c++17",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([format!("--gpu-architecture={arch}")])
    .chain(cap.map(|c| format!("--maxrregcount={c}")))
    .collect()
}

/// A unit compiled offline: its CUBIN and what ptxas reported of the kernel's resources.
#[derive(Clone, Debug)]
pub struct CompiledUnit {
    /// The CUBIN (an ELF image) NVRTC produced.
    pub cubin: Vec<u8>,
    /// Registers per thread.
    pub registers: u32,
    /// Bytes of register spills stored to local memory, per thread.
    pub spill_stores: u32,
    /// Bytes of register spills loaded from local memory, per thread.
    pub spill_loads: u32,
}

/// Compile one complete CUDA unit (`KernelSpec::unit(Dialect::Cuda)`) for `arch`
/// (`sm_90`, ...) with NVRTC alone, with the flags the backend uses (plus ptxas's
/// resource report, which changes no code): no driver or device is needed, so machines
/// without a GPU (CI) check that the CUDA dialect compiles, and see each kernel's
/// registers and spills before a device measures it. `Error::Unavailable` without an
/// NVRTC library; `Error::Compile` with the compiler log.
pub fn compile_offline(symbol: &str, src: &str, arch: &str) -> Result<CompiledUnit> {
    offline_ready(arch)?;
    let mut opts = nvrtc_options(arch, None);
    opts.push("--ptxas-options=-v".into());
    let compile_err = |log: String| Error::Compile {
        kernel: symbol.into(),
        backend: format!("cuda ({arch}, offline)"),
        log,
    };
    let (cubin, log) = nvrtc_cubin(src, &opts).map_err(compile_err)?;
    let (registers, spill_stores, spill_loads) = ptxas_resources(&log)
        .ok_or_else(|| compile_err(format!("no register count in ptxas's report:\n{log}")))?;
    Ok(CompiledUnit {
        cubin,
        registers,
        spill_stores,
        spill_loads,
    })
}

/// Whether [`compile_offline`] can run for `arch`: an `sm_XY` name and a loadable NVRTC
/// (checked once before compiling many units, so a missing library is one error).
pub fn offline_ready(arch: &str) -> Result<()> {
    let digits = arch.strip_prefix("sm_").unwrap_or("");
    if digits.len() < 2 || !digits.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(Error::invalid("arch", arch, "expected sm_XY, e.g. sm_90"));
    }
    nvrtc_loadable()
}

/// (registers, spill store bytes, spill load bytes) from ptxas's `-v` report of a unit's
/// one kernel: `... bytes spill stores, ... bytes spill loads` and `Used N registers`.
fn ptxas_resources(log: &str) -> Option<(u32, u32, u32)> {
    let number_before = |line: &str, what: &str| -> Option<u32> {
        let head = &line[..line.find(what)?];
        head.split_whitespace().last()?.parse().ok()
    };
    let mut spills = (0, 0);
    let mut registers = None;
    for line in log.lines() {
        if let Some(n) = number_before(line, " bytes spill stores") {
            spills.0 = n;
        }
        if let Some(n) = number_before(line, " bytes spill loads") {
            spills.1 = n;
        }
        if let Some(n) = number_before(line, " registers") {
            registers = Some(n);
        }
    }
    Some((registers?, spills.0, spills.1))
}

/// NVRTC's (major, minor) version.
fn nvrtc_version() -> Result<(i32, i32)> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: two out-parameters NVRTC writes.
    unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| Error::backend("cuda", format!("NVRTC version: {e:?}")))?;
    Ok((major, minor))
}

/// Compile `src` with NVRTC straight to a CUBIN, with the compiler's log (ptxas's
/// report where asked for); `Err` holds the log.
fn nvrtc_cubin(src: &str, options: &[String]) -> std::result::Result<(Vec<u8>, String), String> {
    use cudarc::nvrtc::{result, sys};
    let csrc = std::ffi::CString::new(src).map_err(|e| e.to_string())?;
    let prog = result::create_program(&csrc, None).map_err(|e| format!("{e:?}"))?;
    // SAFETY: `prog` was just created and is destroyed exactly once below; the buffers
    // passed to NVRTC are sized by NVRTC's own size queries.
    unsafe {
        let compiled = result::compile_program(prog, options);
        let log = result::get_program_log(prog)
            .map(|l| {
                std::ffi::CStr::from_ptr(l.as_ptr())
                    .to_string_lossy()
                    .into_owned()
            })
            .unwrap_or_default();
        let out = match compiled {
            Err(e) => Err(format!("{e:?}\n{log}")),
            Ok(()) => {
                let mut size = 0usize;
                sys::nvrtcGetCUBINSize(prog, &mut size)
                    .result()
                    .map_err(|e| format!("{e:?}"))
                    .and_then(|_| {
                        let mut bin = vec![0u8; size];
                        sys::nvrtcGetCUBIN(prog, bin.as_mut_ptr() as *mut std::ffi::c_char)
                            .result()
                            .map(|_| (bin, log))
                            .map_err(|e| format!("{e:?}"))
                    })
            }
        };
        let _ = result::destroy_program(prog);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::{compile_offline, register_cap, CudaBackend, STAGED_BYTES};
    use crate::kernel::{Backend, Elem};
    use crate::Error;

    /// A `download_later` copy leaves its event on the tensor until its bytes are taken
    /// or it is dropped; leaked (`mem::forget`, which ends the borrow without waiting), it
    /// stays there, so the tensor's drop orders the free after the copy (on the side
    /// stream, which the free's stream knows nothing of otherwise).
    #[test]
    #[ignore = "needs an NVIDIA GPU: run with --ignored on one"]
    fn a_tensor_outlives_its_copy_out() {
        let b = CudaBackend::new(0).unwrap();
        let bytes: Vec<u8> = (0..64).collect();
        let t = b.upload(Elem::F32, &[16], &bytes).unwrap();
        let pending = |t: &super::CudaTensor| t.copy_out.lock().unwrap().is_some();
        let later = b.download_later(&t).unwrap();
        assert!(pending(&t));
        assert_eq!(later().unwrap(), bytes);
        assert!(!pending(&t), "taken");
        drop(b.download_later(&t).unwrap());
        assert!(!pending(&t), "dropped");
        std::mem::forget(b.download_later(&t).unwrap());
        assert!(pending(&t), "leaked");
        drop(t);
        // The staging stays locked (its guard leaked): downloads of every size go on,
        // through pageable memory.
        let small: Vec<u8> = (0..64).rev().collect();
        let t = b.upload(Elem::F32, &[16], &small).unwrap();
        assert_eq!(b.download(&t).unwrap(), small);
        assert_eq!(b.download_later(&t).unwrap()().unwrap(), small);
        let n = STAGED_BYTES / 4 + 1;
        let big: Vec<u8> = (0..4 * n).map(|i| i as u8).collect();
        let t = b.upload(Elem::F32, &[n], &big).unwrap();
        b.synchronize().unwrap();
        assert_eq!(b.download(&t).unwrap(), big);
        // A backend dropped right after a leak waits for the copy before its staging
        // goes (under compute-sanitizer a free under the copy would show), and its
        // tensors outlive it.
        let b = CudaBackend::new(0).unwrap();
        let t = b.upload(Elem::F32, &[16], &small).unwrap();
        std::mem::forget(b.download_later(&t).unwrap());
        drop(b);
        drop(t);
    }

    /// A `Later` holds the staging until it is taken; downloads on the same thread
    /// meanwhile (which would wait on it forever) go through pageable memory.
    #[test]
    #[ignore = "needs an NVIDIA GPU: run with --ignored on one"]
    fn downloads_beside_a_held_later_go_on() {
        let b = CudaBackend::new(0).unwrap();
        let one: Vec<u8> = (0..64).collect();
        let two: Vec<u8> = (0..128).map(|i| (3 * i) as u8).collect();
        let t1 = b.upload(Elem::F32, &[16], &one).unwrap();
        let t2 = b.upload(Elem::F32, &[32], &two).unwrap();
        let held = b.download_later(&t1).unwrap();
        assert_eq!(b.download(&t2).unwrap(), two);
        let second = b.download_later(&t2).unwrap();
        assert_eq!(second().unwrap(), two);
        assert_eq!(held().unwrap(), one);
        // Let go, the staging serves the next (its `Later` holds it again).
        let again = b.download_later(&t1).unwrap();
        assert!(b.staging_for(64).unwrap().try_lock().is_err());
        assert_eq!(again().unwrap(), one);
    }

    #[test]
    fn offline_compiles_name_the_arch_and_the_kernel() {
        let err = compile_offline("k", "", "90").unwrap_err();
        assert!(
            matches!(&err, Error::Invalid { field, .. } if field == "arch"),
            "{err}"
        );
        let bad = "extern \"C\" __global__ void k(float* y) { y[0] = undeclared; }";
        // SAFETY: this only tries to dlopen the library.
        if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            // CI loads NVRTC (.ci/run): a unit that does not compile names its kernel and
            // holds the compiler's log; one that does gives a CUBIN (an ELF image).
            let err = compile_offline("broken_kernel", bad, "sm_90").unwrap_err();
            let text = err.to_string();
            assert!(matches!(err, Error::Compile { .. }), "{text}");
            assert!(
                text.contains("broken_kernel") && text.contains("undeclared"),
                "{text}"
            );
            let good = "extern \"C\" __global__ void k(float* y) { y[0] = 1.0f; }";
            let unit = compile_offline("k", good, "sm_90").unwrap();
            assert_eq!(&unit.cubin[..4], b"\x7fELF");
            assert!((1..=255).contains(&unit.registers), "{unit:?}");
            assert_eq!((unit.spill_stores, unit.spill_loads), (0, 0));
        } else {
            // Without NVRTC this test checks the error alone (the compile checks above
            // run in CI, which loads NVRTC and compiles every quick unit with it too).
            eprintln!("NVRTC not found: the offline compile checks did not run");
            let err = compile_offline("broken_kernel", bad, "sm_90").unwrap_err();
            assert!(matches!(err, Error::Unavailable { .. }), "{err}");
        }
    }

    #[test]
    fn ptxas_reports_are_read() {
        let log = "ptxas info    : Compiling entry function 'k' for 'sm_90'\n\
                   ptxas info    : Function properties for k\n\
                   \x20   24 bytes stack frame, 20 bytes spill stores, 16 bytes spill loads\n\
                   ptxas info    : Used 168 registers, used 0 barriers, 360 bytes cmem[0]\n";
        assert_eq!(super::ptxas_resources(log), Some((168, 20, 16)));
        assert_eq!(super::ptxas_resources("no report"), None);
    }

    #[test]
    fn register_cap_fits_64k_registers_per_threadgroup() {
        assert_eq!(register_cap(32), 255);
        assert_eq!(register_cap(256), 255);
        assert_eq!(register_cap(384), 168);
        assert_eq!(register_cap(512), 128);
        assert_eq!(register_cap(1024), 64);
        for threads in (32..=1024).step_by(32) {
            let cap = register_cap(threads);
            assert!(cap.is_multiple_of(8) || cap == 255, "{threads}: {cap}");
            assert!(cap.div_ceil(8) * 8 * threads <= 65536, "{threads}: {cap}");
        }
    }
}
