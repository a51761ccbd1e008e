//! The CPU backend, the embedded default: rendered C++ built by the host compiler
//! (`$CXX`, else `c++`) into a shared library cached on disk by source hash, loaded
//! with `libloading`, and run one threadgroup per rayon task.

use super::cache;
use super::host_cxx::{self, HostCxx};
use crate::codegen::{cpu_prelude, cpu_unit_part, Dialect, Rendered};
use crate::error::{Error, Result};
use crate::kernel::{fnv1a, Backend, Elem, KernelId, Launch, Limits, TensorSpec};
use libloading::Library;
use rayon::prelude::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Entry point of a compiled CPU kernel: buffers in signature order, then the group.
type EntryFn = unsafe extern "C" fn(*const *mut u8, u32, u32);

/// Compiler flags. `-ffp-contract=off` and no fast-math keep SPEC 5's separate roundings;
/// `-march=native` makes `fmaf` one instruction instead of a libm call.
const CXX_FLAGS: &[&str] = &[
    "-std=c++17",
    "-O2",
    "-march=native",
    "-ffp-contract=off",
    "-fno-fast-math",
    "-fPIC",
    "-shared",
    "-w",
];

/// Flags added after the built-in ones (split on white space; part of the cache key): e.g.
/// `-fsanitize=address` to run the kernels under AddressSanitizer (docs/backends.md).
pub const EXTRA_FLAGS_ENV: &str = "TRELLIS_CPU_CXXFLAGS";

/// A compiled CPU kernel: its entry point in a loaded library.
#[derive(Clone)]
pub struct Compiled {
    id: KernelId,
    lib: Arc<Library>,
    entry: EntryFn,
}

/// A tensor of the CPU backend.
pub type CpuTensor = super::host::HostTensor;

/// The CPU backend.
pub struct CpuBackend {
    /// `cpu_model_id()`, read once (every selection asks for it).
    id: String,
    compiler: HostCxx,
    /// `CXX_FLAGS`, then `$TRELLIS_CPU_CXXFLAGS` split.
    flags: Vec<String>,
    cache_dir: PathBuf,
    kernels: Mutex<HashMap<KernelId, Compiled>>,
    pool: rayon::ThreadPool,
}

impl CpuBackend {
    /// A backend using `$CXX` (default `c++`) with its built-in flags and
    /// `$TRELLIS_CPU_CXXFLAGS`, and the cache directory `cpu` of the
    /// kernel cache ([`cache::Root::of_env`]; an error naming it when it cannot be created or
    /// another user could write it).
    pub fn new() -> Result<Self> {
        let compiler = HostCxx::from_env(&["CXX"])?;
        let extra = host_cxx::env_text(EXTRA_FLAGS_ENV)?.unwrap_or_default();
        let flags = CXX_FLAGS
            .iter()
            .copied()
            .chain(extra.split_whitespace())
            .map(str::to_string)
            .collect();
        let cache_dir = cache::dir("cpu")?;
        crate::error::check_threads_env()?;
        let pool = rayon::ThreadPoolBuilder::new()
            // Tables and staged x live on the task's stack (up to 48 KB + 256 KB at L = 16).
            .stack_size(16 << 20)
            .build()
            .map_err(|e| Error::backend("cpu", e))?;
        Ok(CpuBackend {
            id: Self::cpu_model_id(),
            compiler,
            flags,
            cache_dir,
            kernels: Mutex::new(HashMap::new()),
            pool,
        })
    }

    /// Host description, the CPU's device id for tuning tables (e.g. `cpu-amd-epyc-9b14`).
    pub fn cpu_model_id() -> String {
        let model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split(':').nth(1))
                    .map(|m| m.trim().to_string())
            })
            .unwrap_or_else(|| std::env::consts::ARCH.to_string());
        let model = ["(R)", "(r)", "(TM)", "(tm)"]
            .iter()
            .fold(model, |m, t| m.replace(t, ""));
        crate::backend::slug(&format!("cpu {model}"))
    }

    fn compile_batch(
        &self,
        items: &[(KernelId, Rendered, Vec<TensorSpec>, Vec<TensorSpec>)],
    ) -> Result<()> {
        let (mut src, prelude) = cpu_prelude();
        for (id, rendered, inputs, outputs) in items {
            src.push_str(&cpu_unit_part(
                &id.unique_symbol(),
                &prelude,
                rendered,
                inputs,
                outputs,
            ));
        }
        let key = fnv1a(
            format!(
                "{}|{}|{}|{}",
                self.compiler.identity(),
                self.flags.join(" "),
                cache::host_target(),
                src
            )
            .as_bytes(),
        );
        let build = |src_path: &Path, out: &Path| {
            // The symbols the source defines (twins of one `params` hash differ there).
            let names: Vec<String> = items.iter().map(|i| i.0.unique_symbol()).collect();
            let args: Vec<&std::ffi::OsStr> = self
                .flags
                .iter()
                .map(|f| f.as_ref())
                .chain(["-o".as_ref(), out.as_os_str(), src_path.as_os_str()])
                .collect();
            self.compiler
                .run("cpu", &args, &names.join(", "), src_path, usize::MAX)
                .map(drop)
        };
        let bind = |lib: Arc<Library>| {
            items
                .iter()
                .map(|(id, ..)| {
                    let symbol = id.unique_symbol();
                    // SAFETY: every symbol in this library has the `EntryFn` signature
                    // (see `codegen::cpu_unit_part`).
                    let entry: EntryFn = unsafe {
                        *lib.get::<EntryFn>(symbol.as_bytes())
                            .map_err(|e| Error::backend("cpu", format!("symbol {symbol}: {e}")))?
                    };
                    let lib = lib.clone();
                    Ok((
                        *id,
                        Compiled {
                            id: *id,
                            lib,
                            entry,
                        },
                    ))
                })
                .collect::<Result<Vec<_>>>()
        };
        let found = cache::library(&self.cache_dir, &format!("k{key:016x}"), &src, build, bind)?;
        self.kernels().extend(found);
        Ok(())
    }

    /// The in-memory cache. A thread that panicked while holding it cannot have left it
    /// half-updated (each insert is whole), so a poisoned lock is taken as it is rather
    /// than passing the panic to every other thread.
    fn kernels(&self) -> MutexGuard<'_, HashMap<KernelId, Compiled>> {
        self.kernels.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn compiled(&self, launch: &Launch<'_>) -> Result<Compiled> {
        if let Some(c) = self.kernels().get(&launch.id) {
            return Ok(c.clone());
        }
        let rendered = (launch.render)(Dialect::Cpu)?;
        self.compile_batch(&[(
            launch.id,
            rendered,
            launch.inputs.clone(),
            launch.outputs.clone(),
        )])?;
        self.kernels().get(&launch.id).cloned().ok_or_else(|| {
            Error::backend("cpu", format!("{} missing after its compile", launch.id))
        })
    }
}

/// A CPU kernel with its buffers bound: the entry (and the library holding it, loaded as
/// long as the bound kernel lives), the buffer pointers and the grid.
pub struct Bound<'a> {
    _lib: Arc<Library>,
    entry: EntryFn,
    ptrs: SendPtrs,
    groups: [u32; 3],
    _buffers: std::marker::PhantomData<&'a mut CpuTensor>,
}

struct SendPtrs(Vec<*mut u8>);
// SAFETY: kernels write disjoint output elements per group (each row belongs to one
// group and slice), or words that groups share only through atomics (the split-K
// parts and arrival counters); inputs are only read.
unsafe impl Send for SendPtrs {}
unsafe impl Sync for SendPtrs {}

impl Backend for CpuBackend {
    type Tensor = CpuTensor;
    type Compiled = Compiled;
    type Bound<'a> = Bound<'a>;

    fn name(&self) -> &'static str {
        "cpu"
    }

    fn dialect(&self) -> Dialect {
        Dialect::Cpu
    }

    fn device_id(&self) -> String {
        self.id.clone()
    }

    fn alloc(&self, spec: &TensorSpec) -> Result<CpuTensor> {
        CpuTensor::zeroed(spec.elem, &spec.shape)
    }

    fn upload(&self, elem: Elem, shape: &[usize], bytes: &[u8]) -> Result<CpuTensor> {
        CpuTensor::from_bytes(elem, shape, bytes)
    }

    fn download(&self, t: &CpuTensor) -> Result<Vec<u8>> {
        t.download()
    }

    fn write(&self, t: &mut CpuTensor, bytes: &[u8]) -> Result<()> {
        t.write(bytes)
    }

    fn limits(&self) -> Limits {
        // Threadgroup memory lives on the task's stack (16 MB, see `new`); CUDA's opt-in
        // limit keeps specializations portable (`validate` holds the rest to 48 KB).
        Limits::CUDA_OPT_IN
    }

    fn compile(&self, launch: &Launch<'_>) -> Result<Compiled> {
        self.limits().check(launch, "the cpu backend")?;
        self.compiled(launch)
    }

    fn bind<'a>(
        &self,
        compiled: &Compiled,
        launch: &Launch<'_>,
        inputs: &[&'a CpuTensor],
        outputs: &'a mut [&mut CpuTensor],
    ) -> Result<Bound<'a>> {
        // The typed wrapper checked these already; a backend never trusts a caller with
        // raw pointers, so check again.
        crate::kernel::check_launch(launch, inputs, outputs)?;
        crate::kernel::check_compiled(compiled.id, launch)?;
        if launch.zero_outputs {
            for t in outputs.iter_mut() {
                t.bytes_mut().fill(0);
            }
        }
        let mut ptrs: Vec<*mut u8> = inputs.iter().map(|t| t.words.as_ptr() as *mut u8).collect();
        ptrs.extend(outputs.iter_mut().map(|t| t.words.as_mut_ptr() as *mut u8));
        Ok(Bound {
            _lib: compiled.lib.clone(),
            entry: compiled.entry,
            ptrs: SendPtrs(ptrs),
            groups: launch.grid.groups,
            _buffers: std::marker::PhantomData,
        })
    }

    fn run(&self, bound: &mut Bound<'_>) -> Result<()> {
        let [gx, gy, gz] = bound.groups;
        if gx == 0 || gy == 0 || gz == 0 {
            return Ok(()); // an empty grid launches nothing, as on every backend
        }
        let (entry, ptrs) = (bound.entry, &bound.ptrs);
        self.pool.install(|| {
            (0..gx as u64 * gy as u64).into_par_iter().for_each(|g| {
                // SAFETY: buffers match the kernel's declared specs (checked in `bind`,
                // and borrowed for the bound's lifetime), and the kernel indexes only
                // within them for any validated specialization.
                unsafe {
                    entry(
                        ptrs.0.as_ptr(),
                        (g % gx as u64) as u32,
                        (g / gx as u64) as u32,
                    )
                }
            })
        });
        Ok(())
    }

    fn precompile(&self, launches: &[Launch<'_>]) -> Result<()> {
        let known = self
            .kernels()
            .keys()
            .copied()
            .collect::<std::collections::HashSet<_>>();
        let mut seen = std::collections::HashSet::new();
        let mut todo = Vec::new();
        for l in launches {
            if !known.contains(&l.id) && seen.insert(l.id) {
                todo.push((
                    l.id,
                    (l.render)(Dialect::Cpu)?,
                    l.inputs.clone(),
                    l.outputs.clone(),
                ));
            }
        }
        // Two compiler processes keep both cores of a small machine busy; larger batches
        // amortise the compiler's start-up.
        let jobs = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
            .clamp(1, 8);
        let chunk = todo.len().div_ceil(jobs).clamp(1, 24);
        // A batch that does not compile leaves its kernels to be compiled one by one at
        // their launch, which then reports each one's own error (as `metal_sim` does): one
        // bad kernel must not fail the others.
        todo.par_chunks(chunk).for_each(|c| {
            let _ = self.compile_batch(c);
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Activations, Code, DType, Geometry, QuantizedMatrix, ScaleDType};

    #[test]
    fn tensors_keep_the_read_slack_after_their_elements() {
        // What a kernel may load a little past a buffer's end stays in its allocation
        // (`READ_SLACK_BYTES`); a download gives the elements alone.
        let b = CpuBackend::new().unwrap();
        let spec = TensorSpec {
            name: "t",
            elem: Elem::F16,
            shape: vec![3, 5],
        };
        let bytes: Vec<u8> = (0..30).collect();
        let a = b.alloc(&spec).unwrap();
        let u = b.upload(Elem::F16, &[3, 5], &bytes).unwrap();
        for t in [&a, &u] {
            assert!(t.words.len() * 4 >= t.byte_len() + crate::backend::READ_SLACK_BYTES);
        }
        assert_eq!(b.download(&u).unwrap(), bytes);
        assert_eq!(b.download(&a).unwrap(), vec![0; 30]);
    }

    #[test]
    fn a_poisoned_kernel_cache_does_not_pass_the_panic_on() {
        let b = CpuBackend::new().unwrap();
        // A thread that panics holding the lock poisons it.
        let panicked = std::thread::scope(|s| {
            s.spawn(|| {
                let _held = b.kernels.lock().unwrap();
                panic!("a panic while holding the kernel cache (expected by this test)");
            })
            .join()
        });
        assert!(panicked.is_err() && b.kernels.is_poisoned());
        let g = Geometry::new(32, 256, 256, 2, 12, Code::OneMad).unwrap();
        let codes = (0..g.codes_shape().iter().product::<usize>())
            .map(|i| (i as u32).wrapping_mul(0x9e37_79b9))
            .collect();
        let w = QuantizedMatrix::new(g, codes, vec![0.015625; 32], ScaleDType::F16, None).unwrap();
        let x = (0..256).map(|i| (i % 17) as f32 / 8.0 - 1.0).collect();
        let x = Activations::from_f32(DType::F32, 1, 256, x).unwrap();
        let want = crate::reference::reduce(&w, &x).unwrap();
        for _ in 0..2 {
            let got = crate::ops::matvec(&b, &w, &x, crate::numerics::Tier::Exact).unwrap();
            assert!(got.bits_eq(&want));
        }
    }
}
