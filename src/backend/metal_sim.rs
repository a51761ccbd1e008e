//! `metal-sim`: Metal without a Mac. Each specialization's Metal rendering, assembled
//! exactly as MLX assembles it ([`crate::codegen::metal::standalone`]: the header the Metal
//! backend passes, the signature MLX writes, the body), is compiled by the host C++
//! compiler (`$TRELLIS_METAL_SIM_CXX`, else `$CXX`, else `c++`) against an executable
//! `<metal_stdlib>` (`src/backend/metal_sim/metal_stdlib`, which documents the model) and
//! run on the CPU with Metal's execution model: every thread of a threadgroup is a fiber,
//! simdgroups of 32 lanes meet at every simd function, `threadgroup` memory is per group,
//! and the launch geometry is the one the Metal backend gives MLX
//! ([`crate::codegen::metal::MlxDispatch`]), run as `dispatchThreads` runs it.
//!
//! Outputs start as poison (all bits set, NaN for floats), as MLX leaves them
//! uninitialized, so an element no thread writes shows up. The fibers run in a fixed
//! order, first to last or last to first ([`Schedule`]): a kernel that leans on one
//! simdgroup running before another gives different results in the two. Threadgroups
//! run in parallel on a rayon pool; the fibers of one group share one OS thread.
//! Compiled kernels are cached on disk under `<cache root>/metal-sim` by source hash,
//! like the CPU backend's (through [`crate::backend::cache`]: private directories,
//! atomic writes, a damaged library built again), and many specializations share one
//! compiler call ([`Backend::precompile`]).

use super::cache;
use super::host_cxx::HostCxx;
use crate::codegen::metal::{
    self as metal_source, BufferKind, MlxDispatch, Param, MAX_THREADGROUP_MEMORY,
    MAX_THREADS_PER_THREADGROUP,
};
use crate::codegen::Dialect;
use crate::error::{Error, Result};
use crate::kernel::{fnv1a, Backend, Elem, KernelId, Launch, Limits, TensorSpec};
use libloading::Library;
use rayon::prelude::*;
use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// The executable `<metal_stdlib>`.
pub const METAL_STDLIB: &str = include_str!("metal_sim/metal_stdlib");

/// Compiler flags: no contraction and no fast math (SPEC 5's separate roundings), C++20
/// for `constinit` (threadgroup declarations), no strict aliasing (MSL code reinterprets
/// buffers freely). `-O1`: `cargo xtask verify --backend metal-sim --quick` (539 runs,
/// cold cache) took 29.5 s at -O1 and 54.3 s at -O2 on the 2-core CI machine; the
/// kernels run for milliseconds, compiling dominates.
const CXX_FLAGS: &[&str] = &[
    "-std=c++20",
    "-O1",
    "-march=native",
    "-ffp-contract=off",
    "-fno-fast-math",
    "-fno-strict-aliasing",
    "-fPIC",
    "-shared",
    "-w",
];

/// A kernel's entry: buffers in signature order, one thread's attribute values.
type EntryFn = unsafe extern "C" fn(*const *mut u8, *const u8);
/// `trellis_sim_run` of the shim.
type RunFn = unsafe extern "C" fn(
    EntryFn,
    *const *mut u8,
    *const u32,
    *const u32,
    u64,
    u64,
    u32,
    *mut u8,
    *mut u8,
    usize,
) -> i32;
type ScratchFn = unsafe extern "C" fn() -> usize;

/// A compiled simulated kernel: its entry, the shim's runner and the signature.
#[derive(Clone)]
pub struct Compiled {
    id: KernelId,
    _lib: Arc<Library>,
    entry: EntryFn,
    run: RunFn,
    scratch_bytes: usize,
    params: Arc<Vec<Param>>,
}

/// A tensor of the simulated device (followed by zeroed padding words).
pub type SimTensor = super::host::HostTensor;

/// The order in which the simulator runs a threadgroup's simdgroups and lanes (each
/// until its next barrier or simd function) and a launch's threadgroups. A GPU runs
/// them concurrently, so a kernel that is right on one must give the same results in
/// either order; one that reads what another simdgroup writes without a barrier between
/// sees poison or a stale value in one of them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Schedule {
    /// First to last.
    #[default]
    InOrder,
    /// Last to first.
    Reversed,
}

impl Schedule {
    /// The variable that picks the schedule of [`MetalSimBackend::new`]: `in-order` (the
    /// default) or `reversed`.
    pub const ENV: &'static str = "TRELLIS_METAL_SIM_SCHEDULE";

    /// The schedule `$TRELLIS_METAL_SIM_SCHEDULE` names (unset or empty: in order); an
    /// error naming the variable and its value when it names none.
    pub fn of_env() -> Result<Self> {
        match std::env::var(Self::ENV) {
            Err(std::env::VarError::NotPresent) => Ok(Schedule::InOrder),
            Ok(v) => v.parse(),
            Err(e) => Err(Error::invalid(Self::ENV, e, Self::EXPECTED)),
        }
    }

    const EXPECTED: &'static str = "expected in-order or reversed";
}

impl std::str::FromStr for Schedule {
    type Err = Error;
    /// `in-order` (or empty) or `reversed`; an error naming [`Schedule::ENV`] and the
    /// value otherwise.
    fn from_str(v: &str) -> Result<Self> {
        match v {
            "" | "in-order" => Ok(Schedule::InOrder),
            "reversed" => Ok(Schedule::Reversed),
            _ => Err(Error::invalid(Self::ENV, v, Self::EXPECTED)),
        }
    }
}

/// The simulated Metal device.
pub struct MetalSimBackend {
    compiler: HostCxx,
    schedule: Schedule,
    cache_dir: PathBuf,
    include_dir: PathBuf,
    kernels: Mutex<HashMap<KernelId, Compiled>>,
    pool: rayon::ThreadPool,
}

/// One kernel of a batch: symbol, complete MLX source, its signature.
struct Unit {
    id: KernelId,
    symbol: String,
    source: String,
    params: Vec<Param>,
}

impl Unit {
    fn of(launch: &Launch<'_>) -> Result<Self> {
        let rendered = (launch.render)(Dialect::Metal)?;
        let symbol = launch.id.unique_symbol();
        Ok(Unit {
            source: metal_source::standalone(&symbol, &rendered, &launch.inputs, &launch.outputs),
            params: metal_source::signature(&rendered.body, &launch.inputs, &launch.outputs),
            id: launch.id,
            symbol,
        })
    }
}

/// The C++ of one kernel in a batch: its complete MLX source in its own namespace (its
/// `#include` lines blanked, `<metal_stdlib>` is included once at the top), and an
/// `extern "C"` entry `<symbol>_sim` that binds the buffers and attributes in signature
/// order.
fn translation_unit_part(u: &Unit) -> String {
    let mut s = format!("namespace ns_{} {{\n", u.symbol);
    for line in u.source.lines() {
        if !line.trim_start().starts_with("#include") {
            s.push_str(line);
        }
        s.push('\n');
    }
    s.push_str("}\n");
    let args: Vec<String> = u
        .params
        .iter()
        .map(|p| match p {
            Param::Buffer { decl, index, .. } => {
                let ty = decl.rsplit_once(' ').map_or(decl.as_str(), |(t, _)| t);
                match ty.strip_suffix('&') {
                    Some(referent) => format!("*({referent}*)bufs[{index}]"),
                    None => format!("({ty})bufs[{index}]"),
                }
            }
            Param::Attribute { name, .. } => format!("t->{name}"),
        })
        .collect();
    s.push_str(&format!(
        "extern \"C\" void {sym}_sim(void* const* bufs, const trellis_sim::Thread* t) {{\n  ns_{sym}::{sym}(\n    {args});\n}}\n",
        sym = u.symbol,
        args = args.join(",\n    "),
    ));
    s
}

thread_local! {
    /// Fiber stacks and bookkeeping of this OS thread, shared by every kernel library.
    static SCRATCH: RefCell<Vec<u128>> = const { RefCell::new(Vec::new()) };
}

/// A simulated kernel with its buffers bound (and the shape metadata they point into).
pub struct Bound<'a> {
    compiled: Compiled,
    kernel: &'static str,
    id: KernelId,
    grid: [u32; 3],
    tg: [u32; 3],
    ptrs: SendPtrs,
    /// Each output: its name, its first byte, its bytes and the zero padding after them.
    outs: Vec<Out>,
    /// What outputs start as: poison, or zeros where the launch asks (`zero_outputs`,
    /// MLX's `init_value`).
    fill: u8,
    _meta: (Vec<Vec<i32>>, Vec<Vec<i64>>, Vec<i32>),
    _buffers: std::marker::PhantomData<&'a mut SimTensor>,
}

/// An output buffer as a bound launch sees it.
struct Out {
    name: &'static str,
    ptr: *mut u8,
    /// Its elements' bytes, then `pad` bytes that must stay zero.
    len: usize,
    pad: usize,
    elem_size: usize,
}

struct SendPtrs(Vec<*mut u8>);
// SAFETY: the kernels' threadgroups write disjoint output elements; inputs are only read.
unsafe impl Send for SendPtrs {}
unsafe impl Sync for SendPtrs {}

impl MetalSimBackend {
    /// A backend using `$TRELLIS_METAL_SIM_CXX`, `$CXX` or `c++`, caching in the
    /// directory `metal-sim` of the kernel cache ([`crate::backend::cache::Root::of_env`];
    /// an error naming it when it cannot be created or another user could write it),
    /// running the schedule `$TRELLIS_METAL_SIM_SCHEDULE` names ([`Schedule::of_env`]).
    pub fn new() -> Result<Self> {
        // Its pool reads RAYON_NUM_THREADS as the cpu backend's does: checked the same way.
        crate::error::check_threads_env()?;
        let schedule = Schedule::of_env()?;
        let compiler = HostCxx::from_env(&["TRELLIS_METAL_SIM_CXX", "CXX"])?;
        let cache_dir = cache::dir("metal-sim")?;
        let include_dir = cache::subdir(
            &cache_dir,
            &format!("include-{:016x}", fnv1a(METAL_STDLIB.as_bytes())),
        )?;
        let header = include_dir.join("metal_stdlib");
        if std::fs::read_to_string(&header).ok().as_deref() != Some(METAL_STDLIB) {
            // Under a name of its own, then renamed: a compiler of another process never
            // reads it half-written.
            static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let tmp = include_dir.join(format!("metal_stdlib.{}.{n}.tmp", std::process::id()));
            std::fs::write(&tmp, METAL_STDLIB).map_err(|e| Error::file(&tmp, e))?;
            std::fs::rename(&tmp, &header).map_err(|e| Error::file(&header, e))?;
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .build()
            .map_err(|e| Error::backend("metal-sim", e))?;
        Ok(MetalSimBackend {
            compiler,
            schedule,
            cache_dir,
            include_dir,
            kernels: Mutex::new(HashMap::new()),
            pool,
        })
    }

    /// The compiler this backend runs.
    pub fn compiler(&self) -> &str {
        self.compiler.command()
    }

    /// This backend running `schedule` (its compiled kernels serve every schedule).
    pub fn with_schedule(mut self, schedule: Schedule) -> Self {
        self.schedule = schedule;
        self
    }

    /// The schedule this backend runs.
    pub fn schedule(&self) -> Schedule {
        self.schedule
    }

    fn compile_batch(&self, units: &[Unit]) -> Result<()> {
        let mut src = String::from("#include <metal_stdlib>\n");
        for u in units {
            src.push_str(&translation_unit_part(u));
        }
        let key = fnv1a(
            format!(
                "{}|{}|{}|{}|{}",
                self.compiler.identity(),
                CXX_FLAGS.join(" "),
                cache::host_target(),
                METAL_STDLIB,
                src
            )
            .as_bytes(),
        );
        let build = |src_path: &Path, out: &Path| {
            let names: Vec<&str> = units.iter().map(|u| u.symbol.as_str()).collect();
            let include = format!("-I{}", self.include_dir.display());
            let args: Vec<&std::ffi::OsStr> = CXX_FLAGS
                .iter()
                .map(|f| f.as_ref())
                .chain([
                    include.as_ref(),
                    "-o".as_ref(),
                    out.as_os_str(),
                    src_path.as_os_str(),
                ])
                .collect();
            self.compiler
                .run("metal-sim", &args, &names.join(", "), src_path, 60)
                .map(drop)
        };
        let bind = |lib: Arc<Library>| {
            let sym_err =
                |s: &str, e: libloading::Error| Error::backend("metal-sim", format!("{s}: {e}"));
            // SAFETY: the shim defines these two functions with exactly these signatures.
            let (run, scratch_bytes) = unsafe {
                let run: RunFn = *lib
                    .get::<RunFn>(b"trellis_sim_run")
                    .map_err(|e| sym_err("trellis_sim_run", e))?;
                let scratch: ScratchFn = *lib
                    .get::<ScratchFn>(b"trellis_sim_scratch_bytes")
                    .map_err(|e| sym_err("trellis_sim_scratch_bytes", e))?;
                (run, scratch())
            };
            units
                .iter()
                .map(|u| {
                    let name = format!("{}_sim", u.symbol);
                    // SAFETY: every `<symbol>_sim` of this library has the `EntryFn`
                    // signature (see `translation_unit_part`).
                    let entry: EntryFn = unsafe {
                        *lib.get::<EntryFn>(name.as_bytes())
                            .map_err(|e| sym_err(&name, e))?
                    };
                    let compiled = Compiled {
                        id: u.id,
                        _lib: lib.clone(),
                        entry,
                        run,
                        scratch_bytes,
                        params: Arc::new(u.params.clone()),
                    };
                    Ok((u.id, compiled))
                })
                .collect::<Result<Vec<_>>>()
        };
        let found = cache::library(&self.cache_dir, &format!("m{key:016x}"), &src, build, bind)?;
        self.kernels().extend(found);
        Ok(())
    }

    /// The in-memory cache; a poisoned lock is taken as it is (see the CPU backend's).
    fn kernels(&self) -> MutexGuard<'_, HashMap<KernelId, Compiled>> {
        self.kernels.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn compiled(&self, launch: &Launch<'_>) -> Result<Compiled> {
        if let Some(c) = self.kernels().get(&launch.id) {
            return Ok(c.clone());
        }
        self.compile_batch(&[Unit::of(launch)?])?;
        self.kernels().get(&launch.id).cloned().ok_or_else(|| {
            Error::backend(
                "metal-sim",
                format!("{} missing after its compile", launch.id),
            )
        })
    }
}

/// What MLX refuses (at evaluation) and the Metal backend refuses at launch: more threads
/// per group than Apple GPUs run, more threadgroup memory than they have.
fn check_limits(launch: &Launch<'_>, tg: [u32; 3]) -> Result<()> {
    let threads = tg.iter().map(|&t| t as u64).product::<u64>();
    if threads > MAX_THREADS_PER_THREADGROUP {
        return Err(Error::invalid(
            format!("{} ({}) threads per threadgroup", launch.kernel, launch.id),
            threads,
            format!("Metal runs at most {MAX_THREADS_PER_THREADGROUP}"),
        ));
    }
    if launch.shared_bytes > MAX_THREADGROUP_MEMORY {
        return Err(Error::invalid(
            format!("{} ({}) threadgroup memory", launch.kernel, launch.id),
            launch.shared_bytes,
            format!("Metal allows {MAX_THREADGROUP_MEMORY} bytes per threadgroup"),
        ));
    }
    Ok(())
}

impl Backend for MetalSimBackend {
    type Tensor = SimTensor;
    type Compiled = Compiled;
    type Bound<'a> = Bound<'a>;

    fn name(&self) -> &'static str {
        "metal-sim"
    }

    fn dialect(&self) -> Dialect {
        Dialect::Metal
    }

    fn device_id(&self) -> String {
        "metal-sim".into()
    }

    fn limits(&self) -> Limits {
        Limits {
            threadgroup_bytes: MAX_THREADGROUP_MEMORY,
            threads_per_group: MAX_THREADS_PER_THREADGROUP as u32,
        }
    }

    fn compile(&self, launch: &Launch<'_>) -> Result<Compiled> {
        self.limits().check(launch, "Metal")?;
        self.compiled(launch)
    }

    fn bind<'a>(
        &self,
        compiled: &Compiled,
        launch: &Launch<'_>,
        inputs: &[&'a SimTensor],
        outputs: &'a mut [&mut SimTensor],
    ) -> Result<Bound<'a>> {
        let dispatch = MlxDispatch::of(launch.kernel, launch.grid)?;
        self.bind_dispatch(compiled, launch, dispatch, inputs, outputs)
    }

    fn run(&self, bound: &mut Bound<'_>) -> Result<()> {
        self.run_bound(bound)
    }

    fn alloc(&self, spec: &TensorSpec) -> Result<SimTensor> {
        SimTensor::zeroed(spec.elem, &spec.shape)
    }

    fn upload(&self, elem: Elem, shape: &[usize], bytes: &[u8]) -> Result<SimTensor> {
        // A kernel that reads a little past an input (a wrong index) gets poison, NaN as
        // a float, which shows in its results; one that writes a little past an output
        // is caught (`run_bound` checks that an output's zero padding stayed zero).
        let mut t = SimTensor::from_bytes(elem, shape, bytes)?;
        t.poison_padding();
        Ok(t)
    }

    fn download(&self, t: &SimTensor) -> Result<Vec<u8>> {
        t.download()
    }

    fn write(&self, t: &mut SimTensor, bytes: &[u8]) -> Result<()> {
        t.write(bytes)
    }

    fn precompile(&self, launches: &[Launch<'_>]) -> Result<()> {
        self.precompile_units(launches)
    }
}

impl MetalSimBackend {
    /// Run a launch with an explicit MLX dispatch (`grid` in threads, `thread_group`), as
    /// `MetalKernel::apply` takes them: any grid, including ones whose edge threadgroups
    /// are partial. [`Backend::launch_into`] passes the dispatch the Metal backend builds.
    pub fn launch_dispatch<'a>(
        &self,
        launch: &Launch<'_>,
        dispatch: MlxDispatch,
        inputs: &[&'a SimTensor],
        outputs: &mut [&'a mut SimTensor],
    ) -> Result<()> {
        let compiled = self.compiled(launch)?;
        let mut bound = self.bind_dispatch(&compiled, launch, dispatch, inputs, outputs)?;
        self.run_bound(&mut bound)
    }

    /// Check and bind a launch with an explicit dispatch.
    fn bind_dispatch<'a>(
        &self,
        compiled: &Compiled,
        launch: &Launch<'_>,
        dispatch: MlxDispatch,
        inputs: &[&'a SimTensor],
        outputs: &'a mut [&mut SimTensor],
    ) -> Result<Bound<'a>> {
        crate::kernel::check_launch(launch, inputs, outputs)?;
        crate::kernel::check_compiled(compiled.id, launch)?;
        let (grid, tg) = dispatch.metal_threads();
        check_limits(launch, tg)?;
        // Shapes, strides and ranks of inputs, for the `_shape`/`_strides`/`_ndim`
        // buffers a body may name (row-contiguous, as `ensure_row_contiguous` makes them).
        let shapes: Vec<Vec<i32>> = inputs
            .iter()
            .map(|t| t.shape.iter().map(|&d| d as i32).collect())
            .collect();
        let strides: Vec<Vec<i64>> = inputs
            .iter()
            .map(|t| {
                let mut s = vec![1i64; t.shape.len()];
                for d in (0..t.shape.len().saturating_sub(1)).rev() {
                    s[d] = s[d + 1] * t.shape[d + 1] as i64;
                }
                s
            })
            .collect();
        let ndims: Vec<i32> = inputs.iter().map(|t| t.shape.len() as i32).collect();
        let outs: Vec<Out> = outputs
            .iter_mut()
            .zip(&launch.outputs)
            .map(|(t, s)| {
                let len = t.byte_len();
                Out {
                    name: s.name,
                    ptr: t.words.as_mut_ptr() as *mut u8,
                    len,
                    pad: (t.words.len() * 4).saturating_sub(len),
                    elem_size: s.elem.size(),
                }
            })
            .collect();
        let mut ptrs = Vec::new();
        for p in compiled.params.iter() {
            if let Param::Buffer { what, .. } = p {
                ptrs.push(match *what {
                    BufferKind::Input { i, .. } => inputs[i].words.as_ptr() as *mut u8,
                    BufferKind::Output { i } => outs[i].ptr,
                    BufferKind::Shape { i } => shapes[i].as_ptr() as *mut u8,
                    BufferKind::Strides { i } => strides[i].as_ptr() as *mut u8,
                    BufferKind::Ndim { i } => &ndims[i] as *const i32 as *mut u8,
                });
            }
        }
        Ok(Bound {
            compiled: compiled.clone(),
            kernel: launch.kernel,
            id: launch.id,
            grid,
            tg,
            ptrs: SendPtrs(ptrs),
            outs,
            fill: if launch.zero_outputs { 0 } else { 0xFF },
            _meta: (shapes, strides, ndims),
            _buffers: std::marker::PhantomData,
        })
    }

    /// Run a bound launch: poison the outputs (MLX leaves them uninitialized, so an
    /// element nobody writes shows) or zero them (`zero_outputs`), then every threadgroup.
    /// An empty grid runs nothing and leaves the outputs as they were, as the Metal
    /// backend does.
    fn run_bound(&self, bound: &mut Bound<'_>) -> Result<()> {
        let (compiled, grid, tg, ptrs) = (&bound.compiled, bound.grid, bound.tg, &bound.ptrs);
        let (kernel, id) = (bound.kernel, bound.id);
        let groups: u64 = (0..3)
            .map(|d| grid[d].div_ceil(tg[d].max(1)) as u64)
            .product();
        if groups == 0 {
            return Ok(());
        }
        for o in &bound.outs {
            // SAFETY: an output buffer of at least `len` bytes, borrowed for the bound.
            unsafe { std::ptr::write_bytes(o.ptr, bound.fill, o.len) };
        }
        let tasks = (self.pool.current_num_threads() as u64 * 4).clamp(1, groups);
        let per = groups.div_ceil(tasks);
        let errors: Vec<String> = self.pool.install(|| {
            (0..groups.div_ceil(per))
                .into_par_iter()
                .filter_map(|t| {
                    let ptrs = &ptrs;
                    let (begin, end) = (t * per, ((t + 1) * per).min(groups));
                    SCRATCH.with(|s| {
                        let mut s = s.borrow_mut();
                        let words = compiled.scratch_bytes.div_ceil(16);
                        if s.len() < words {
                            *s = vec![0u128; words];
                        }
                        let mut err = [0u8; 512];
                        // SAFETY: `ptrs` holds every buffer of the signature, each at
                        // least as large as its spec (checked above) plus padding; the
                        // scratch is as large as the shim asks, 16-byte aligned, and used
                        // by this OS thread only.
                        let rc = unsafe {
                            (compiled.run)(
                                compiled.entry,
                                ptrs.0.as_ptr(),
                                grid.as_ptr(),
                                tg.as_ptr(),
                                begin,
                                end,
                                u32::from(self.schedule == Schedule::Reversed),
                                s.as_mut_ptr() as *mut u8,
                                err.as_mut_ptr(),
                                err.len(),
                            )
                        };
                        (rc != 0).then(|| {
                            let n = err.iter().position(|&b| b == 0).unwrap_or(err.len());
                            String::from_utf8_lossy(&err[..n]).into_owned()
                        })
                    })
                })
                .collect()
        });
        if let Some(e) = errors.into_iter().next() {
            return Err(Error::backend("metal-sim", format!("{kernel} ({id}): {e}")));
        }
        for o in &bound.outs {
            // SAFETY: the output's padding, `pad` bytes after its `len`, in the same
            // allocation, borrowed for the bound; no thread runs now.
            let after = unsafe { std::slice::from_raw_parts_mut(o.ptr.add(o.len), o.pad) };
            if let Some(at) = after.iter().position(|&b| b != 0) {
                after.fill(0);
                return Err(Error::backend(
                    "metal-sim",
                    format!(
                        "{kernel} ({id}) wrote past the end of output `{}` ({} elements): \
                         element {}",
                        o.name,
                        o.len / o.elem_size,
                        (o.len + at) / o.elem_size
                    ),
                ));
            }
        }
        Ok(())
    }

    fn precompile_units(&self, launches: &[Launch<'_>]) -> Result<()> {
        let known: std::collections::HashSet<KernelId> = self.kernels().keys().copied().collect();
        let mut seen = std::collections::HashSet::new();
        let mut todo = Vec::new();
        for l in launches {
            if !known.contains(&l.id) && seen.insert(l.id) {
                todo.push(Unit::of(l)?);
            }
        }
        let jobs = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
            .clamp(1, 8);
        let chunk = todo.len().div_ceil(jobs).clamp(1, 32);
        // A batch that does not compile leaves its kernels to be compiled one by one at
        // their launch, which then reports each one's own error.
        todo.par_chunks(chunk).for_each(|c| {
            let _ = self.compile_batch(c);
        });
        Ok(())
    }
}
