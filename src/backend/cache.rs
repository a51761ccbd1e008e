//! The on-disk kernel cache of the backends that build shared libraries (`cpu`,
//! `metal-sim`) and of CUBINs (`cuda`, [`read_blob`] / [`write_blob`]): where it lives,
//! and how a file gets into it and out of it.
//!
//! **Where.** `$TRELLIS_CACHE_DIR` when set (and not empty); else the user's cache
//! directory, `$XDG_CACHE_HOME/trellis` (an absolute `XDG_CACHE_HOME`) or
//! `~/.cache/trellis` (`~/Library/Caches/trellis` on macOS); where that cannot be created
//! (no `HOME`, a read-only home), `<temp>/trellis-kernel-cache-<uid>`. Each backend keeps
//! its files in a subdirectory (`cpu`, `metal-sim`, `cuda`).
//!
//! **Whose.** A library in the cache is code this process runs, so the cache root and the
//! backend's directory must be owned by this user (or root) and not writable by group or
//! others ([`dir`] refuses them otherwise, naming the directory and where it came from;
//! every backend opens its directory through it);
//! the directories trellis creates are `0700`. A cached library that another user could
//! have written (owned by someone else, group- or world-writable) is not loaded: it is
//! built again and replaced.
//!
//! **Concurrency and damage.** Every file is written under a name of its own (process id
//! and a counter) and renamed into place once complete, so processes and threads sharing
//! the cache never see a half-written file and never compile each other's half-written
//! source; two of them building the same library both build it, and the last rename wins
//! (the same bytes). Beside each library `<stem>.so` lies `<stem>.so.sha256`, its SHA-256
//! (`sha256sum -c` reads it), written before the library is renamed into place: a cached
//! library whose bytes do not match it (truncated by a full disk or a crash, edited), that
//! does not load, or that lacks a symbol the backend binds, is built again once, loaded
//! from the new build's own name, and replaces the damaged one. `dlopen` of a truncated
//! library can end the process (`SIGBUS` on the missing pages), hence the digest check
//! before it.

use crate::error::{Error, Result};
use libloading::Library;
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The variable that names the cache root.
pub const ENV: &str = "TRELLIS_CACHE_DIR";

/// A cache root and where it came from (for error messages).
#[derive(Clone, Debug)]
pub struct Root {
    /// The directory.
    pub path: PathBuf,
    /// `true`: `$TRELLIS_CACHE_DIR`; `false`: the default.
    from_env: bool,
}

impl Root {
    /// The cache root of this process (see the module docs). Creates the default user
    /// cache directory to know whether it can be used; `$TRELLIS_CACHE_DIR` is taken as
    /// it is (and checked by [`dir`]).
    pub fn of_env() -> Root {
        if let Some(p) = std::env::var_os(ENV).filter(|p| !p.is_empty()) {
            return Root {
                path: PathBuf::from(p),
                from_env: true,
            };
        }
        let path = user_cache_dir()
            .map(|d| d.join("trellis"))
            .filter(|p| create_private(p).is_ok())
            .unwrap_or_else(temp_root);
        Root {
            path,
            from_env: false,
        }
    }

    /// A root given explicitly (the tests), reported as if it came from
    /// `$TRELLIS_CACHE_DIR` when `from_env`.
    pub fn new(path: impl Into<PathBuf>, from_env: bool) -> Root {
        Root {
            path: path.into(),
            from_env,
        }
    }

    /// What an error about this root says of where it came from.
    fn origin(&self) -> String {
        if self.from_env {
            format!("the kernel cache, set by {ENV}")
        } else {
            format!("the default kernel cache; set {ENV} to use another directory")
        }
    }
}

/// `$XDG_CACHE_HOME` (when absolute, as the XDG spec asks) or the platform's per-user
/// cache directory under `$HOME`.
fn user_cache_dir() -> Option<PathBuf> {
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from) {
        if x.is_absolute() {
            return Some(x);
        }
    }
    // Absolute, as XDG's: a relative one would put the cache under the working directory.
    let home = Some(PathBuf::from(std::env::var_os("HOME")?)).filter(|h| h.is_absolute())?;
    if cfg!(target_os = "macos") {
        Some(home.join("Library").join("Caches"))
    } else {
        Some(home.join(".cache"))
    }
}

/// The fallback root: per user in the system temp directory. Another user can create
/// this name first; [`dir`] then refuses it (not ours), it is never used.
fn temp_root() -> PathBuf {
    temp_dir().join(format!("trellis-kernel-cache-{}", uid()))
}

/// The system temp directory: `$TMPDIR` where it is absolute and exists, else `/tmp`
/// (a relative or empty one would put kernels under the working directory, and one that
/// does not exist would be created).
fn temp_dir() -> PathBuf {
    let t = std::env::temp_dir();
    if t.is_absolute() && t.is_dir() {
        t
    } else {
        PathBuf::from("/tmp")
    }
}

#[cfg(unix)]
fn uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

#[cfg(not(unix))]
fn uid() -> u32 {
    0
}

/// Create `path` and its missing parents, `0700` (the umask may narrow it further).
fn create_private(path: &Path) -> std::io::Result<()> {
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
    b.create(path)
}

/// The backend directory `<root>/<sub>` of this process's cache root ([`Root::of_env`]),
/// created and checked (see [`dir_in`]).
pub fn dir(sub: &str) -> Result<PathBuf> {
    dir_in(&Root::of_env(), sub)
}

/// `<root>/<sub>`, created (`0700`) where missing; an error naming the directory and
/// where the root came from when it cannot be created or is not private: the root and
/// the subdirectory must be directories owned by this user or root, not writable by
/// group or others.
pub fn dir_in(root: &Root, sub: &str) -> Result<PathBuf> {
    let d = root.path.join(sub);
    create_private(&d).map_err(|e| {
        let why = diagnose(&d).unwrap_or_else(|| e.to_string());
        Error::file(
            &d,
            format!("cannot create the directory ({}): {why}", root.origin()),
        )
    })?;
    // Absolute, so a later change of the working directory cannot point the backend at
    // a directory other than the one checked here.
    let d = d.canonicalize().map_err(|e| {
        Error::file(
            &d,
            format!("cannot resolve the directory ({}): {e}", root.origin()),
        )
    })?;
    for p in [&root.path, &d] {
        check_private(p)
            .map_err(|why| Error::file(p, format!("not used ({}): {why}", root.origin())))?;
    }
    sweep(&d, "");
    Ok(d)
}

/// Remove the build directories (`<prefix>*.tmp`) a killed process left in `dir` a day
/// or more ago (a build takes seconds; a younger one may be another process's, in
/// flight).
fn sweep(dir: &Path, prefix: &str) {
    const STALE: std::time::Duration = std::time::Duration::from_secs(24 * 3600);
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        let stale = name.starts_with(prefix)
            && name.ends_with(".tmp")
            && e.metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().is_ok_and(|age| age >= STALE));
        if stale {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// A directory made inside a checked cache directory (`metal-sim`'s include directory),
/// created and checked as [`dir_in`] checks its directories.
pub fn subdir(parent: &Path, name: &str) -> Result<PathBuf> {
    let d = parent.join(name);
    create_private(&d).map_err(|e| Error::file(&d, format!("cannot create the directory: {e}")))?;
    check_private(&d).map_err(|why| Error::file(&d, format!("not used: {why}")))?;
    Ok(d)
}

/// Why creating `path` failed, where the OS error says it poorly: the first existing
/// component that is not a directory (`File exists` for a dangling symlink, `Not a
/// directory` for a file).
fn diagnose(path: &Path) -> Option<String> {
    let mut ancestors: Vec<&Path> = path.ancestors().collect();
    ancestors.reverse();
    for a in ancestors {
        if a.as_os_str().is_empty() {
            continue;
        }
        match std::fs::symlink_metadata(a) {
            Ok(m) if m.file_type().is_symlink() && std::fs::metadata(a).is_err() => {
                let to = std::fs::read_link(a).map(|t| t.display().to_string());
                return Some(format!(
                    "{} is a symlink to {}, which does not exist",
                    a.display(),
                    to.unwrap_or_else(|_| "?".into())
                ));
            }
            Ok(_) => match std::fs::metadata(a) {
                Ok(m) if !m.is_dir() => {
                    return Some(format!("{} exists and is not a directory", a.display()))
                }
                _ => {}
            },
            Err(_) => return None,
        }
    }
    None
}

/// Whether a directory may hold libraries this process loads: a directory (after
/// symlinks), owned by this user or root, not writable by group or others.
fn check_private(path: &Path) -> std::result::Result<(), String> {
    let m = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if !m.is_dir() {
        return Err("not a directory".into());
    }
    trusted(&m)
}

/// Whether a file or directory's owner and mode let only this user (or root) write it.
#[cfg(unix)]
fn trusted(m: &std::fs::Metadata) -> std::result::Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let me = uid();
    if m.uid() != me && m.uid() != 0 {
        return Err(format!(
            "owned by uid {}, not this user (uid {me}): another user could plant the \
             libraries loaded from it",
            m.uid()
        ));
    }
    if m.mode() & 0o022 != 0 {
        return Err(format!(
            "writable by group or others (mode {:o}): another user could plant the \
             libraries loaded from it (`chmod go-w` it, or use another directory)",
            m.mode() & 0o7777
        ));
    }
    Ok(())
}

#[cfg(not(unix))]
fn trusted(_: &std::fs::Metadata) -> std::result::Result<(), String> {
    Ok(())
}

/// A build directory no other process or thread uses, created `0700` (so a build
/// happens under the final file names and two builds of one source give the same bytes:
/// the compiler writes the source's name into the library); removed when dropped unless
/// kept ([`WorkDir::keep`]).
struct WorkDir(Option<PathBuf>);

/// The number of this process's next build directory.
static NEXT_WORK: AtomicU64 = AtomicU64::new(0);

impl WorkDir {
    /// `<stem>.<pid>-<n>.tmp` in the cache directory `dir`, `n` the first number free
    /// (a killed process with this pid may have left one); where `dir` cannot be written
    /// (a read-only cache, which still serves what it holds), the same name prefixed
    /// `trellis-` in the system temp directory.
    fn new(dir: &Path, stem: &str) -> Result<WorkDir> {
        Self::in_first(&[(dir.to_path_buf(), ""), (temp_dir(), "trellis-")], stem)
    }

    /// The same, in the system temp directory only (the cache's disk is full).
    fn in_temp(stem: &str) -> Result<WorkDir> {
        Self::in_first(&[(temp_dir(), "trellis-")], stem)
    }

    /// In the first of `bases` (directory, name prefix) where one can be created. The
    /// first time a process builds in the temp directory, it sweeps what killed builds
    /// left there (the cache directory's are swept when it is opened).
    fn in_first(bases: &[(PathBuf, &str)], stem: &str) -> Result<WorkDir> {
        static SWEPT: std::sync::Once = std::sync::Once::new();
        let mut b = std::fs::DirBuilder::new();
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
        let mut failed = None;
        for (base, prefix) in bases {
            if !prefix.is_empty() {
                SWEPT.call_once(|| sweep(base, prefix));
            }
            for _ in 0..1000 {
                let n = NEXT_WORK.fetch_add(1, Ordering::Relaxed);
                let d = base.join(format!("{prefix}{stem}.{}-{n}.tmp", std::process::id()));
                match b.create(&d) {
                    Ok(()) => return Ok(WorkDir(Some(d))),
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                    Err(e) => {
                        failed = Some((d, e));
                        break;
                    }
                }
            }
        }
        let (d, e) = failed.expect("1000 names taken in both directories");
        Err(Error::file(
            &d,
            format!("cannot create a build directory of the kernel cache: {e}"),
        ))
    }

    fn path(&self) -> &Path {
        self.0.as_deref().expect("a work directory until dropped")
    }

    /// Leave the directory in place (a log names a file in it).
    fn keep(mut self) {
        self.0 = None;
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if let Some(d) = &self.0 {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// Write `bytes` to a fresh file of its own name (which must not exist).
fn write_new(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o644);
    o.open(path)
        .and_then(|mut f| f.write_all(bytes))
        .map_err(|e| Error::file(path, format!("cannot write: {e}")))
}

/// A cached file that is data, not code (a CUBIN): its bytes when they pass `verified`
/// against the SHA-256 recorded beside it (`<name>.sha256`, as [`write_blob`] writes it);
/// `None` otherwise (missing, truncated, edited, another user's), so the caller builds it
/// again.
pub fn read_blob(path: &Path) -> Option<Vec<u8>> {
    verified(path).ok().flatten()
}

/// Publish `bytes` as `path` in a cache directory with its SHA-256 beside it, each
/// written under a name of its own (process id and a counter: threads and processes
/// share the cache) and renamed into place, the digest first. The cache only saves work,
/// so a failure to write leaves the entry missing and is not an error.
pub fn write_blob(path: &Path, bytes: &[u8]) {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let tmp = |p: &Path| {
        let mut s = p.as_os_str().to_owned();
        s.push(format!(".{}-{n}.tmp", std::process::id()));
        PathBuf::from(s)
    };
    let name = path.file_name().map(|f| f.to_string_lossy().into_owned());
    let sum = format!("{}  {}\n", hex_digest(bytes), name.unwrap_or_default());
    let sum_path = digest_path(path);
    let (sum_tmp, tmp_path) = (tmp(&sum_path), tmp(path));
    let ok = write_new(&sum_tmp, sum.as_bytes()).is_ok()
        && std::fs::rename(&sum_tmp, &sum_path).is_ok()
        && write_new(&tmp_path, bytes).is_ok()
        && std::fs::rename(&tmp_path, path).is_ok();
    if !ok {
        let _ = std::fs::remove_file(&sum_tmp);
        let _ = std::fs::remove_file(&tmp_path);
    }
}

/// SHA-256 of `bytes`, in hex.
fn hex_digest(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The host's CPU as `-march=native` sees it, for the cache keys of the backends that
/// compile with it: a library built for one CPU can fault with an illegal instruction on
/// another that shares the cache (a home directory on a network file system). The CPU's
/// model and feature flags as Linux reports them (`/proc/cpuinfo`), hashed, after the
/// architecture; elsewhere the architecture alone.
pub fn host_target() -> &'static str {
    static TARGET: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TARGET.get_or_init(|| {
        const KEYS: [&str; 5] = [
            "model name",
            "flags",
            "Features",
            "CPU implementer",
            "CPU part",
        ];
        let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let first: Vec<&str> = info
            .lines()
            .take_while(|l| !l.trim().is_empty())
            .filter(|l| KEYS.iter().any(|k| l.starts_with(k)))
            .collect();
        format!(
            "{}-{:016x}",
            std::env::consts::ARCH,
            crate::kernel::fnv1a(first.join("\n").as_bytes())
        )
    })
}

/// The `.sha256` file beside a library.
fn digest_path(lib: &Path) -> PathBuf {
    let mut s = lib.as_os_str().to_owned();
    s.push(".sha256");
    PathBuf::from(s)
}

/// The bytes of the cache file `path`: `Ok(None)` when there is none; `Err` (why) when
/// it is there but is no regular file, is not ours (`trusted`), or its bytes do not match
/// the SHA-256 recorded beside it (truncated or edited).
fn verified(path: &Path) -> std::result::Result<Option<Vec<u8>>, String> {
    // The type first: opening a FIFO planted at the name would wait for a writer.
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
        Ok(m) if !m.is_file() => return Err("not a regular file".into()),
        Ok(_) => {}
    }
    let mut f = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let meta = f.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    trusted(&meta)?;
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    let digest = digest_path(path);
    let recorded = match std::fs::metadata(&digest) {
        Ok(m) if !m.is_file() => Err("not a regular file".to_string()),
        _ => std::fs::read_to_string(&digest).map_err(|e| e.to_string()),
    }
    .map_err(|e| format!("its digest {}: {e}", digest.display()))?;
    if recorded.split_whitespace().next() != Some(hex_digest(&bytes).as_str()) {
        return Err("its bytes do not match its recorded SHA-256 (truncated or edited)".into());
    }
    Ok(Some(bytes))
}

/// The cached library `lib`, loaded: `Ok(None)` when there is none; `Err` (why) when it
/// is there but damaged or not ours ([`verified`]) or does not load, so it is to be built
/// again.
fn load_cached(lib: &Path) -> std::result::Result<Option<Library>, String> {
    if verified(lib)?.is_none() {
        return Ok(None);
    }
    // SAFETY: a library of this cache whose bytes are those recorded when this crate
    // built it from its own generated source, in a directory only this user can write;
    // its initialisers are the C++ runtime's.
    unsafe { Library::new(lib) }
        .map(Some)
        .map_err(|e| e.to_string())
}

/// The library built from `src` in the cache directory `dir` as `<stem>.so`, bound by
/// `bind` (the backend's symbol lookups). A cached library is used when its bytes match
/// its recorded digest, it is trusted (owned by this user or root, not writable by
/// others), it loads and `bind` takes it; else (missing, or damaged in any of these ways,
/// which a warning names) `build(source, output)` compiles `src`, written as `<stem>.cpp`
/// in a build directory of its own (`WorkDir`), into `<stem>.so` there, which is
/// loaded and bound from there, then renamed into place after its digest (the source
/// too, as `<stem>.cpp`, for reading). A cache that cannot take the new library (read
/// only, full) costs a warning, not the kernel. A build that fails, or whose library does
/// not load or bind, is an error naming the library and the source, kept as
/// `<stem>.cpp` beside the libraries (or, where that cannot be written, in its build
/// directory, which then stays).
pub fn library<T>(
    dir: &Path,
    stem: &str,
    src: &str,
    build: impl Fn(&Path, &Path) -> Result<()>,
    bind: impl Fn(std::sync::Arc<Library>) -> Result<T>,
) -> Result<T> {
    let lib_path = dir.join(format!("{stem}.so"));
    let damaged = match load_cached(&lib_path) {
        Ok(Some(lib)) => match bind(std::sync::Arc::new(lib)) {
            Ok(t) => return Ok(t),
            Err(e) => Some(e.to_string()),
        },
        Ok(None) => None,
        Err(why) => Some(why),
    };
    if let Some(why) = damaged {
        eprintln!(
            "warning: kernel cache: {}: {why}; building it again",
            lib_path.display()
        );
    }
    // A cache whose disk (or quota) is full keeps the kernel: the build moves to the
    // system temp directory, once (publishing it may then fail: a warning, as below).
    let full = |e: &Error| {
        let e = e.to_string();
        e.contains("No space left on device") || e.contains("Disk quota exceeded")
    };
    let mut work = WorkDir::new(dir, stem)?;
    let (src_tmp, lib_tmp, built) = loop {
        let (src_tmp, lib_tmp) = (
            work.path().join(format!("{stem}.cpp")),
            work.path().join(format!("{stem}.so")),
        );
        // In the cache's directory still (a temp one, the fallback's or the move's, never is).
        let in_cache = work.path().starts_with(dir);
        let built = match write_new(&src_tmp, src.as_bytes()) {
            Ok(()) => build(&src_tmp, &lib_tmp),
            Err(e) if in_cache && full(&e) => Err(e),
            Err(e) => return Err(e),
        };
        match built {
            Err(e) if in_cache && full(&e) => {
                eprintln!(
                    "warning: kernel cache: {}: no space left; building in the temp \
                     directory instead",
                    dir.display()
                );
                work = WorkDir::in_temp(stem)?;
            }
            built => break (src_tmp, lib_tmp, built),
        }
    };
    // A failure past here keeps the source where its message says.
    let keep_source = |work: WorkDir| -> PathBuf {
        let kept = dir.join(format!("{stem}.cpp"));
        if std::fs::rename(&src_tmp, &kept).is_ok() || std::fs::copy(&src_tmp, &kept).is_ok() {
            kept
        } else {
            work.keep();
            src_tmp.clone()
        }
    };
    if let Err(e) = built {
        let kept = keep_source(work);
        return Err(match e {
            Error::Compile {
                kernel,
                backend,
                log,
            } => Error::Compile {
                kernel,
                backend,
                log: log.replace(&*src_tmp.to_string_lossy(), &kept.to_string_lossy()),
            },
            e => e,
        });
    }
    let loaded = (|| {
        let hex = std::fs::read(&lib_tmp)
            .map(|b| hex_digest(&b))
            .map_err(|e| {
                if e.kind() == std::io::ErrorKind::NotFound {
                    "the compiler reported success but wrote no library".to_string()
                } else {
                    format!("cannot read the built library: {e}")
                }
            })?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&lib_tmp, std::fs::Permissions::from_mode(0o755))
                .map_err(|e| format!("cannot set the built library's permissions: {e}"))?;
        }
        // SAFETY: the library just built from this crate's own generated source, in a
        // directory only this call uses; its initialisers are the C++ runtime's.
        let lib = unsafe { Library::new(&lib_tmp) }
            .map_err(|e| format!("the built library does not load: {e}"))?;
        let t = bind(std::sync::Arc::new(lib)).map_err(|e| e.to_string())?;
        Ok::<_, String>((hex, t))
    })();
    let (hex, t) = match loaded {
        Ok(v) => v,
        Err(why) => {
            let kept = keep_source(work);
            return Err(Error::file(
                &lib_path,
                format!("{why} (source: {})", kept.display()),
            ));
        }
    };
    // Publish: the digest first, so a reader that finds the new library finds its digest
    // (and one that finds another build's digest with it builds again, no more).
    let sum_tmp = work.path().join(format!("{stem}.so.sha256"));
    let sum_path = digest_path(&lib_path);
    let published = write_new(&sum_tmp, format!("{hex}  {stem}.so\n").as_bytes())
        .and_then(|()| {
            std::fs::rename(&sum_tmp, &sum_path)
                .map_err(|e| Error::file(&sum_path, format!("cannot write: {e}")))
        })
        .and_then(|()| {
            std::fs::rename(&lib_tmp, &lib_path)
                .map_err(|e| Error::file(&lib_path, format!("cannot write: {e}")))
        });
    match published {
        Ok(()) => {
            let _ = std::fs::rename(&src_tmp, dir.join(format!("{stem}.cpp")));
        }
        Err(e) => eprintln!("warning: kernel cache: {e}; the kernel runs, uncached"),
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Build a C++ source into a shared library with the host compiler.
    fn cxx(src: &Path, out: &Path) -> Result<()> {
        let o = std::process::Command::new("c++")
            .args(["-shared", "-fPIC", "-O0", "-o"])
            .arg(out)
            .arg(src)
            .output()
            .map_err(|e| Error::backend("test", e))?;
        if o.status.success() {
            Ok(())
        } else {
            Err(Error::Compile {
                kernel: "test".into(),
                backend: "test".into(),
                log: String::from_utf8_lossy(&o.stderr).into_owned(),
            })
        }
    }

    const SRC: &str = "extern \"C\" int answer() { return 42; }\n";

    /// `answer()` of the library, the `bind` of these tests.
    fn answer(lib: Arc<Library>) -> Result<i32> {
        // SAFETY: `answer` is `int(void)` in every source of these tests.
        let f = unsafe { lib.get::<unsafe extern "C" fn() -> i32>(b"answer") }
            .map_err(|e| Error::backend("test", e))?;
        // SAFETY: as above.
        Ok(unsafe { f() })
    }

    fn get(dir: &Path, builds: &AtomicU64) -> Result<i32> {
        library(
            dir,
            "t",
            SRC,
            |s, o| {
                builds.fetch_add(1, Ordering::Relaxed);
                cxx(s, o)
            },
            answer,
        )
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_library_is_built_once_then_loaded_from_the_cache() {
        let tmp = tempfile::tempdir().unwrap();
        let builds = AtomicU64::new(0);
        assert_eq!(get(tmp.path(), &builds).unwrap(), 42);
        assert_eq!(get(tmp.path(), &builds).unwrap(), 42);
        assert_eq!(builds.load(Ordering::Relaxed), 1);
        assert_eq!(names(tmp.path()), ["t.cpp", "t.so", "t.so.sha256"]);
        let hex = hex_digest(&std::fs::read(tmp.path().join("t.so")).unwrap());
        let recorded = std::fs::read_to_string(tmp.path().join("t.so.sha256")).unwrap();
        assert_eq!(recorded, format!("{hex}  t.so\n"));
    }

    #[test]
    fn a_damaged_cached_library_is_built_again() {
        let tmp = tempfile::tempdir().unwrap();
        let lib = tmp.path().join("t.so");
        let builds = AtomicU64::new(0);
        get(tmp.path(), &builds).unwrap();
        let good = std::fs::read(&lib).unwrap();
        let damage = [
            "truncated", // loading it unchecked ends the process with SIGBUS
            "empty",
            "a byte changed",
            "no digest",
            "group-writable",
        ];
        for (i, what) in damage.into_iter().enumerate() {
            match what {
                "truncated" => std::fs::write(&lib, &good[..good.len() / 2]).unwrap(),
                "empty" => std::fs::write(&lib, b"").unwrap(),
                "a byte changed" => {
                    let mut b = good.clone();
                    b[good.len() / 3] ^= 0x55;
                    std::fs::write(&lib, b).unwrap()
                }
                "no digest" => std::fs::remove_file(digest_path(&lib)).unwrap(),
                _ => {
                    #[cfg(unix)]
                    {
                        use std::os::unix::fs::PermissionsExt;
                        let p = std::fs::Permissions::from_mode(0o777);
                        std::fs::set_permissions(&lib, p).unwrap();
                    }
                }
            }
            assert_eq!(get(tmp.path(), &builds).unwrap(), 42, "{what}");
            assert_eq!(
                builds.load(Ordering::Relaxed),
                i as u64 + 2,
                "{what}: rebuilt"
            );
            assert_eq!(std::fs::read(&lib).unwrap(), good, "{what}: replaced");
            assert_eq!(
                names(tmp.path()),
                ["t.cpp", "t.so", "t.so.sha256"],
                "{what}"
            );
        }
    }

    #[test]
    fn a_cached_library_that_does_not_bind_is_built_again() {
        // A library with a matching digest but without the symbol: built again, and the
        // new build loaded from its own name (dlopen of the old name would return the
        // old library while it is loaded).
        let tmp = tempfile::tempdir().unwrap();
        let builds = AtomicU64::new(0);
        let other = library(
            tmp.path(),
            "t",
            "extern \"C\" int other() { return 1; }",
            cxx,
            Ok,
        )
        .unwrap();
        assert_eq!(get(tmp.path(), &builds).unwrap(), 42);
        assert_eq!(builds.load(Ordering::Relaxed), 1);
        drop(other);
        assert_eq!(get(tmp.path(), &builds).unwrap(), 42);
        assert_eq!(
            builds.load(Ordering::Relaxed),
            1,
            "the rebuilt one is cached"
        );
    }

    #[test]
    fn threads_building_one_library_at_once_all_get_it() {
        let tmp = tempfile::tempdir().unwrap();
        let builds = AtomicU64::new(0);
        let n = 8;
        let barrier = std::sync::Barrier::new(n);
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..n)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        get(tmp.path(), &builds)
                    })
                })
                .collect();
            for h in handles {
                assert_eq!(h.join().unwrap().unwrap(), 42);
            }
        });
        // Each thread builds at most once (threads racing may each build before one
        // publishes; none builds again after).
        let built = builds.load(Ordering::Relaxed);
        assert!((1..=n as u64).contains(&built), "{built} builds");
        // No temporary file is left, and the published library is intact.
        assert_eq!(names(tmp.path()), ["t.cpp", "t.so", "t.so.sha256"]);
        assert!(matches!(load_cached(&tmp.path().join("t.so")), Ok(Some(_))));
    }

    /// A data file (a CUBIN) reads back only as written: a truncated or edited one, one
    /// without its digest or one others can write reads as missing (built again); threads
    /// writing one entry at once leave it whole and no temporary file behind.
    #[cfg(unix)]
    #[test]
    fn a_blob_reads_back_only_whole_and_trusted() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("k.cubin");
        assert_eq!(read_blob(&p), None);
        let bytes: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
        write_blob(&p, &bytes);
        assert_eq!(read_blob(&p).as_deref(), Some(&bytes[..]));
        std::fs::write(&p, &bytes[..100]).unwrap();
        assert_eq!(read_blob(&p), None, "truncated");
        let mut edited = bytes.clone();
        edited[7] ^= 1;
        std::fs::write(&p, &edited).unwrap();
        assert_eq!(read_blob(&p), None, "edited");
        write_blob(&p, &bytes);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert_eq!(read_blob(&p), None, "writable by others");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(read_blob(&p).as_deref(), Some(&bytes[..]));
        std::fs::remove_file(digest_path(&p)).unwrap();
        assert_eq!(read_blob(&p), None, "no digest");
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| write_blob(&p, &bytes));
            }
        });
        assert_eq!(read_blob(&p).as_deref(), Some(&bytes[..]));
        let mut names: Vec<String> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["k.cubin", "k.cubin.sha256"]);
    }

    #[test]
    fn a_build_that_fails_publishes_nothing_and_keeps_its_source() {
        let tmp = tempfile::tempdir().unwrap();
        let e = library(tmp.path(), "bad", "this is not C++", cxx, answer).unwrap_err();
        assert!(matches!(e, Error::Compile { .. }), "{e}");
        // The compiler's log names the source where it stays.
        assert_eq!(names(tmp.path()), ["bad.cpp"]);
        let kept = tmp.path().join("bad.cpp");
        assert_eq!(std::fs::read_to_string(&kept).unwrap(), "this is not C++");
        assert!(e.to_string().contains(&*kept.to_string_lossy()), "{e}");
        let work = format!("bad.{}-", std::process::id());
        assert!(!e.to_string().contains(&work), "{e}");
    }

    /// Build directories a killed process of the same pid left are skipped, not an error
    /// (a container's first process is always pid 1); those a day old are swept when the
    /// directory is opened, younger ones (a build in flight) kept.
    #[test]
    fn a_sweep_of_the_temp_directory_takes_only_old_builds_of_ours() {
        let tmp = tempfile::tempdir().unwrap();
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(25 * 3600);
        let make = |name: &str, aged: bool| {
            let d = tmp.path().join(name);
            std::fs::create_dir(&d).unwrap();
            if aged {
                std::fs::File::open(&d).unwrap().set_modified(old).unwrap();
            }
            d
        };
        let ours_old = make("trellis-k1.7-0.tmp", true);
        let ours_new = make("trellis-k2.7-1.tmp", false);
        let others = make("k3.7-2.tmp", true);
        sweep(tmp.path(), "trellis-");
        assert!(!ours_old.exists() && ours_new.is_dir() && others.is_dir());
    }

    #[test]
    fn leftover_build_directories_are_skipped_then_swept() {
        let tmp = tempfile::tempdir().unwrap();
        let next = NEXT_WORK.load(Ordering::Relaxed);
        let left: Vec<PathBuf> = (next..next + 3)
            .map(|n| tmp.path().join(format!("t.{}-{n}.tmp", std::process::id())))
            .collect();
        for d in &left {
            std::fs::create_dir(d).unwrap();
            std::fs::write(d.join("t.so"), "half written").unwrap();
        }
        let builds = AtomicU64::new(0);
        assert_eq!(get(tmp.path(), &builds).unwrap(), 42);
        assert_eq!(builds.load(Ordering::Relaxed), 1);
        assert!(left.iter().all(|d| d.is_dir()), "another's leftovers kept");
        // A day old: swept when the directory is opened; a fresh one stays.
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(25 * 3600);
        std::fs::File::open(&left[0])
            .unwrap()
            .set_modified(old)
            .unwrap();
        let root = Root::new(tmp.path(), true);
        let d = dir_in(&root, ".").unwrap();
        assert!(
            !left[0].exists() && left[1].is_dir() && left[2].is_dir(),
            "{d:?}"
        );
    }

    /// A cache that cannot take a new library costs a warning, not the kernel: the
    /// library is built and bound, the cache left as it was.
    #[test]
    fn a_cache_that_cannot_take_a_library_still_gives_the_kernel() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("t.so")).unwrap();
        let builds = AtomicU64::new(0);
        assert_eq!(get(tmp.path(), &builds).unwrap(), 42);
        assert_eq!(get(tmp.path(), &builds).unwrap(), 42);
        assert_eq!(
            builds.load(Ordering::Relaxed),
            2,
            "not cached, built each time"
        );
        assert!(tmp.path().join("t.so").is_dir());
        let work = format!("t.{}-", std::process::id());
        assert!(
            names(tmp.path()).iter().all(|n| !n.starts_with(&work)),
            "{:?}",
            names(tmp.path())
        );
    }

    /// A cache whose disk is full (the source cannot be written, or the compiler cannot
    /// write the library) still gives the kernel: the build moves to the temp directory.
    #[test]
    fn a_full_cache_still_gives_the_kernel() {
        let tmp = tempfile::tempdir().unwrap();
        let builds = AtomicU64::new(0);
        let in_cache = |o: &Path| o.starts_with(tmp.path());
        let failed = |kernel: &str, log: &str| Error::Compile {
            kernel: kernel.into(),
            backend: "test".into(),
            log: log.into(),
        };
        let got = library(
            tmp.path(),
            "t",
            SRC,
            |s, o| {
                builds.fetch_add(1, Ordering::Relaxed);
                if in_cache(o) {
                    // What the linker says on a full disk.
                    return Err(failed(
                        "t",
                        "/usr/bin/ld: final link failed: No space left on device",
                    ));
                }
                cxx(s, o)
            },
            answer,
        );
        assert_eq!(got.unwrap(), 42);
        assert_eq!(builds.load(Ordering::Relaxed), 2);
        // Another compile error is not retried.
        let e = library(
            tmp.path(),
            "u",
            SRC,
            |_, _| {
                builds.fetch_add(1, Ordering::Relaxed);
                Err(failed("u", "error: expected ';'"))
            },
            answer,
        )
        .unwrap_err();
        assert!(e.to_string().contains("expected ';'"), "{e}");
        assert_eq!(builds.load(Ordering::Relaxed), 3);
    }

    /// A FIFO planted at a cached library's name (opening it would wait for a writer for
    /// ever) or at its digest's is damage like any other: named, built again.
    #[test]
    fn a_fifo_in_the_cache_is_not_opened() {
        let tmp = tempfile::tempdir().unwrap();
        let builds = AtomicU64::new(0);
        get(tmp.path(), &builds).unwrap();
        let lib = tmp.path().join("t.so");
        for path in [lib.clone(), digest_path(&lib)] {
            std::fs::remove_file(&path).unwrap();
            let made = std::process::Command::new("mkfifo")
                .arg(&path)
                .status()
                .unwrap();
            assert!(made.success());
            let why = verified(&lib).unwrap_err();
            assert!(why.contains("not a regular file"), "{why}");
            if path != lib {
                assert!(why.contains(&*path.to_string_lossy()), "{why}");
            }
            std::fs::remove_file(&path).unwrap();
            get(tmp.path(), &builds).unwrap();
        }
        // A missing digest is named as the digest, not the library.
        std::fs::remove_file(digest_path(&lib)).unwrap();
        let why = verified(&lib).unwrap_err();
        assert!(
            why.contains("its digest") && why.contains("t.so.sha256"),
            "{why}"
        );
    }

    /// A compiler that reports success without writing the library, or writes one that
    /// does not load: an error naming the library and the source kept for reading.
    #[test]
    fn a_build_without_a_loadable_library_names_it_and_keeps_the_source() {
        let tmp = tempfile::tempdir().unwrap();
        let lib = tmp.path().join("t.so");
        let e = library(tmp.path(), "t", SRC, |_, _| Ok(()), answer).unwrap_err();
        let kept = tmp.path().join("t.cpp");
        for want in [
            &*lib.to_string_lossy(),
            "reported success but wrote no library",
            &*kept.to_string_lossy(),
        ] {
            assert!(e.to_string().contains(want), "{want}: {e}");
        }
        assert_eq!(std::fs::read_to_string(&kept).unwrap(), SRC);
        let garbage =
            |_: &Path, o: &Path| std::fs::write(o, "not a library").map_err(|e| Error::file(o, e));
        let e = library(tmp.path(), "t", SRC, garbage, answer).unwrap_err();
        assert!(e.to_string().contains("does not load"), "{e}");
        assert_eq!(names(tmp.path()), ["t.cpp"]);
    }

    /// The CPU part of the cache keys: the architecture, then a hash of what the OS says
    /// of the CPU, the same on every call.
    #[test]
    fn the_host_target_names_the_architecture() {
        let t = host_target();
        assert!(
            t.starts_with(&format!("{}-", std::env::consts::ARCH)),
            "{t}"
        );
        assert_eq!(t.len(), std::env::consts::ARCH.len() + 17, "{t}");
        assert!(std::ptr::eq(t, host_target()));
    }

    #[test]
    fn a_cache_dir_that_is_a_file_or_a_dangling_link_is_an_error_naming_it() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        let e = dir_in(&Root::new(&file, true), "cpu")
            .unwrap_err()
            .to_string();
        assert!(e.contains(&*file.to_string_lossy()), "{e}");
        assert!(
            e.contains("TRELLIS_CACHE_DIR") && e.contains("not a directory"),
            "{e}"
        );
        #[cfg(unix)]
        {
            let link = tmp.path().join("link");
            std::os::unix::fs::symlink(tmp.path().join("nowhere"), &link).unwrap();
            let e = dir_in(&Root::new(&link, true), "cpu")
                .unwrap_err()
                .to_string();
            assert!(e.contains(&*link.to_string_lossy()), "{e}");
            assert!(
                e.contains("does not exist") && e.contains("TRELLIS_CACHE_DIR"),
                "{e}"
            );
            let e = dir_in(&Root::new(&link, false), "cpu")
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("default kernel cache; set TRELLIS_CACHE_DIR"),
                "{e}"
            );
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_cache_dir_others_can_write_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        let d = dir_in(&Root::new(&root, true), "cpu").unwrap();
        assert_eq!(d, root.join("cpu"));
        for p in [&root, &d] {
            let mode = std::fs::metadata(p).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "{} is created private", p.display());
        }
        for (p, mode) in [(&d, 0o770), (&root, 0o1777)] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = dir_in(&Root::new(&root, true), "cpu")
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(&*p.to_string_lossy()), "{e}");
            assert!(e.contains("writable by group or others"), "{e}");
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o700)).unwrap();
        }
        dir_in(&Root::new(&root, true), "cpu").unwrap();
        if uid() == 0 {
            // Root can give the directory away: owned by another user, refused.
            std::os::unix::fs::chown(&d, Some(65534), None).unwrap();
            let e = dir_in(&Root::new(&root, true), "cpu")
                .unwrap_err()
                .to_string();
            assert!(e.contains("owned by uid 65534, not this user"), "{e}");
        } else {
            // A directory this user cannot create in: the error names it.
            std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o500)).unwrap();
            let e = dir_in(&Root::new(&root, true), "metal-sim")
                .unwrap_err()
                .to_string();
            std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700)).unwrap();
            assert!(
                e.contains("metal-sim") && e.contains("TRELLIS_CACHE_DIR"),
                "{e}"
            );
        }
    }
}
