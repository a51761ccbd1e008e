//! SPEC section 1: the geometry of a trellis-coded matrix and its validation.

use crate::codes::Code;
use crate::error::{Error, Result};

/// The shape and coding parameters of one quantized matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Geometry {
    /// `R`: output features.
    pub rows: usize,
    /// `C`: input features.
    pub cols: usize,
    /// `T`: weights per block.
    pub t: usize,
    /// `k`: bits per weight.
    pub k: u32,
    /// `L`: trellis state bits.
    pub l: u32,
    /// State -> value map.
    pub code: Code,
}

/// u32 words of one block of `t` weights at `k` bits, `T * k / 32` (SPEC 2): the one
/// place this is written, for [`Geometry`] and the kernels' projections alike.
pub const fn words_per_block(t: usize, k: u32) -> usize {
    t * k as usize / 32
}

/// SPEC 1's bits per weight and state bits: `1 <= k <= 8`, `k < L <= 16`.
pub fn check_kl(k: u32, l: u32) -> Result<()> {
    if !(1..=8).contains(&k) {
        return Err(Error::invalid("k", k, "must be in 1..=8"));
    }
    if l <= k || l > 16 {
        return Err(Error::invalid(
            "L",
            l,
            format!("must satisfy k = {k} < L <= 16"),
        ));
    }
    Ok(())
}

/// The most rows a matrix may have: kernels index rows in 32 bits, and a launch's last
/// group may reach past the last row (by less than 2^31).
pub const MAX_ROWS: usize = 1 << 31;

/// Trellis states at `l` state bits, `2^L` (saturating: a kernel struct built by hand
/// with an L out of range computes its table size before its validation names L).
pub const fn states(l: u32) -> usize {
    if l < usize::BITS {
        1usize << l
    } else {
        usize::MAX
    }
}

impl Geometry {
    /// Build and validate a geometry.
    pub fn new(rows: usize, cols: usize, t: usize, k: u32, l: u32, code: Code) -> Result<Self> {
        let g = Geometry {
            rows,
            cols,
            t,
            k,
            l,
            code,
        };
        g.validate()?;
        Ok(g)
    }

    /// Check every SPEC section 1 range; the error names the first offending field.
    pub fn validate(&self) -> Result<()> {
        if self.rows == 0 {
            return Err(Error::invalid("rows", self.rows, "must be at least 1"));
        }
        if self.t == 0 || !self.t.is_multiple_of(32) {
            return Err(Error::invalid(
                "T",
                self.t,
                "must be a positive multiple of 32",
            ));
        }
        if self.cols == 0 || !self.cols.is_multiple_of(self.t) {
            return Err(Error::invalid(
                "cols",
                self.cols,
                format!("must be a positive multiple of T = {}", self.t),
            ));
        }
        check_kl(self.k, self.l)?;
        // Guard the u32 indexing every kernel uses: a column index within a row (`u * 32 +
        // j`), a row index (a launch rounds the rows up to whole groups of at most 512
        // rows, which must not wrap past 2^32 either) and a word index within the codes
        // tensor (in u128: the product of two usize fields read from a file must not wrap
        // into a small, valid-looking size).
        if self.cols > u32::MAX as usize {
            return Err(Error::invalid(
                "cols",
                self.cols,
                "must be below 2^32 (kernels index a row's columns in 32 bits)",
            ));
        }
        // A block's bit positions (`(T - 32 - t0) * k`, SPEC 2's run offsets) are 32-bit in
        // the kernels too.
        if self.t as u128 * self.k as u128 >= 1u128 << 32 {
            return Err(Error::invalid(
                "T",
                self.t,
                format!(
                    "T * k must be below 2^32 bits a block (k = {}; kernels place a block's runs in 32 bits)",
                    self.k
                ),
            ));
        }
        if self.rows > MAX_ROWS {
            return Err(Error::invalid(
                "rows",
                self.rows,
                "must be at most 2^31 (kernels index rows in 32 bits, rounded up to whole groups)",
            ));
        }
        let words = self.rows as u128 * self.cols as u128 * self.k as u128 / 32;
        if words >= u32::MAX as u128 {
            return Err(Error::invalid(
                "codes words",
                format!(
                    "{words} (rows {} x cols {} x k {} / 32)",
                    self.rows, self.cols, self.k
                ),
                "must be fewer than 2^32 - 1 (kernels index the codes in 32 bits)",
            ));
        }
        Ok(())
    }

    /// Blocks per row, `C / T`.
    pub fn blocks_per_row(&self) -> usize {
        self.cols / self.t
    }

    /// u32 words per block, `T * k / 32`.
    pub fn words_per_block(&self) -> usize {
        words_per_block(self.t, self.k)
    }

    /// u32 words per row.
    pub fn words_per_row(&self) -> usize {
        self.blocks_per_row() * self.words_per_block()
    }

    /// Shape of the `codes` tensor, `[R, C/T, T*k/32]`.
    pub fn codes_shape(&self) -> [usize; 3] {
        [self.rows, self.blocks_per_row(), self.words_per_block()]
    }

    /// Bytes of the `codes` tensor, `R * C * k / 8`.
    pub fn code_bytes(&self) -> usize {
        self.codes_shape().iter().product::<usize>() * 4
    }

    /// Number of trellis states, `2^L`.
    pub fn states(&self) -> usize {
        states(self.l)
    }

    /// The `lut` tensor's length for code `lut`, `None` for computed codes.
    pub fn lut_len(&self) -> Option<usize> {
        (self.code == Code::Lut).then(|| self.states())
    }

    /// The SPEC section 8 metadata string.
    pub fn to_metadata(&self) -> String {
        format!(
            "code={};k={};L={};T={};rows={};cols={}",
            self.code, self.k, self.l, self.t, self.rows, self.cols
        )
    }

    /// Parse and validate the SPEC section 8 metadata string.
    pub fn from_metadata(s: &str) -> Result<Self> {
        let mut code = None;
        let (mut k, mut l, mut t, mut rows, mut cols) = (None, None, None, None, None);
        let mut seen: Vec<&str> = Vec::new();
        for part in s.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| Error::invalid("trellis metadata", part, "expected `key=value`"))?;
            // A second value of a field would silently win over the first.
            if seen.contains(&key.trim()) {
                return Err(Error::invalid(
                    key.trim(),
                    value.trim(),
                    format!("given twice in metadata `{s}`"),
                ));
            }
            seen.push(key.trim());
            // Decimal digits only (`parse` would also take a sign: `k=+2`).
            let num = |field: &str| -> Result<u64> {
                let v = value.trim();
                if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(Error::invalid(field, value, "not a non-negative integer"));
                }
                v.parse::<u64>()
                    .map_err(|_| Error::invalid(field, value, "out of range (past 2^64 - 1)"))
            };
            match key.trim() {
                "code" => code = Some(value.trim().parse::<Code>()?),
                "k" => k = Some(num("k")?),
                "L" => l = Some(num("L")?),
                "T" => t = Some(num("T")?),
                "rows" => rows = Some(num("rows")?),
                "cols" => cols = Some(num("cols")?),
                other => {
                    return Err(Error::invalid(
                        "trellis metadata",
                        other,
                        "unknown key (expected code, k, L, T, rows, cols)",
                    ))
                }
            }
        }
        let need = |field: &str, v: Option<u64>| {
            v.ok_or_else(|| Error::invalid(field, "missing", format!("metadata `{s}` lacks it")))
        };
        let code = code
            .ok_or_else(|| Error::invalid("code", "missing", format!("metadata `{s}` lacks it")))?;
        let small = |field: &str, v: u64| -> Result<u32> {
            u32::try_from(v).map_err(|_| Error::invalid(field, v, "out of range"))
        };
        let k = small("k", need("k", k)?)?;
        let l = small("L", need("L", l)?)?;
        let size = |field: &str, v: u64| -> Result<usize> {
            usize::try_from(v).map_err(|_| Error::invalid(field, v, "out of range"))
        };
        Geometry::new(
            size("rows", need("rows", rows)?)?,
            size("cols", need("cols", cols)?)?,
            size("T", need("T", t)?)?,
            k,
            l,
            code,
        )
    }
}

impl std::fmt::Display for Geometry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}x{} code={} k={} L={} T={}",
            self.rows, self.cols, self.code, self.k, self.l, self.t
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// rows x cols from a file can be any two usize: the size check must not wrap (2^32 x
    /// 2^32 is 2^64, which wraps to 0 in usize and in u64).
    #[test]
    fn huge_products_are_rejected_not_wrapped() {
        for (rows, cols, want) in [
            (1usize << 32, 1usize << 32, "cols"),
            (1, 1usize << 62, "cols"),
            // 2^28 code words, but column indices past 32 bits.
            (1, 1usize << 33, "cols"),
            (
                1usize << 30,
                1usize << 10,
                "codes words = 34359738368 (rows 1073741824 x cols 1024 x k 1 / 32)",
            ),
        ] {
            let err = Geometry::new(rows, cols, 32, 1, 2, Code::OneMad)
                .unwrap_err()
                .to_string();
            assert!(err.contains(want) && err.contains("2^32"), "{err}");
        }
        // Rows past 2^31: the CPU kernels' bound of a group's rows, (group + 1) * rows a
        // group, wrapped to 0 at 2^32 - 2 rows and left the last rows unwritten (an
        // audit's finding); such a matrix is refused by name, 2^31 rows validate.
        for rows in [
            usize::MAX,
            1usize << 32,
            (1usize << 32) - 2,
            (1usize << 31) + 1,
        ] {
            let err = Geometry::new(rows, 32, 32, 1, 2, Code::OneMad)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(&format!("rows = {rows}")) && err.contains("2^31"),
                "{err}"
            );
        }
        Geometry::new(MAX_ROWS, 32, 32, 1, 2, Code::OneMad).unwrap();
        // A hand-set L past usize's bits sizes its table without overflow (saturating);
        // validation then names L.
        assert_eq!(states(64), usize::MAX);
        assert_eq!(states(16), 65536);
        // One block of 2^29 + 32 weights at k = 8 is 2^32 + 256 bits: its run offsets
        // wrapped in the kernels' 32 bits (a wrong result, found by an audit), so it is
        // refused by name; 2^29 - 32 weights at k = 8 (below 2^32 bits) still validates.
        let big = (1usize << 29) + 32;
        let err = Geometry::new(1, big, big, 8, 12, Code::OneMad)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("T = {big}")) && err.contains("T * k"),
            "{err}"
        );
        let fits = (1usize << 29) - 32;
        Geometry::new(1, fits, fits, 8, 12, Code::OneMad).unwrap();
    }

    #[test]
    fn rejects_each_field_by_name() {
        let bad = [
            (Geometry::new(4, 256, 48, 2, 12, Code::OneMad), "T = 48"),
            (
                Geometry::new(4, 300, 256, 2, 12, Code::OneMad),
                "cols = 300",
            ),
            (Geometry::new(4, 256, 256, 0, 12, Code::OneMad), "k = 0"),
            (Geometry::new(4, 256, 256, 9, 12, Code::OneMad), "k = 9"),
            (Geometry::new(4, 256, 256, 4, 4, Code::OneMad), "L = 4"),
            (Geometry::new(4, 256, 256, 4, 17, Code::OneMad), "L = 17"),
            (Geometry::new(0, 256, 256, 4, 12, Code::OneMad), "rows = 0"),
        ];
        for (g, needle) in bad {
            let msg = g.unwrap_err().to_string();
            assert!(msg.contains(needle), "{msg:?} should mention {needle:?}");
        }
    }

    #[test]
    fn metadata_round_trips() {
        let g = Geometry::new(5, 512, 128, 3, 13, Code::Mul1).unwrap();
        assert_eq!(g.to_metadata(), "code=mul1;k=3;L=13;T=128;rows=5;cols=512");
        assert_eq!(Geometry::from_metadata(&g.to_metadata()).unwrap(), g);
    }

    #[test]
    fn metadata_errors_name_the_field() {
        let cases = [
            ("code=1mad;k=3;L=12;T=256;rows=4", "cols"),
            ("code=zzz;k=3;L=12;T=256;rows=4;cols=256", "code"),
            ("code=1mad;k=x;L=12;T=256;rows=4;cols=256", "k = x"),
            ("code=1mad;k=+2;L=12;T=256;rows=4;cols=256", "k = +2"),
            ("code=1mad;k=2;L=12;T=-256;rows=4;cols=256", "T = -256"),
            (
                "code=1mad;k=2;L=12;T=256;rows=99999999999999999999999;cols=256",
                "out of range",
            ),
            ("code=1mad;k=3;L=12;T=256;rows=4;cols=256;q=1", "q"),
            ("garbage", "garbage"),
            (
                "code=1mad;k=2;L=12;T=256;rows=4;cols=256;code=3inst",
                "code = 3inst: given twice",
            ),
            (
                "code=1mad;k=2;L=12;L=10;T=256;rows=4;cols=256",
                "L = 10: given twice",
            ),
        ];
        for (s, needle) in cases {
            let msg = Geometry::from_metadata(s).unwrap_err().to_string();
            assert!(msg.contains(needle), "{msg:?} should mention {needle:?}");
        }
    }
}
