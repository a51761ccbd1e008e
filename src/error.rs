//! One error type for the library. Every variant names the offending field and value,
//! because a user staring at a rejected file needs to know *which* number was wrong.

use std::path::PathBuf;

/// Errors from validation, file I/O, kernel generation, compilation and launch.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A geometry or tensor field outside the SPEC ranges, or disagreeing with another.
    #[error("invalid {field} = {value}: {reason}")]
    Invalid {
        /// The offending field (e.g. `k`, `rows`).
        field: String,
        /// Its value, as text.
        value: String,
        /// What is wrong with it, or what was expected.
        reason: String,
    },
    /// A tensor whose shape disagrees with what the geometry or kernel expects.
    #[error("tensor `{name}` has shape {actual:?}, expected {expected:?}")]
    Shape {
        /// The tensor's name (e.g. `codes`).
        name: String,
        /// The shape it has.
        actual: Vec<usize>,
        /// The shape it should have.
        expected: Vec<usize>,
    },
    /// A tensor with a dtype the operation does not accept.
    #[error("tensor `{name}` has dtype {actual}, expected {expected}")]
    DType {
        /// The tensor's name.
        name: String,
        /// The dtype it has.
        actual: String,
        /// The dtype (or dtypes) accepted.
        expected: String,
    },
    /// A file that could not be read, parsed or written.
    #[error("{path}: {reason}")]
    File {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// A kernel that failed to compile; `log` holds the compiler's output.
    #[error("kernel `{kernel}` failed to compile on {backend}:\n{log}")]
    Compile {
        /// The kernel's name or symbol (comma-separated for a batch).
        kernel: String,
        /// The backend that compiled it.
        backend: String,
        /// The compiler's output.
        log: String,
    },
    /// A backend that is not available on this machine (no driver, not built in, ...).
    #[error("backend `{backend}` is unavailable: {reason}")]
    Unavailable {
        /// The backend's name (`cuda`, `metal`, ...).
        backend: String,
        /// Why it cannot be used.
        reason: String,
    },
    /// A failure reported by a backend while launching or copying.
    #[error("{backend}: {reason}")]
    Backend {
        /// The backend's name.
        backend: String,
        /// The failure it reported.
        reason: String,
    },
}

impl Error {
    /// An out-of-range or inconsistent field.
    pub fn invalid(
        field: impl Into<String>,
        value: impl ToString,
        reason: impl Into<String>,
    ) -> Self {
        Error::Invalid {
            field: field.into(),
            value: value.to_string(),
            reason: reason.into(),
        }
    }

    /// A file-level problem.
    pub fn file(path: impl Into<PathBuf>, reason: impl ToString) -> Self {
        Error::File {
            path: path.into(),
            reason: reason.to_string(),
        }
    }

    /// This error as one from the file at `path`: a file error already names its file
    /// and is kept; any other (a field, shape or dtype of what the file holds) becomes a
    /// file error with its message as the reason.
    pub fn in_file(self, path: impl Into<PathBuf>) -> Self {
        match self {
            e @ Error::File { .. } => e,
            e => Error::file(path, e),
        }
    }

    /// This error as one about the matrix `whose` (`gate`, `up`) of a pair: a field,
    /// tensor or dtype it names is prefixed with `whose`; any other error is kept.
    pub fn of(mut self, whose: &str) -> Self {
        if let Error::Invalid { field: name, .. }
        | Error::Shape { name, .. }
        | Error::DType { name, .. } = &mut self
        {
            *name = format!("{whose} {name}");
        }
        self
    }

    /// A backend-level problem.
    pub fn backend(backend: impl Into<String>, reason: impl ToString) -> Self {
        Error::Backend {
            backend: backend.into(),
            reason: reason.to_string(),
        }
    }
}

/// Library result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A message of several lines (a compiler's log, a TOML or serde error) as one line, its
/// lines joined by `; `: what a command prints to stderr, one line a diagnostic. Other
/// control characters (a value read from a file may hold any) are escaped, so a
/// message cannot move the cursor or recolour a terminal; a tab is a space.
pub fn one_line(s: &str) -> String {
    let joined = s
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    let mut out = String::with_capacity(joined.len());
    for c in joined.chars() {
        match c {
            '\t' => out.push(' '),
            c if c.is_control() => out.extend(c.escape_default()),
            c => out.push(c),
        }
    }
    out
}

/// An empty vector with room for `n` values, or an error naming `what` (with `value`, how
/// much was asked) when the memory cannot be had: a huge size from a file, a flag or a
/// caller is an error, never an allocation abort.
pub fn reserve<T>(n: usize, what: impl Into<String>, value: impl ToString) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|e| {
        Error::invalid(
            what,
            value,
            format!(
                "cannot allocate {} bytes: {e}",
                n.saturating_mul(std::mem::size_of::<T>())
            ),
        )
    })?;
    Ok(v)
}

/// `items` (`n` of them) collected into memory reserved first ([`reserve`]).
pub fn collect_reserved<T>(
    n: usize,
    items: impl IntoIterator<Item = T>,
    what: impl Into<String>,
    value: impl ToString,
) -> Result<Vec<T>> {
    let mut v = reserve(n, what, value)?;
    v.extend(items);
    Ok(v)
}

/// The variable rayon reads for its pools' thread count.
pub const THREADS_ENV: &str = "RAYON_NUM_THREADS";

/// The most threads [`THREADS_ENV`] may ask for: this machine's hardware threads, and at
/// least 1024.
pub fn max_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .max(1024)
}

/// [`THREADS_ENV`], checked before a pool is built: a count past [`max_threads`] is an
/// error naming it (rayon would start every thread: tens of thousands stall the process
/// for minutes, then abort it when their stacks run out), as is one that is not a
/// number (rayon would quietly use its default). Unset, empty or 0: rayon's default.
pub fn check_threads_env() -> Result<()> {
    let Some(v) = std::env::var_os(THREADS_ENV) else {
        return Ok(());
    };
    let s = v.to_string_lossy();
    match s.trim().parse::<usize>() {
        _ if s.trim().is_empty() => Ok(()),
        Ok(n) if n <= max_threads() => Ok(()),
        Ok(_) => Err(Error::invalid(
            THREADS_ENV,
            s.trim(),
            format!("at most {} threads", max_threads()),
        )),
        Err(_) => Err(Error::invalid(
            THREADS_ENV,
            s.trim(),
            "must be a thread count (0 or unset: one a core)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::one_line;

    /// Lines joined, blank ones dropped; a tab a space; every other control character
    /// (a terminal's escape, a NUL, a lone carriage return) escaped.
    #[test]
    fn one_line_is_one_line_of_printable_text() {
        let s = one_line("a\n\n  b\tc \r\nd\u{1b}[2J\0e\rf");
        assert_eq!(s, "a; b c; d\\u{1b}[2J\\u{0}e\\rf");
        assert!(!s.chars().any(char::is_control));
    }
}
