//! The host C++ compiler, as the backends that build kernels into shared libraries
//! (`cpu`, `metal-sim`) run it: which command (an environment variable, else `c++`),
//! what identifies that compiler in the kernel cache's keys, and one run of it with a
//! time limit and a message that says how it failed.

use crate::error::{Error, Result};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The variable that bounds one compiler run, in seconds (default [`DEFAULT_TIMEOUT`]).
pub const TIMEOUT_ENV: &str = "TRELLIS_CXX_TIMEOUT";

/// How long one compiler run may take by default: a batch of the largest units takes
/// about a minute on a 2-core machine under AddressSanitizer; a run past this is hung.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(900);

/// A host C++ compiler.
#[derive(Clone, Debug)]
pub struct HostCxx {
    command: String,
    /// Where the command came from, for messages (`$CXX, else `c++``).
    set_by: String,
    /// What the cache keys hold of it ([`Self::identity`]).
    identity: String,
    timeout: Duration,
}

impl HostCxx {
    /// The compiler the first of `vars` that is set (and not empty) names, else `c++`;
    /// an error naming the variable where one is not UTF-8, or where
    /// [`TIMEOUT_ENV`] is not a positive number of seconds.
    pub fn from_env(vars: &[&str]) -> Result<HostCxx> {
        let mut command = None;
        for v in vars {
            if let Some(c) = env_text(v)? {
                command = Some(c);
                break;
            }
        }
        let set_by = vars
            .iter()
            .map(|v| format!("${v}"))
            .chain(["`c++`".to_string()])
            .collect::<Vec<_>>()
            .join(", else ");
        let timeout = match env_text(TIMEOUT_ENV)? {
            None => DEFAULT_TIMEOUT,
            Some(t) => t
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|&s| s > 0)
                .map(Duration::from_secs)
                .ok_or_else(|| {
                    Error::invalid(
                        TIMEOUT_ENV,
                        &t,
                        "must be a whole number of seconds, at least 1",
                    )
                })?,
        };
        Ok(HostCxx::new(
            command.unwrap_or_else(|| "c++".into()),
            set_by,
            timeout,
        ))
    }

    /// `command`, described as set by `set_by`, under `timeout`.
    pub fn new(command: String, set_by: String, timeout: Duration) -> HostCxx {
        HostCxx {
            identity: identity(&command),
            command,
            set_by,
            timeout,
        }
    }

    /// The command as given.
    pub fn command(&self) -> &str {
        &self.command
    }

    /// What a cache key holds of this compiler: the command, the file it resolves to
    /// (through `PATH` and symlinks: `c++` switched to another compiler by the system's
    /// alternatives is another key), and that file's size and modification time (a
    /// wrapper script edited in place, or a compiler upgraded, is another key). What a
    /// wrapper script runs in turn is not followed (as ccache's default check).
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Run the compiler with `args` for `backend`: its output where it succeeds; where
    /// it cannot start, [`Error::Unavailable`]; where it fails, [`Error::Compile`] of
    /// `kernels` with its log (stderr, else stdout, at most `max_lines` lines) and how it
    /// ended (status or signal), then `source`; where it runs past its time limit, it
    /// is killed and that is the error.
    pub fn run(
        &self,
        backend: &str,
        args: &[&OsStr],
        kernels: &str,
        source: &Path,
        max_lines: usize,
    ) -> Result<Output> {
        let mut child = Command::new(&self.command)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| Error::Unavailable {
                backend: backend.into(),
                reason: format!(
                    "cannot run the C++ compiler `{}` (set by {}): {e}",
                    self.command, self.set_by
                ),
            })?;
        // Both pipes drained while it runs (a full pipe would stall it).
        let drain = |p: Option<Box<dyn std::io::Read + Send>>| {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                if let Some(mut p) = p {
                    let _ = p.read_to_end(&mut buf);
                }
                buf
            })
        };
        let stdout = drain(child.stdout.take().map(|p| Box::new(p) as _));
        let stderr = drain(child.stderr.take().map(|p| Box::new(p) as _));
        let started = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break s,
                Ok(None) if started.elapsed() > self.timeout => {
                    let _ = child.kill();
                    let _ = child.wait();
                    // (The readers are left: a process the compiler started may hold
                    // the pipes open a while longer.)
                    return Err(Error::Compile {
                        kernel: kernels.into(),
                        backend: backend.into(),
                        log: format!(
                            "the C++ compiler `{}` ran past {} s and was killed (raise \
                             ${TIMEOUT_ENV} if it is only slow)\n(source: {})",
                            self.command,
                            self.timeout.as_secs(),
                            source.display()
                        ),
                    });
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(e) => {
                    return Err(Error::backend(
                        backend,
                        format!("waiting for the compiler: {e}"),
                    ))
                }
            }
        };
        let output = Output {
            status,
            stdout: stdout.join().unwrap_or_default(),
            stderr: stderr.join().unwrap_or_default(),
        };
        if status.success() {
            return Ok(output);
        }
        let log = if output.stderr.iter().all(u8::is_ascii_whitespace) {
            &output.stdout
        } else {
            &output.stderr
        };
        // The first errors are the ones to read; say how many lines follow them.
        let log = String::from_utf8_lossy(log);
        let lines: Vec<&str> = log.lines().collect();
        let mut text = lines[..lines.len().min(max_lines)].join("\n");
        if lines.len() > max_lines {
            text.push_str(&format!("\n({} more lines)", lines.len() - max_lines));
        }
        Err(Error::Compile {
            kernel: kernels.into(),
            backend: backend.into(),
            log: format!(
                "{text}\n(the C++ compiler `{}` {}; source: {})",
                self.command,
                ended(&status),
                source.display()
            ),
        })
    }
}

/// How a process that failed ended.
fn ended(status: &std::process::ExitStatus) -> String {
    #[cfg(unix)]
    if let Some(sig) = std::os::unix::process::ExitStatusExt::signal(status) {
        return format!("was killed by signal {sig}");
    }
    match status.code() {
        Some(c) => format!("exited with status {c}"),
        None => format!("ended: {status}"),
    }
}

/// Variable `name`'s value: `None` where it is unset or empty, an error naming it where
/// it is not UTF-8 (ignoring it would run another compiler or drop flags silently).
pub fn env_text(name: &str) -> Result<Option<String>> {
    match std::env::var_os(name) {
        None => Ok(None),
        Some(v) if v.is_empty() => Ok(None),
        Some(v) => v
            .into_string()
            .map(Some)
            .map_err(|v| Error::invalid(name, v.to_string_lossy(), "must be UTF-8")),
    }
}

/// [`HostCxx::identity`] of `command`.
fn identity(command: &str) -> String {
    let Some(file) = resolve(command) else {
        // Not found: running it fails, with a message naming it.
        return command.to_string();
    };
    let real = file.canonicalize().unwrap_or(file);
    let meta = std::fs::metadata(&real).ok();
    let modified = meta
        .as_ref()
        .and_then(|m| m.modified().ok())
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    let size = meta.map_or(0, |m| m.len());
    format!(
        "{command} = {} ({size} bytes, modified {modified})",
        real.display()
    )
}

/// The file `command` runs: itself where it names a path, else the first `PATH` entry
/// holding a file of that name.
fn resolve(command: &str) -> Option<PathBuf> {
    if command.contains('/') {
        return Some(PathBuf::from(command));
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(command))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wrapper script edited in place is another compiler to the cache keys; one left
    /// alone is the same.
    #[test]
    fn editing_a_wrapper_changes_its_identity() {
        let d = tempfile::tempdir().unwrap();
        let script = d.path().join("cxx.sh");
        std::fs::write(&script, "#!/bin/sh\nexec c++ \"$@\"\n").unwrap();
        let cmd = script.to_str().unwrap().to_string();
        let before = identity(&cmd);
        assert_eq!(identity(&cmd), before);
        std::fs::write(&script, "#!/bin/sh\nexec c++ -fsanitize=address \"$@\"\n").unwrap();
        assert_ne!(identity(&cmd), before);
        // A command on PATH resolves to its file.
        assert!(identity("sh").contains("bytes"), "{}", identity("sh"));
        assert_eq!(identity("no-such-compiler-here"), "no-such-compiler-here");
    }

    /// A compiler that fails without a word, or is killed, says how it ended; one that
    /// hangs is killed at the time limit, and the error says so.
    #[test]
    fn failures_say_how_the_compiler_ended() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("k.cpp");
        let script = |name: &str, body: &str| {
            let p = d.path().join(name);
            std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
            #[cfg(unix)]
            std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .unwrap();
            p.to_str().unwrap().to_string()
        };
        let run = |cmd: String, timeout: u64| {
            HostCxx::new(cmd, "$CXX".into(), Duration::from_secs(timeout))
                .run("cpu", &[], "k", &src, 60)
                .unwrap_err()
                .to_string()
        };
        let e = run(script("exit3.sh", "exit 3"), 60);
        assert!(
            e.contains("exited with status 3") && e.contains("k.cpp"),
            "{e}"
        );
        let e = run(script("killed.sh", "kill -9 $$"), 60);
        assert!(e.contains("killed by signal 9"), "{e}");
        let e = run(script("out.sh", "echo 'error: on stdout'; exit 1"), 60);
        assert!(e.contains("error: on stdout"), "{e}");
        let e = run(script("hang.sh", "exec sleep 100"), 1);
        assert!(
            e.contains("ran past 1 s and was killed") && e.contains(TIMEOUT_ENV),
            "{e}"
        );
        let e = HostCxx::new(
            "/no/such/cxx".into(),
            "$CXX, else `c++`".into(),
            DEFAULT_TIMEOUT,
        )
        .run("cpu", &[], "k", &src, 60)
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("cannot run the C++ compiler `/no/such/cxx` (set by $CXX"),
            "{e}"
        );
    }
}
