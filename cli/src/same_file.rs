//! An output must never replace an input: `--out` is compared with every input file by
//! identity (device and inode on Unix, else canonical paths), so `s.safetensors`,
//! `./d/../s.safetensors`, a symlink to it and a hard link of it are all the same file.

use std::path::Path;
use trellis::{Error, Result};

/// Whether `a` and `b` name the same existing file.
pub fn same_file(a: &Path, b: &Path) -> bool {
    let (Ok(ma), Ok(mb)) = (std::fs::metadata(a), std::fs::metadata(b)) else {
        // A file that does not exist cannot be an input that would be overwritten.
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let _ = (&ma, &mb);
        ma.dev() == mb.dev() && ma.ino() == mb.ino()
    }
    #[cfg(not(unix))]
    {
        let _ = (ma, mb);
        match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        }
    }
}

/// Refuse an `out` that is the same file as one of `inputs` (`(flag, path)` pairs).
pub fn refuse_overwrite(out: &Path, inputs: &[(&str, &Path)]) -> Result<()> {
    for (flag, input) in inputs {
        if same_file(out, input) {
            return Err(Error::invalid(
                "out",
                out.display(),
                format!(
                    "is the same file as --{flag} {}: refusing to overwrite an input",
                    input.display()
                ),
            ));
        }
    }
    Ok(())
}
