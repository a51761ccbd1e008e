//! Sizes checked before anything is allocated: a tensor the CLI generates has at most
//! [`MAX_ELEMENTS`] elements, and its buffer is reserved fallibly (`trellis::error::reserve`), so a huge or
//! overflowing `--rows x --cols` is one `error:` line, never an allocation abort.

use trellis::{Error, Result};

/// The most elements one generated tensor may have (2^32: 16 GiB of f32).
pub const MAX_ELEMENTS: usize = 1 << 32;

/// The product of the dimensions, each named by its flag, must not overflow and must be
/// at most [`MAX_ELEMENTS`]; the error names the flags, the values and the limit.
pub fn check_elements(dims: &[(&str, usize)]) -> Result<usize> {
    let product = dims
        .iter()
        .try_fold(1usize, |acc, &(_, n)| acc.checked_mul(n));
    match product {
        Some(n) if n <= MAX_ELEMENTS => Ok(n),
        _ => {
            let flags: Vec<String> = dims.iter().map(|(f, _)| format!("--{f}")).collect();
            let names: Vec<&str> = dims.iter().map(|(f, _)| *f).collect();
            let values: Vec<String> = dims.iter().map(|(_, n)| n.to_string()).collect();
            let total = dims
                .iter()
                .map(|&(_, n)| n as u128)
                .try_fold(1u128, |acc, n| acc.checked_mul(n))
                .map_or_else(|| "more than 2^128".to_string(), |t| t.to_string());
            Err(Error::invalid(
                names.join(" x "),
                format!("{} ({total} elements)", values.join(" x ")),
                format!(
                    "more than the limit of {MAX_ELEMENTS} elements (2^32) per tensor; lower {}",
                    flags.join(" or ")
                ),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_name_the_flags_and_the_limit() {
        assert_eq!(check_elements(&[("m", 4), ("cols", 4096)]).unwrap(), 16384);
        let e = check_elements(&[("m", 100_000_000), ("cols", 100_000)])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--m") && e.contains("--cols") && e.contains("4294967296"),
            "{e}"
        );
        let e = check_elements(&[("rows", 1 << 62), ("cols", 256)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("4611686018427387904 x 256"), "{e}");
        assert!(check_elements(&[("rows", usize::MAX), ("cols", usize::MAX)]).is_err());
    }
}
