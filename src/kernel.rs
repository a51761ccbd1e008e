//! The kernel framework: what a declared kernel is, how it is rendered per dialect and
//! how a backend launches it. `#[trellis::kernel]` (from `trellis-macros`) generates the
//! [`KernelSpec`] impl and the typed `launch` wrapper from a declaration; see
//! `src/families/` for this crate's kernels and `examples/downstream` for another crate's.

pub use crate::codegen::{
    bind_body, prelude, tensor_bytes, Dialect, Elem, Grid, Rendered, TensorSpec,
};
use crate::error::{Error, Result};
use std::fmt;

/// A kernel declaration, implemented by `#[trellis::kernel]`.
///
/// # Safety
///
/// A declaration promises what the backends cannot check: for every value that
/// [`KernelSpec::validate`] accepts, the body reads only inside its declared inputs and
/// writes only inside its declared outputs on its grid, and [`KernelSpec::id`] names
/// that body alone (the backends cache compiled kernels by it). The backends check the
/// grid, the resources and each argument's type and shape; see `docs/kernels.md`, "What
/// a declaration promises". `#[trellis::kernel]` makes the promise for its template,
/// whose author keeps it; a hand-written implementation makes it itself.
pub unsafe trait KernelSpec: fmt::Debug {
    /// Base name of the kernel family.
    const NAME: &'static str;

    /// Identity of this specialization ([`KernelId`]): the kernel's name, a stable hash of
    /// its parameters (the declaration's fields) and one of its declaration, used as the
    /// compiled-kernel cache key.
    fn id(&self) -> KernelId;
    /// Symbol of the compiled entry point on CUDA: `<name>_<parameter hash>` (the CPU and
    /// MLX, which put several kernels in one namespace, use [`KernelId::unique_symbol`]).
    fn symbol(&self) -> String {
        self.id().to_string()
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
    /// Of [`Self::shared_bytes`], the bytes of the one array the CUDA body sizes at
    /// launch (`extern __shared__`; `dynamic_shared = ...` in the declaration): kernels
    /// past the 48 KB CUDA lets a body declare statically. 0: none.
    fn dynamic_shared_bytes(&self) -> usize {
        0
    }
    /// Whether the outputs must start zeroed (`zero_outputs = ...` in the declaration).
    fn zero_outputs(&self) -> bool {
        false
    }
    /// Render header and body for a dialect.
    fn render(&self, dialect: Dialect) -> Result<Rendered>;
    /// The backend-facing launch request (also what `Backend::precompile` takes), once
    /// [`KernelSpec::validate`] passes: a declaration's shapes and grid are computed only
    /// for fields in range (a division by a zero field would panic). It renders through
    /// [`KernelSpec::render`], called only when the backend's cache misses (a body of the
    /// caller's is [`Launch::from_parts`]'s, which is `unsafe`).
    fn launch_request(&self) -> Result<Launch<'_>>
    where
        Self: Sized,
    {
        self.validate()?;
        Ok(Launch(LaunchParts {
            kernel: Self::NAME,
            id: self.id(),
            grid: self.grid(),
            shared_bytes: self.shared_bytes(),
            dynamic_shared_bytes: self.dynamic_shared_bytes(),
            zero_outputs: self.zero_outputs(),
            inputs: self.inputs(),
            outputs: self.outputs(),
            render: Box::new(move |d| self.render(d)),
        }))
    }
    /// The complete source a backend of `dialect` compiles (entry point included), once
    /// [`KernelSpec::validate`] passes (the shapes are computed only for fields in range).
    fn unit(&self, dialect: Dialect) -> Result<String>
    where
        Self: Sized,
    {
        self.validate()?;
        let r = self.render(dialect)?;
        Ok(crate::codegen::unit(
            dialect,
            &self.symbol(),
            &r,
            &self.inputs(),
            &self.outputs(),
        ))
    }
}

/// A launch request as a backend sees it: everything but the typed wrapper. Its parts are
/// read through `Deref` and cannot be changed: the backends check the tensors against
/// its specs, the grid and the resources, and trust the body to index what those say.
/// So a launch comes from [`KernelSpec::launch_request`], or from
/// [`Launch::from_parts`], whose caller makes a declaration's promise itself:
///
/// ```compile_fail
/// // An output's shape edited after the checks were computed from it: refused.
/// fn shrink(launch: &mut trellis::kernel::Launch<'_>) {
///     launch.outputs[0].shape = vec![1];
/// }
/// ```
pub struct Launch<'a>(LaunchParts<'a>);

impl<'a> Launch<'a> {
    /// A launch of a body written by hand (tests, probes).
    ///
    /// # Safety
    ///
    /// What a [`KernelSpec`] promises: the body `render` returns reads only inside
    /// `inputs` and writes only inside `outputs` when run on `grid`, and `id` names that
    /// body alone (the backends cache compiled kernels by it; a second body under the
    /// same id would run where the first was compiled).
    pub unsafe fn from_parts(parts: LaunchParts<'a>) -> Self {
        Launch(parts)
    }
    /// The parts, to change and launch again through [`Launch::from_parts`].
    pub fn into_parts(self) -> LaunchParts<'a> {
        self.0
    }
}

impl<'a> std::ops::Deref for Launch<'a> {
    type Target = LaunchParts<'a>;
    fn deref(&self) -> &LaunchParts<'a> {
        &self.0
    }
}

/// What a [`Launch`] holds.
pub struct LaunchParts<'a> {
    /// The kernel's base name ([`KernelSpec::NAME`]).
    pub kernel: &'static str,
    /// Identity of the specialization, the compiled-kernel cache key.
    pub id: KernelId,
    /// The launch grid.
    pub grid: Grid,
    /// Threadgroup/shared memory the body declares, in bytes.
    pub shared_bytes: usize,
    /// Of those, the bytes CUDA sizes at launch ([`KernelSpec::dynamic_shared_bytes`]).
    pub dynamic_shared_bytes: usize,
    /// The outputs must start zeroed: every backend zeroes them when it binds them (the
    /// kernel leaves them as it found them, so one binding serves every run of it), and
    /// where a backend makes fresh outputs per launch (MLX), it fills them with zeros.
    pub zero_outputs: bool,
    /// Inputs, in signature order.
    pub inputs: Vec<TensorSpec>,
    /// Outputs, in signature order.
    pub outputs: Vec<TensorSpec>,
    /// Renders the source; called only when the backend's cache misses.
    pub render: Box<dyn Fn(Dialect) -> Result<Rendered> + 'a>,
}

/// A tensor living on a backend.
pub trait DeviceTensor {
    /// Element type.
    fn elem(&self) -> Elem;
    /// Shape.
    fn shape(&self) -> Vec<usize>;
}

/// Bytes on their way back from a backend ([`Backend::download_later`]): calling it
/// waits for them.
pub type Later<'a> = Box<dyn FnOnce() -> Result<Vec<u8>> + 'a>;

/// A place kernels run: the CPU, a CUDA device, a Metal device.
pub trait Backend {
    /// Its tensors.
    type Tensor: DeviceTensor;
    /// A compiled kernel, cheap to clone.
    type Compiled: Clone;
    /// A compiled kernel with checked arguments, ready to enqueue any number of times.
    type Bound<'a>;
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
    /// How [`Backend::time_ms`] measures: `device events` or `wall clock` (recorded in
    /// tuning tables).
    fn timer(&self) -> &'static str {
        "wall clock"
    }
    /// Allocate a zeroed tensor.
    fn alloc(&self, spec: &TensorSpec) -> Result<Self::Tensor>;
    /// Copy host bytes (little-endian elements) to a new tensor.
    fn upload(&self, elem: Elem, shape: &[usize], bytes: &[u8]) -> Result<Self::Tensor>;
    /// Copy a tensor's bytes back to the host.
    fn download(&self, t: &Self::Tensor) -> Result<Vec<u8>>;
    /// Start copying a tensor's bytes back to the host after the work queued so far, and
    /// return what waits for them: work queued after this call does not delay it (a
    /// small read-back beside a kernel still to run; `t` stays borrowed until the bytes
    /// are taken, so a backend may copy on a stream of its own). The default reads them
    /// now ([`Backend::download`]); CUDA copies a tensor of up to 1 MB into its
    /// page-locked staging on a stream of its own (so the kernels queued after it do
    /// not wait for the copy) and waits on an event (a larger one it reads now). CUDA
    /// holds that staging until the bytes are taken or the returned value is dropped;
    /// a download meanwhile (on any thread) copies through pageable memory instead of
    /// waiting for it. Launches and writes of other tensors may go between.
    fn download_later<'a>(&'a self, t: &'a Self::Tensor) -> Result<Later<'a>> {
        let bytes = self.download(t)?;
        Ok(Box::new(move || Ok(bytes)))
    }
    /// Copy bytes `range` of a tensor back to the host (a few flags at the end of a
    /// kernel's scratch, say). The default reads the whole tensor and keeps the range
    /// (Metal's and the CPU's: a split kernel's `ws` holds about 160 KB of parts at
    /// 5120 x 17408 beside its few flag words); CUDA copies the range alone. A range past the tensor's bytes is an error naming it.
    fn download_range(&self, t: &Self::Tensor, range: std::ops::Range<usize>) -> Result<Vec<u8>> {
        check_range(t, &range)?;
        Ok(self.download(t)?[range].to_vec())
    }
    /// Copy host bytes into `t`, a tensor made before, which keeps its element type and
    /// shape (`bytes` must be exactly its size; queued work that reads or writes `t`
    /// comes first). The default puts a new tensor in its place ([`Backend::upload`]:
    /// MLX's arrays are values); the CPU's and CUDA's copy into its memory.
    fn write(&self, t: &mut Self::Tensor, bytes: &[u8]) -> Result<()> {
        let (elem, shape) = (t.elem(), t.shape());
        check_write(elem, &shape, bytes)?;
        *t = self.upload(elem, &shape, bytes)?;
        Ok(())
    }
    /// Resource limits a specialization must fit on this device.
    fn limits(&self) -> Limits;
    /// Compile a kernel, or fetch it from the cache (keyed by [`KernelId`]).
    fn compile(&self, launch: &Launch<'_>) -> Result<Self::Compiled>;
    /// Check arguments against the launch's specs and bind them to a compiled kernel:
    /// everything a launch needs is prepared here, once.
    ///
    /// The bound kernel holds the outputs' slice borrowed for its whole life, so nothing
    /// reads or moves an output while a launch may write it; the borrow ends with the
    /// bound kernel:
    ///
    /// ```compile_fail
    /// use trellis::backend::cpu::CpuBackend;
    /// use trellis::kernel::{Backend, KernelSpec};
    /// # fn f(b: &CpuBackend, k: &impl KernelSpec) -> trellis::Result<()> {
    /// let launch = k.launch_request()?;
    /// let compiled = b.compile(&launch)?;
    /// let mut out = b.alloc(&launch.outputs[0])?;
    /// let mut outs = [&mut out];
    /// let mut bound = b.bind(&compiled, &launch, &[], &mut outs)?;
    /// let _ = b.download(outs[0]); // error: `outs` is borrowed by `bound`
    /// b.run(&mut bound)?;
    /// # Ok(()) }
    /// ```
    fn bind<'a>(
        &self,
        compiled: &Self::Compiled,
        launch: &Launch<'_>,
        inputs: &[&'a Self::Tensor],
        outputs: &'a mut [&mut Self::Tensor],
    ) -> Result<Self::Bound<'a>>;
    /// Enqueue a bound kernel: no allocation, hashing or checking (the hot path that
    /// timing measures).
    fn run(&self, bound: &mut Self::Bound<'_>) -> Result<()>;
    /// Compile (or fetch from cache), check and run, writing into the caller's outputs.
    fn launch_into(
        &self,
        launch: &Launch<'_>,
        inputs: &[&Self::Tensor],
        outputs: &mut [&mut Self::Tensor],
    ) -> Result<()> {
        let compiled = self.compile(launch)?;
        let mut bound = self.bind(&compiled, launch, inputs, outputs)?;
        self.run(&mut bound)
    }
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
    /// Compile many kernels ahead of use (the CPU backend batches them into one
    /// compiler call). The default compiles nothing in advance.
    fn precompile(&self, _launches: &[Launch<'_>]) -> Result<()> {
        Ok(())
    }
    /// This backend's compiler as a handle another thread may use while kernels run
    /// here (the tuner compiles the next problem's candidates while it times this one's).
    /// `None`, the default, where compiling cannot overlap this backend's work.
    fn ahead_compiler(&self) -> Option<std::sync::Arc<dyn AheadCompiler>> {
        None
    }
}

/// A backend's compiler, detached from its device: compiles launches into the cache
/// that the backend's [`Backend::compile`] and [`Backend::precompile`] read, so that
/// they find the work done. Never loads anything onto the device.
pub trait AheadCompiler: Send + Sync {
    /// Compile `launches`; a failure is left for the launch to report.
    fn compile_ahead(&self, launches: &[Launch<'_>]);
}

/// One extent of a declared tensor's shape, as `#[trellis::kernel]` writes it: any
/// unsigned integer that fits a `usize` (the macro's shapes are struct fields and their
/// arithmetic). A float, a signed integer or anything else does not compile, where a cast
/// would truncate or wrap.
pub fn dim(extent: impl Dim) -> usize {
    extent.to_usize()
}

/// An unsigned extent: see [`dim`].
#[diagnostic::on_unimplemented(
    message = "a kernel's extent or byte count must be an unsigned integer, not `{Self}`",
    label = "a `usize`, `u64`, `u32`, `u16` or `u8`: a signed or float one would wrap or truncate"
)]
pub trait Dim {
    /// The extent as a `usize`.
    fn to_usize(self) -> usize;
}

macro_rules! dims {
    ($($t:ty),*) => {$(
        impl Dim for $t {
            fn to_usize(self) -> usize {
                // Past usize (a 32-bit target): the largest, which no tensor has, so the
                // launch's shape check names it.
                usize::try_from(self).unwrap_or(usize::MAX)
            }
        }
    )*};
}
dims!(usize, u64, u32, u16, u8);

/// An error naming the range where bytes `range` are not within tensor `t`'s.
pub fn check_range<T: DeviceTensor>(t: &T, range: &std::ops::Range<usize>) -> Result<()> {
    let len = t.shape().iter().product::<usize>() * t.elem().size();
    if range.start > range.end || range.end > len {
        return Err(Error::invalid(
            "download range",
            format!("{range:?}"),
            format!(
                "is not within the tensor's {len} bytes (shape {:?})",
                t.shape()
            ),
        ));
    }
    Ok(())
}

/// Check that `bytes` are exactly what a tensor of `elem` and `shape` holds, for
/// [`Backend::write`]; the number of bytes.
pub fn check_write(elem: Elem, shape: &[usize], bytes: &[u8]) -> Result<usize> {
    let holds = tensor_bytes(elem, shape)?;
    if bytes.len() != holds {
        return Err(Error::invalid(
            "write bytes",
            bytes.len(),
            format!("{elem} tensor of shape {shape:?} holds {holds}"),
        ));
    }
    Ok(holds)
}

/// Check tensors against specs before a launch (used by generated wrappers).
pub fn check_args<T: DeviceTensor>(
    kernel: &str,
    specs: &[TensorSpec],
    tensors: &[&T],
) -> Result<()> {
    if specs.len() != tensors.len() {
        return Err(Error::invalid(
            format!("{kernel} tensors"),
            tensors.len(),
            format!("the kernel declares {}", specs.len()),
        ));
    }
    for (spec, t) in specs.iter().zip(tensors) {
        spec.check(kernel, t.elem(), &t.shape())?;
    }
    Ok(())
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

/// A variant's register cap per thread (`max_registers`, CUDA's `__maxnreg__`): 0 for
/// the compiler's choice, else a multiple of 8 in 32..=248, the steps in which the
/// hardware allocates them.
pub fn check_max_registers(n: u32) -> Result<()> {
    if n == 0 || (n.is_multiple_of(8) && (32..=248).contains(&n)) {
        return Ok(());
    }
    Err(Error::invalid(
        "max_registers",
        n,
        "must be 0 (the compiler's choice) or a multiple of 8 in 32..=248",
    ))
}

/// That `compiled`, a backend's compiled kernel of id `compiled`, is the kernel of
/// `launch`: binding one kernel's entry to another's buffers would run it out of bounds.
pub fn check_compiled(compiled: KernelId, launch: &Launch<'_>) -> Result<()> {
    if compiled == launch.id {
        return Ok(());
    }
    Err(Error::invalid(
        format!("{} compiled kernel", launch.kernel),
        compiled,
        format!("is not the kernel of this launch ({})", launch.id),
    ))
}

/// Identity of a kernel specialization: its name and a stable hash of its parameters.
/// Typed (built from the declaration's `Hash`, not from a string), `Copy`, and cheap to
/// compare, so caches look kernels up without allocating.
///
/// `params` (the symbol, [`fmt::Display`]) is the hash the tables were measured under,
/// which leaves defaulted fields out without naming the ones set
/// (`simt::hash_debug_skipping_default`), so code-word twins such as `prefetch_words`
/// alone and `stream_words` alone share it. `detail`, a hash of the declaring type's
/// path, its crate's version and the `Debug` form (which names every field it prints),
/// tells them apart, and two declarations of one name and fields in different modules or
/// crates (each renders its own template): caches key on the whole id, and the
/// dialects that put several kernels in one namespace (the CPU's shared library, MLX's
/// kernel names) name them by [`KernelId::unique_symbol`]. CUDA loads each kernel in a
/// module of its own, so its units keep the symbol the tables' hashes cover.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KernelId {
    /// The kernel's base name.
    pub name: &'static str,
    /// FNV-1a hash of the declaration's `Hash`: the symbol's hash and the tables' key.
    pub params: u64,
    /// FNV-1a hash of the declaring type's path, its crate's version and the
    /// declaration's `Debug` form, telling `params` twins apart.
    pub detail: u64,
}

/// What a kernel declaration's struct must be: its fields are the kernel's identity
/// ([`KernelId::of`] hashes them), so `Hash` and `Debug`. Implemented for every such
/// type; named so that `#[trellis::kernel]` on a struct without them says so.
#[diagnostic::on_unimplemented(
    message = "`#[trellis::kernel]` needs `{Self}` to implement `Hash` and `Debug`",
    label = "its fields are the kernel's identity: add `#[derive(Debug, Hash)]`"
)]
pub trait KernelIdentity: std::hash::Hash + fmt::Debug {}

impl<T: std::hash::Hash + fmt::Debug + ?Sized> KernelIdentity for T {}

impl KernelId {
    /// The id of `spec`, a specialization of kernel `name` (a hand-written
    /// [`KernelSpec`]; `#[trellis::kernel]` calls [`KernelId::declared`]).
    pub fn of<T: KernelIdentity + ?Sized>(name: &'static str, spec: &T) -> Self {
        Self::declared(name, "", spec)
    }
    /// The id of `spec`, a specialization of kernel `name` declared in a crate of
    /// `version`. Two declarations that share a name and fields render their own
    /// templates, so `detail` hashes the type's path (`std::any::type_name`, which names
    /// its crate and module) and the version (two versions of one crate share paths):
    /// otherwise the caches, keyed by id, would run one declaration's code over the
    /// other's buffers.
    pub fn declared<T: KernelIdentity + ?Sized>(
        name: &'static str,
        version: &str,
        spec: &T,
    ) -> Self {
        let mut h = Fnv1a::default();
        spec.hash(&mut h);
        KernelId {
            name,
            params: std::hash::Hasher::finish(&h),
            detail: {
                // Formatted straight into the hasher: an id costs no allocation.
                let mut d = Fnv1a::default();
                let _ = fmt::Write::write_fmt(
                    &mut d,
                    format_args!("{}@{version}\n{spec:?}", std::any::type_name::<T>()),
                );
                std::hash::Hasher::finish(&d)
            },
        }
    }
    /// A symbol no other specialization shares: `<name>_<params>_<detail>`.
    pub fn unique_symbol(&self) -> String {
        format!("{self}_{:016x}", self.detail)
    }
}

impl fmt::Display for KernelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}_{:016x}", self.name, self.params)
    }
}

/// FNV-1a as a [`std::hash::Hasher`]: deterministic across runs and processes (std's
/// default hasher is randomly keyed).
#[derive(Clone, Copy, Debug)]
pub struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Self {
        Fnv1a(0xcbf29ce484222325)
    }
}

impl fmt::Write for Fnv1a {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        std::hash::Hasher::write(self, s.as_bytes());
        Ok(())
    }
}

impl std::hash::Hasher for Fnv1a {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x100000001b3);
        }
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// What a device allows one threadgroup: the selector's `fit` and every launch check
/// a specialization against these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Threadgroup (shared) memory bytes.
    pub threadgroup_bytes: usize,
    /// Threads per threadgroup.
    pub threads_per_group: u32,
}

impl Limits {
    /// CUDA's static shared-memory limit (48 KB) and 1024 threads: what every
    /// specialization may declare without opting in ([`KernelSpec::dynamic_shared_bytes`]).
    pub const CUDA_STATIC: Limits = Limits {
        threadgroup_bytes: 48 * 1024,
        threads_per_group: 1024,
    };
    /// The most a CUDA kernel gets by opting in (sm_90: 227 KB), the largest any dialect
    /// allows: a variant that opts in is checked against it, and each device's own limit
    /// (its `Backend::limits`) drops it where it does not fit. The CPU backend enforces
    /// it, so that what it runs runs on some GPU.
    pub const CUDA_OPT_IN: Limits = Limits {
        threadgroup_bytes: 227 * 1024,
        threads_per_group: 1024,
    };
    /// Metal's 32 KB of threadgroup memory and 1024 threads (MLX and the simulator).
    pub const METAL: Limits = Limits {
        threadgroup_bytes: crate::codegen::metal::MAX_THREADGROUP_MEMORY,
        threads_per_group: 1024,
    };

    /// Check a launch's grid ([`Grid::check`]) and resources against these limits.
    pub fn check(&self, launch: &Launch<'_>, device: &str) -> Result<()> {
        launch.grid.check(launch.kernel)?;
        if launch.dynamic_shared_bytes > launch.shared_bytes {
            return Err(Error::invalid(
                format!("{} dynamic threadgroup memory", launch.kernel),
                launch.dynamic_shared_bytes,
                format!(
                    "is part of the {} bytes the kernel declares in all",
                    launch.shared_bytes
                ),
            ));
        }
        self.check_resources(
            launch.kernel,
            launch.shared_bytes,
            launch.grid.threads,
            device,
        )
    }

    /// Check `shared` bytes of threadgroup memory and `threads` per threadgroup, which
    /// `what` (a kernel or variant) needs, against these limits of `device`.
    pub fn check_resources(
        &self,
        what: &str,
        shared: usize,
        threads: u32,
        device: &str,
    ) -> Result<()> {
        if shared > self.threadgroup_bytes {
            return Err(Error::invalid(
                format!("{what} threadgroup memory"),
                shared,
                format!(
                    "{device} allows {} bytes per threadgroup",
                    self.threadgroup_bytes
                ),
            ));
        }
        if threads > self.threads_per_group {
            return Err(Error::invalid(
                format!("{what} threads per threadgroup"),
                threads,
                format!("{device} allows {}", self.threads_per_group),
            ));
        }
        Ok(())
    }
}

/// FNV-1a, a stable 64-bit hash for symbols and cache keys (std's hasher is not stable
/// across releases, and these names land on disk).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h = Fnv1a::default();
    std::hash::Hasher::write(&mut h, bytes);
    std::hash::Hasher::finish(&h)
}
