//! The on-disk kernel cache with other processes and threads at work, damaged, or in an
//! odd place (`trellis::backend::cache`). Each case runs this test binary again as child
//! processes (the `child` test, which does nothing unless `TRELLIS_CACHE_CHILD` is set),
//! each with its own environment, so no test changes this process's environment.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use trellis::backend::metal_sim::MetalSimBackend;
use trellis::backend::{Backend, CpuBackend};
use trellis::numerics::Tier;
use trellis::{check, ops, reference, Activations, Code, DType, Geometry, QuantizedMatrix};

/// The problem every child computes: a small `reduce`, M = 1.
fn problem() -> (QuantizedMatrix, Activations) {
    let g = Geometry::new(64, 256, 256, 2, 12, Code::OneMad).unwrap();
    (
        check::random_matrix(g, 20261204),
        check::random_activations(DType::F32, 1, g.cols, 20261205),
    )
}

fn want() -> Vec<u8> {
    let (w, x) = problem();
    reference::reduce(&w, &x).unwrap().to_bytes()
}

/// The `y` of [`problem`] from three threads with backends of their own and two sharing
/// one, checked equal; their bytes.
fn run_threads<B: Backend + Sync>(open: impl Fn() -> trellis::Result<B> + Sync) -> Vec<u8> {
    let (w, x) = problem();
    let shared = open().unwrap();
    let ys: Vec<Vec<u8>> = std::thread::scope(|s| {
        let own = (0..3).map(|_| s.spawn(|| ops::matvec(&open().unwrap(), &w, &x, Tier::Exact)));
        let own: Vec<_> = own.collect();
        let shared = (0..2).map(|_| s.spawn(|| ops::matvec(&shared, &w, &x, Tier::Exact)));
        let shared: Vec<_> = shared.collect();
        own.into_iter()
            .chain(shared)
            .map(|h| h.join().unwrap().unwrap().to_bytes())
            .collect()
    });
    assert!(ys.iter().all(|y| y == &ys[0]), "threads disagree");
    ys[0].clone()
}

/// A child's work, chosen by `TRELLIS_CACHE_CHILD`: `cpu` and `metal-sim` compute
/// [`problem`] ([`run_threads`]) and write its bytes to `TRELLIS_CACHE_OUT`; `open` opens
/// the CPU backend and writes `ok` or the error. Not a test of its own: ignored, so a
/// plain run does not count it as a pass; the tests below run it with `--ignored`.
#[test]
#[ignore = "a child process's entry point, run by the other tests of this file"]
fn child() {
    let mode =
        std::env::var("TRELLIS_CACHE_CHILD").expect("TRELLIS_CACHE_CHILD: run by the other tests");
    let out = std::env::var("TRELLIS_CACHE_OUT").unwrap();
    let bytes = match mode.as_str() {
        "cpu" => run_threads(CpuBackend::new),
        "metal-sim" => run_threads(MetalSimBackend::new),
        "open" => match CpuBackend::new() {
            Ok(_) => b"ok".to_vec(),
            Err(e) => e.to_string().into_bytes(),
        },
        other => panic!("unknown child mode {other}"),
    };
    std::fs::write(out, bytes).unwrap();
}

/// This binary as a child in `mode`, writing to `out`, its cache `cache` (`None`: the
/// variable removed), the environment changed by `env` (`None` removes).
fn spawn(mode: &str, out: &Path, cache: Option<&Path>, env: &[(&str, Option<&Path>)]) -> Child {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "child",
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads",
        "1",
    ])
    .env("TRELLIS_CACHE_CHILD", mode)
    .env("TRELLIS_CACHE_OUT", out)
    .stdout(Stdio::null());
    match cache {
        Some(p) => c.env("TRELLIS_CACHE_DIR", p),
        None => c.env_remove("TRELLIS_CACHE_DIR"),
    };
    for (k, v) in env {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    c.spawn().unwrap()
}

/// Wait for a child; what it wrote.
fn finish(mut c: Child, out: &Path) -> Vec<u8> {
    let status = c.wait().unwrap();
    assert!(status.success(), "child failed: {status}");
    std::fs::read(out).unwrap()
}

/// What `open` says with this cache and environment.
fn open_says(tmp: &Path, cache: Option<&Path>, env: &[(&str, Option<&Path>)]) -> String {
    let out = tmp.join("open.out");
    let said = finish(spawn("open", &out, cache, env), &out);
    String::from_utf8(said).unwrap()
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// `n` children at once on one fresh cache, each with five threads: every result is the
/// reference's bits, and no temporary file is left.
fn many_at_once(mode: &str, sub: &str, n: usize) {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let outs: Vec<PathBuf> = (0..n).map(|i| tmp.path().join(format!("y{i}"))).collect();
    let children: Vec<Child> = outs
        .iter()
        .map(|o| spawn(mode, o, Some(&cache), &[]))
        .collect();
    let want = want();
    for (c, o) in children.into_iter().zip(&outs) {
        assert!(finish(c, o) == want, "{mode}: not the reference's bits");
    }
    let left = entries(&cache.join(sub));
    assert!(!left.iter().any(|e| e.contains(".tmp")), "{left:?}");
    assert!(left.iter().any(|e| e.ends_with(".so.sha256")), "{left:?}");
}

#[test]
fn processes_and_threads_compiling_at_once_share_a_fresh_cpu_cache() {
    many_at_once("cpu", "cpu", 6);
}

#[test]
fn processes_and_threads_compiling_at_once_share_a_fresh_metal_sim_cache() {
    many_at_once("metal-sim", "metal-sim", 4);
}

#[test]
fn a_truncated_cached_library_is_built_again() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let out = tmp.path().join("y");
    let want = want();
    assert!(finish(spawn("cpu", &out, Some(&cache), &[]), &out) == want);
    let libs: Vec<(PathBuf, u64)> = entries(&cache.join("cpu"))
        .into_iter()
        .filter(|e| e.ends_with(".so"))
        .map(|e| {
            let p = cache.join("cpu").join(e);
            let len = std::fs::metadata(&p).unwrap().len();
            (p, len)
        })
        .collect();
    assert!(!libs.is_empty());
    for (p, len) in &libs {
        // Loading this unchecked ends the process with SIGBUS.
        std::fs::OpenOptions::new()
            .write(true)
            .open(p)
            .unwrap()
            .set_len(len / 2)
            .unwrap();
    }
    std::fs::remove_file(&out).unwrap();
    assert!(finish(spawn("cpu", &out, Some(&cache), &[]), &out) == want);
    for (p, len) in &libs {
        assert_eq!(
            std::fs::metadata(p).unwrap().len(),
            *len,
            "{} rebuilt",
            p.display()
        );
    }
}

#[test]
fn an_odd_cache_dir_is_an_error_naming_it_and_the_variable() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let said = open_says(tmp.path(), Some(&file), &[]);
    assert!(said.contains(&*file.to_string_lossy()), "{said}");
    assert!(
        said.contains("TRELLIS_CACHE_DIR") && said.contains("not a directory"),
        "{said}"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let link = tmp.path().join("dangling");
        std::os::unix::fs::symlink(tmp.path().join("nowhere"), &link).unwrap();
        let said = open_says(tmp.path(), Some(&link), &[]);
        assert!(said.contains(&*link.to_string_lossy()), "{said}");
        assert!(
            said.contains("does not exist") && said.contains("TRELLIS_CACHE_DIR"),
            "{said}"
        );
        // A directory every user can write (`/tmp` itself, say): another user could put a
        // library there before this one builds it.
        let open = tmp.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let said = open_says(tmp.path(), Some(&open), &[]);
        assert!(said.starts_with(&*open.to_string_lossy()), "{said}");
        assert!(said.contains("writable by group or others"), "{said}");
        assert!(said.contains("TRELLIS_CACHE_DIR"), "{said}");
    }
}

#[cfg(unix)]
#[test]
fn the_default_cache_is_the_users_own() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let home = tmp.path().join("home");
    let temp = tmp.path().join("temp");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&temp).unwrap();
    let env = |home: &Path, xdg: Option<&'static str>| -> Vec<(&'static str, Option<PathBuf>)> {
        vec![
            ("HOME", Some(home.to_path_buf())),
            ("XDG_CACHE_HOME", xdg.map(|x| tmp.path().join(x))),
            ("TMPDIR", Some(temp.clone())),
        ]
    };
    let says = |env: Vec<(&'static str, Option<PathBuf>)>| {
        let env: Vec<(&str, Option<&Path>)> = env.iter().map(|(k, v)| (*k, v.as_deref())).collect();
        open_says(tmp.path(), None, &env)
    };
    // The user's cache directory, created private.
    assert_eq!(says(env(&home, None)), "ok");
    let user = if cfg!(target_os = "macos") {
        home.join("Library/Caches/trellis")
    } else {
        home.join(".cache/trellis")
    };
    assert_eq!(mode(&user), 0o700);
    assert_eq!(mode(&user.join("cpu")), 0o700);
    assert_eq!(says(env(&home, Some("xdg"))), "ok");
    assert_eq!(mode(&tmp.path().join("xdg/trellis/cpu")), 0o700);
    // A home where nothing can be created (here a file): the per-user temp root.
    let not_home = tmp.path().join("not-home");
    std::fs::write(&not_home, b"x").unwrap();
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let fallback = temp.join(format!("trellis-kernel-cache-{uid}"));
    assert_eq!(says(env(&not_home, None)), "ok");
    assert_eq!(mode(&fallback.join("cpu")), 0o700);
    // That name made first by someone else (here: made writable by all): refused, and
    // the error says how to choose another.
    std::fs::set_permissions(&fallback, std::fs::Permissions::from_mode(0o777)).unwrap();
    let said = says(env(&not_home, None));
    assert!(said.starts_with(&*fallback.to_string_lossy()), "{said}");
    assert!(said.contains("writable by group or others"), "{said}");
    assert!(
        said.contains("set TRELLIS_CACHE_DIR to use another directory"),
        "{said}"
    );
}

#[test]
fn the_backends_serve_many_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<CpuBackend>();
    send_sync::<MetalSimBackend>();
    #[cfg(feature = "cuda")]
    send_sync::<trellis::backend::cuda::CudaBackend>();
    #[cfg(not(target_os = "macos"))]
    send_sync::<trellis::backend::AnyBackend>();
}
