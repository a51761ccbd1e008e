//! SPEC section 8: the safetensors interchange file.
//!
//! Reading checks every tensor against the `<prefix>.trellis` metadata (dtype, shape,
//! table length) before anything runs, and every mismatch is an [`Error`] that names
//! the tensor or field and the offending value. A file's header is read and validated
//! when it is opened, and a tensor's bytes only when that tensor is read
//! ([`SafetensorsFile`]): listing a file of many GB reads its header, reading one matrix
//! reads that matrix's bytes. Writing is atomic: the file is written
//! next to its destination under a temporary name and renamed into place, so a failed
//! command never leaves a half-written output behind.

use crate::codes::Code;
use crate::dtype::{DType, ScaleDType};
use crate::error::{Error, Result};
use crate::geometry::Geometry;
use crate::matrix::{Activations, QuantizedMatrix};
use safetensors::tensor::{Metadata, TensorInfo};
use safetensors::{Dtype, View};
use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Suffix of the metadata key that describes a quantized matrix: `<prefix>.trellis`.
pub const METADATA_SUFFIX: &str = ".trellis";

/// Name of the `codes` tensor of a matrix stored under `prefix`.
pub fn codes_name(prefix: &str) -> String {
    format!("{prefix}.codes")
}

/// Name of the `scales` tensor of a matrix stored under `prefix`.
pub fn scales_name(prefix: &str) -> String {
    format!("{prefix}.scales")
}

/// Name of the `lut` tensor of a matrix stored under `prefix` (code `lut` only).
pub fn lut_name(prefix: &str) -> String {
    format!("{prefix}.lut")
}

/// Name of the metadata key of a matrix stored under `prefix`.
pub fn metadata_key(prefix: &str) -> String {
    format!("{prefix}{METADATA_SUFFIX}")
}

/// The lower-case name of a safetensors dtype (`u32`, `bf16`, `f64`, ...), as errors show it.
pub fn dtype_name(d: Dtype) -> String {
    d.to_string().to_lowercase()
}

/// An activation dtype as a safetensors dtype.
pub fn to_st_dtype(d: DType) -> Dtype {
    match d {
        DType::Bf16 => Dtype::BF16,
        DType::F16 => Dtype::F16,
        DType::F32 => Dtype::F32,
    }
}

/// A safetensors dtype as an activation dtype, if it is one.
pub fn from_st_dtype(d: Dtype) -> Option<DType> {
    match d {
        Dtype::BF16 => Some(DType::Bf16),
        Dtype::F16 => Some(DType::F16),
        Dtype::F32 => Some(DType::F32),
        _ => None,
    }
}

/// One tensor of an open file: its name, dtype, shape and little-endian bytes.
///
/// [`SafetensorsFile::tensor`] reads the bytes of this one tensor from the file when it
/// is asked for (`data` is then owned); a `TensorRef` made by hand may borrow them.
#[derive(Clone, Debug)]
pub struct TensorRef<'a> {
    /// The tensor's name in the file (e.g. `<prefix>.codes`, SPEC 8).
    pub name: String,
    /// Its safetensors dtype.
    pub dtype: Dtype,
    /// Its shape, row-major.
    pub shape: &'a [usize],
    /// Its raw little-endian bytes.
    pub data: Cow<'a, [u8]>,
}

impl TensorRef<'_> {
    /// Require one of the float dtypes and decode to exact f32 values.
    pub fn to_f32(&self) -> Result<Vec<f32>> {
        match from_st_dtype(self.dtype) {
            Some(d) => d.try_decode(&self.data, &format!("tensor `{}`", self.name)),
            None => Err(self.wrong_dtype("bf16, f16 or f32")),
        }
    }

    /// Require `u32` and decode.
    pub fn to_u32(&self) -> Result<Vec<u32>> {
        if self.dtype != Dtype::U32 {
            return Err(self.wrong_dtype("u32"));
        }
        let n = self.data.len() / 4;
        crate::error::collect_reserved(
            n,
            self.data
                .chunks_exact(4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            format!("tensor `{}`", self.name),
            format!("{n} words"),
        )
    }

    /// An [`Error::DType`] for this tensor.
    pub fn wrong_dtype(&self, expected: &str) -> Error {
        wrong_dtype(&self.name, self.dtype, expected)
    }

    /// Require exactly `expected` as the shape.
    pub fn expect_shape(&self, expected: &[usize]) -> Result<()> {
        expect_shape(&self.name, self.shape, expected)
    }

    /// Require rank 2 and return `(rows, cols)`; another rank is an error naming it
    /// (one vector of C values is `[1, C]`).
    pub fn matrix_shape(&self) -> Result<(usize, usize)> {
        matrix_shape(&self.name, self.shape)
    }
}

/// An [`Error::DType`] for tensor `name` of `dtype`.
fn wrong_dtype(name: &str, dtype: Dtype, expected: &str) -> Error {
    Error::DType {
        name: name.to_string(),
        actual: dtype_name(dtype),
        expected: expected.to_string(),
    }
}

/// Require exactly `expected` as the shape of tensor `name`.
fn expect_shape(name: &str, shape: &[usize], expected: &[usize]) -> Result<()> {
    if shape != expected {
        return Err(Error::Shape {
            name: name.to_string(),
            actual: shape.to_vec(),
            expected: expected.to_vec(),
        });
    }
    Ok(())
}

/// Require rank 2 of tensor `name` and return `(rows, cols)`.
fn matrix_shape(name: &str, shape: &[usize]) -> Result<(usize, usize)> {
    match *shape {
        [rows, cols] => Ok((rows, cols)),
        _ => Err(Error::invalid(
            format!("tensor `{name}` shape"),
            format!("{shape:?}"),
            match *shape {
                [c] => format!("must be [rows, cols]: one vector of {c} values is [1, {c}]"),
                _ => format!("must be [rows, cols], not {} dimensions", shape.len()),
            },
        )),
    }
}

/// A safetensors file opened for reading: its header is read and validated when it is
/// opened, each tensor's bytes are read from the file when that tensor is asked for.
///
/// [`SafetensorsFile::open`] reads the 8-byte header length and the header, nothing else,
/// and checks them whole: the header length against the file's, a key given twice, every
/// tensor's dtype, shape and offsets (contiguous, in bounds, each holding the bytes its
/// dtype and shape need), and the data length the header declares against what the file
/// holds after it. The file stays open; [`tensor`](Self::tensor) (and
/// [`quantized`](Self::quantized), [`activations`](Self::activations),
/// [`dense`](Self::dense)) seeks to that one tensor's bytes and reads them into memory
/// reserved first (a huge tensor is an error, not an abort). So memory and I/O follow what
/// is used, not the file's size: listing the matrices of a shard of many GB
/// ([`names`](Self::names), [`info`](Self::info),
/// [`quantized_prefixes`](Self::quantized_prefixes),
/// [`quantized_layout`](Self::quantized_layout), [`list_quantized`]) reads its header
/// only, and reading one matrix reads that matrix's tensors only.
///
/// The file is read, never memory-mapped (a mapped file truncated by another process
/// would kill this one with SIGBUS). A file that shrank or changed after it was opened is
/// an error naming the file and the tensor, not wrong data: a read that ends before the
/// tensor does, or a file whose length or modification time, asked after each read, is
/// not what it was at `open` (a rewrite of the same length within the file system's
/// timestamp granularity cannot be seen). A file replaced by a rename after `open` is not
/// a change: the open handle goes on reading the file that was opened.
///
/// Every error of its methods, and of the path-taking readers ([`read_quantized`] and the
/// rest), names the file ([`Error::in_file`]): a shape, dtype or metadata field refused
/// is a [`Error::File`] whose reason is that field's error.
pub struct SafetensorsFile {
    path: PathBuf,
    /// The open file; the lock holds its seek position from the seek to the read.
    file: std::sync::Mutex<std::fs::File>,
    /// The file's length and modification time at `open`, checked after each read.
    len: u64,
    modified: Option<std::time::SystemTime>,
    /// Where the data begins in the file: 8 + the header length.
    data_start: u64,
    meta: Metadata,
    /// Data bytes read from the file so far (what the tests count).
    data_read: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for SafetensorsFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SafetensorsFile")
            .field("path", &self.path)
            .field("tensors", &self.names())
            .finish()
    }
}

/// The safetensors crate's limit on the header (a longer one it refuses).
const MAX_HEADER_BYTES: u64 = 100_000_000;

/// The first key a safetensors header gives twice, at its top level or inside
/// `__metadata__` (JSON parsers, serde_json and so the safetensors crate among them,
/// keep the last of repeated keys silently: two `codes` tensors or two descriptions of
/// a matrix would be read as whichever came last).
struct RepeatedKey(Option<String>);

impl<'de> serde::Deserialize<'de> for RepeatedKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Keys {
            top: bool,
        }
        impl<'de> serde::de::Visitor<'de> for Keys {
            type Value = Option<String>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Self::Value, A::Error> {
                let (mut seen, mut first) = (std::collections::HashSet::new(), None);
                while let Some(key) = map.next_key::<String>()? {
                    if self.top && key == "__metadata__" {
                        let inner = map.next_value::<Nested>()?.0;
                        first = first.or(inner.map(|k| format!("__metadata__.{k}")));
                    } else {
                        map.next_value::<serde::de::IgnoredAny>()?;
                    }
                    if !seen.insert(key.clone()) {
                        first = first.or(Some(key));
                    }
                }
                Ok(first)
            }
        }
        struct Nested(Option<String>);
        impl<'de> serde::Deserialize<'de> for Nested {
            fn deserialize<D: serde::Deserializer<'de>>(
                d: D,
            ) -> std::result::Result<Self, D::Error> {
                d.deserialize_map(Keys { top: false }).map(Nested)
            }
        }
        d.deserialize_map(Keys { top: true }).map(RepeatedKey)
    }
}

/// What is wrong with a header, naming the tensor or `__metadata__` field, where the
/// safetensors crate's own message does not: its shape (an object), `__metadata__`'s
/// (an object of strings), then the tensor entries (their dtype, shape and offsets checked
/// one by one against the `data_len` bytes after the header, then their order); `None`
/// when nothing here is found wrong.
fn diagnose_header(header: &[u8], data_len: u64) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(header).ok()?;
    let Some(map) = value.as_object() else {
        return Some(format!(
            "the header is {}, not a JSON object of tensors (and `__metadata__`)",
            json_kind(&value)
        ));
    };
    if let Some(meta) = map.get("__metadata__") {
        let Some(fields) = meta.as_object() else {
            return Some(format!(
                "`__metadata__` is {}, not an object of strings",
                json_kind(meta)
            ));
        };
        if let Some((key, v)) = fields.iter().find(|(_, v)| !v.is_string()) {
            return Some(format!(
                "`__metadata__` field `{key}` is {}, not a string",
                json_kind(v)
            ));
        }
    }
    let mut spans = Vec::new();
    let mut names: Vec<&String> = map.keys().filter(|k| *k != "__metadata__").collect();
    names.sort();
    for name in names {
        let info: safetensors::tensor::TensorInfo = match serde_json::from_value(map[name].clone())
        {
            Ok(info) => info,
            Err(e) => return Some(format!("tensor `{name}`: {e}")),
        };
        let (begin, end) = info.data_offsets;
        let shape = &info.shape;
        let Some(bits) = tensor_bits(info.dtype, shape) else {
            return Some(format!(
                "tensor `{name}`: shape {shape:?} has more elements than can be counted"
            ));
        };
        if end < begin {
            return Some(format!(
                "tensor `{name}`: data_offsets [{begin}, {end}] end before they begin"
            ));
        }
        if end as u64 > data_len {
            return Some(format!(
                "tensor `{name}`: data_offsets [{begin}, {end}] end past the {data_len} data \
                 bytes after the header"
            ));
        }
        if bits % 8 != 0 || end - begin != bits / 8 {
            let need = if bits % 8 == 0 {
                format!("{} bytes", bits / 8)
            } else {
                format!("{bits} bits, not whole bytes")
            };
            return Some(format!(
                "tensor `{name}`: data_offsets [{begin}, {end}] hold {} bytes, its dtype {:?} \
                 and shape {shape:?} need {need}",
                end - begin,
                info.dtype,
            ));
        }
        spans.push((begin, end, name));
    }
    spans.sort();
    let mut at = 0;
    for (begin, end, name) in spans {
        if begin != at {
            return Some(format!(
                "tensor `{name}`: its data begins at byte {begin} of the data, where the \
                 tensors before it end at {at} (the data must be contiguous)"
            ));
        }
        at = end;
    }
    None
}

/// A JSON value's kind and, where short, the value (`an integer, 5`; `an object`).
fn json_kind(v: &serde_json::Value) -> String {
    use serde_json::Value;
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("a boolean, {b}"),
        Value::Number(n) => format!("a number, {n}"),
        Value::String(_) => "a string".into(),
        Value::Array(a) => format!("an array of {} items", a.len()),
        Value::Object(_) => "an object".into(),
    }
}

/// The bits of a tensor of `dtype` and `shape` (`None`: more than a usize counts).
fn tensor_bits(dtype: Dtype, shape: &[usize]) -> Option<usize> {
    shape
        .iter()
        .try_fold(dtype.bitsize(), |n, &d| n.checked_mul(d))
}

/// Why `kind` is no regular file, if it is not.
fn not_regular(kind: &std::fs::Metadata) -> Option<&'static str> {
    if kind.is_file() {
        None
    } else if kind.is_dir() {
        Some("a directory")
    } else {
        Some("a device, pipe or socket")
    }
}

/// Open `path` for reading if it is a regular file (symlinks followed), else an error
/// saying what it is and `why` that matters. The kind is asked before the file is opened
/// (opening a pipe waits for a writer) and again of the open file (it may have been
/// replaced in between).
pub fn open_regular(path: &Path, why: &str) -> Result<std::fs::File> {
    let cannot = |e: std::io::Error| Error::file(path, format!("cannot read: {e}"));
    let refuse = |what: &str| Error::file(path, format!("not a regular file ({what}): {why}"));
    if let Some(what) = not_regular(&std::fs::metadata(path).map_err(cannot)?) {
        return Err(refuse(what));
    }
    let f = std::fs::File::open(path).map_err(cannot)?;
    if let Some(what) = not_regular(&f.metadata().map_err(cannot)?) {
        return Err(refuse(what));
    }
    Ok(f)
}

/// A text file of at most `max` bytes (a tuning table), read only if it is a regular file
/// of that size: a pipe, a device or a huge file is an error, not a hang or an abort.
pub fn read_text(path: &Path, max: u64) -> Result<String> {
    use std::io::Read;
    let f = open_regular(path, "a text file is read whole")?;
    let len = f
        .metadata()
        .map_err(|e| Error::file(path, format!("cannot read: {e}")))?
        .len();
    if len > max {
        return Err(Error::file(
            path,
            format!("{len} bytes, more than the {max} a file of this kind may have"),
        ));
    }
    let mut text = String::new();
    f.take(max + 1)
        .read_to_string(&mut text)
        .map_err(|e| Error::file(path, format!("cannot read: {e}")))?;
    Ok(text)
}

impl SafetensorsFile {
    /// Open a file and read and validate its header (not its data, see
    /// [`SafetensorsFile`]). A missing, truncated or garbage file is an [`Error::File`].
    /// The header length is checked against the file's length before the header is
    /// read: a device, a pipe or a file whose header declares other sizes is refused
    /// without reading it.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        use std::io::Read;
        let path = path.as_ref();
        let bad = |why: String| Error::file(path, why);
        let mut f = open_regular(path, "a safetensors file is read by seeking to its tensors")?;
        let stat = f.metadata().map_err(|e| bad(format!("cannot read: {e}")))?;
        let (file_len, modified) = (stat.len(), stat.modified().ok());
        let mut len = [0u8; 8];
        f.read_exact(&mut len).map_err(|_| {
            bad(format!(
                "not a valid safetensors file: {file_len} bytes, fewer than its 8-byte \
                 header length"
            ))
        })?;
        let n = u64::from_le_bytes(len);
        // Saturating: the file may have grown past 8 bytes since its length was asked.
        let room = file_len.saturating_sub(8);
        if n > MAX_HEADER_BYTES || n > room {
            return Err(bad(format!(
                "not a valid safetensors file: its header length {n} exceeds {} bytes",
                room.min(MAX_HEADER_BYTES)
            )));
        }
        let mut header = crate::error::reserve(n as usize, "header length", n)
            .map_err(|e| bad(e.to_string()))?;
        (&mut f)
            .take(n)
            .read_to_end(&mut header)
            .map_err(|e| bad(format!("cannot read: {e}")))?;
        if header.len() as u64 != n {
            return Err(bad(format!(
                "cannot read: the file ends {} bytes into its {n}-byte header (it was \
                 truncated while it was opened)",
                header.len()
            )));
        }
        // A repeated key first: the crate keeps one of the copies, and the other's
        // offsets would be blamed instead.
        if let Some(key) = serde_json::from_slice::<RepeatedKey>(&header)
            .ok()
            .and_then(|r| r.0)
        {
            return Err(bad(format!(
                "not a valid safetensors file: header key `{key}` appears more than once"
            )));
        }
        let data_len = room - n;
        // The crate's own checks of a header (what `SafeTensors::read_metadata` checks of
        // it, short of the data): `Metadata`'s deserialization validates every tensor's
        // offsets (contiguous from 0, in order) and byte length (its dtype's size times
        // its shape, without overflow). The data length the header declares is then
        // checked against the file's, which is what `read_metadata` adds.
        let meta: Metadata = serde_json::from_slice(&header).map_err(|e| {
            let why = diagnose_header(&header, data_len).unwrap_or_else(|| e.to_string());
            bad(format!("not a valid safetensors file: header: {why}"))
        })?;
        if meta.data_len() as u64 != data_len {
            return Err(bad(format!(
                "not a valid safetensors file: its header declares {} data bytes, the file \
                 holds {data_len} after the header (truncated or padded)",
                meta.data_len()
            )));
        }
        Ok(SafetensorsFile {
            path: path.to_path_buf(),
            file: std::sync::Mutex::new(f),
            len: file_len,
            modified,
            data_start: 8 + n,
            meta,
            data_read: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// The path this file was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Tensor names in file (data offset) order.
    pub fn names(&self) -> Vec<String> {
        self.meta.offset_keys()
    }

    /// The string metadata (`__metadata__`), possibly empty.
    pub fn metadata(&self) -> HashMap<String, String> {
        self.meta.metadata().clone().unwrap_or_default()
    }

    /// One metadata value.
    pub fn metadata_value(&self, key: &str) -> Option<&str> {
        self.meta
            .metadata()
            .as_ref()
            .and_then(|m| m.get(key))
            .map(String::as_str)
    }

    /// A tensor's header entry (dtype, shape, data offsets), if present: nothing is read
    /// from the file.
    pub fn info(&self, name: &str) -> Option<&TensorInfo> {
        self.meta.info(name)
    }

    /// A tensor's header entry; a missing one is the error of [`Self::tensor`]. Nothing
    /// is read from the file.
    pub fn tensor_info(&self, name: &str) -> Result<&TensorInfo> {
        self.info(name).ok_or_else(|| {
            Error::file(
                &self.path,
                format!(
                    "no tensor `{name}` (the file holds: {})",
                    list_or_none(&self.names())
                ),
            )
        })
    }

    /// A tensor, if present, with its bytes read from the file (an error if they cannot
    /// be, see [`SafetensorsFile`]).
    pub fn get(&self, name: &str) -> Result<Option<TensorRef<'_>>> {
        self.info(name)
            .map(|info| self.read(name, info))
            .transpose()
    }

    /// A tensor with its bytes read from the file; a missing one is an [`Error::File`]
    /// that lists what the file holds.
    pub fn tensor(&self, name: &str) -> Result<TensorRef<'_>> {
        self.read(name, self.tensor_info(name)?)
    }

    /// Tensor `name` (whose header entry is `info`) with its bytes read from the file.
    fn read<'a>(&'a self, name: &str, info: &'a TensorInfo) -> Result<TensorRef<'a>> {
        use std::io::{Read, Seek, SeekFrom};
        let bad = |why: String| Error::file(&self.path, format!("tensor `{name}`: {why}"));
        // Checked at `open`: in order, and within the data of a file of `self.len` bytes.
        let (begin, end) = info.data_offsets;
        let len = end - begin;
        let at = self.data_start + begin as u64;
        let mut data =
            crate::error::reserve(len, format!("tensor `{name}`"), format!("{len} bytes"))
                .map_err(|e| Error::file(&self.path, e.to_string()))?;
        let mut file = self
            .file
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        file.seek(SeekFrom::Start(at))
            .map_err(|e| bad(format!("cannot read: {e}")))?;
        (&mut *file)
            .take(len as u64)
            .read_to_end(&mut data)
            .map_err(|e| bad(format!("cannot read: {e}")))?;
        self.data_read
            .fetch_add(data.len() as u64, std::sync::atomic::Ordering::Relaxed);
        if data.len() != len {
            return Err(bad(format!(
                "cannot read its {len} bytes at byte {at} of the file: the file ends {} bytes \
                 into them (it was truncated after it was opened)",
                data.len()
            )));
        }
        let now = file
            .metadata()
            .map_err(|e| bad(format!("cannot read: {e}")))?;
        if now.len() != self.len {
            return Err(bad(format!(
                "the file changed after it was opened: {} bytes then, {} now",
                self.len,
                now.len()
            )));
        }
        if now.modified().ok() != self.modified {
            return Err(bad(
                "the file changed after it was opened: it was modified since".to_string(),
            ));
        }
        Ok(TensorRef {
            name: name.to_string(),
            dtype: info.dtype,
            shape: &info.shape,
            data: Cow::Owned(data),
        })
    }

    /// `f`'s result, its error naming this file ([`Error::in_file`]).
    fn in_file<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        f().map_err(|e| e.in_file(&self.path))
    }

    /// Data bytes read from the file since it was opened.
    #[cfg(test)]
    fn data_read(&self) -> u64 {
        self.data_read.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The quantized matrix stored under `prefix`, checked against its metadata: first
    /// by the header ([`Self::quantized_layout`]), then its tensors are read and their
    /// values checked ([`QuantizedMatrix::new`]).
    pub fn quantized(&self, prefix: &str) -> Result<QuantizedMatrix> {
        self.in_file(|| {
            let (geometry, scale_dtype) = self.quantized_layout(prefix)?;
            let codes = self.tensor(&codes_name(prefix))?.to_u32()?;
            let scales = self.tensor(&scales_name(prefix))?.to_f32()?;
            let lut = match geometry.code {
                Code::Lut => Some(self.tensor(&lut_name(prefix))?.to_f32()?),
                // A stray table next to a computed code is not part of the matrix.
                _ => None,
            };
            QuantizedMatrix::new(geometry, codes, scales, scale_dtype, lut)
        })
    }

    /// The geometry and scale dtype of the quantized matrix stored under `prefix`, checked
    /// as [`Self::quantized`] checks it except for its code words, which are not read:
    /// [`Self::quantized_layout`], then the scales and the table read and checked
    /// ([`QuantizedMatrix::check_scales_and_lut`]). Reads `rows` scales (and `2^L`
    /// table values), not the matrix.
    pub fn quantized_checked_layout(&self, prefix: &str) -> Result<(Geometry, ScaleDType)> {
        self.in_file(|| {
            let (geometry, scale_dtype) = self.quantized_layout(prefix)?;
            let scales = self.tensor(&scales_name(prefix))?.to_f32()?;
            let lut = match geometry.code {
                Code::Lut => Some(self.tensor(&lut_name(prefix))?.to_f32()?),
                _ => None,
            };
            QuantizedMatrix::check_scales_and_lut(&geometry, &scales, scale_dtype, lut.as_deref())?;
            Ok((geometry, scale_dtype))
        })
    }

    /// The geometry and scale dtype of the quantized matrix stored under `prefix`, from
    /// the header only (nothing is read from the file): its `<prefix>.trellis` metadata,
    /// and each of its tensors present with the dtype and shape the geometry gives. The
    /// values (finite scales, the table's) are checked only when the matrix is read,
    /// by [`Self::quantized`].
    pub fn quantized_layout(&self, prefix: &str) -> Result<(Geometry, ScaleDType)> {
        self.in_file(|| {
            let key = metadata_key(prefix);
            let meta = self.metadata_value(&key).ok_or_else(|| {
                let found = self.quantized_prefixes();
                Error::file(
                    &self.path,
                    format!(
                        "no metadata `{key}` describing a quantized matrix with prefix `{prefix}` \
                         (prefixes in the file: {})",
                        list_or_none(&found)
                    ),
                )
            })?;
            let geometry = parse_geometry(&key, meta)?;

            let name = codes_name(prefix);
            let codes = self.tensor_info(&name)?;
            if codes.dtype != Dtype::U32 {
                return Err(wrong_dtype(&name, codes.dtype, "u32"));
            }
            expect_shape(&name, &codes.shape, &geometry.codes_shape())?;

            let name = scales_name(prefix);
            let scales = self.tensor_info(&name)?;
            let scale_dtype = match scales.dtype {
                Dtype::F16 => ScaleDType::F16,
                Dtype::F32 => ScaleDType::F32,
                _ => return Err(wrong_dtype(&name, scales.dtype, "f16 or f32")),
            };
            expect_shape(&name, &scales.shape, &[geometry.rows])?;

            if geometry.code == Code::Lut {
                let name = lut_name(prefix);
                let lut = self.tensor_info(&name)?;
                if lut.dtype != Dtype::F32 {
                    return Err(wrong_dtype(&name, lut.dtype, "f32"));
                }
                let n: usize = lut.shape.iter().product();
                if lut.shape.len() != 1 || n != geometry.states() {
                    return Err(Error::invalid(
                        format!("{name} shape"),
                        format!("{:?}", lut.shape),
                        format!(
                            "must be [2^L] = [{}] for L = {}",
                            geometry.states(),
                            geometry.l
                        ),
                    ));
                }
            }
            Ok((geometry, scale_dtype))
        })
    }

    /// Prefixes of every `<prefix>.trellis` metadata key, sorted.
    pub fn quantized_prefixes(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .metadata()
            .into_keys()
            .filter_map(|k| k.strip_suffix(METADATA_SUFFIX).map(str::to_string))
            .collect();
        v.sort();
        v
    }

    /// Activations `[M, C]` in bf16, f16 or f32 (dtype and shape checked before the
    /// data is read).
    pub fn activations(&self, name: &str) -> Result<Activations> {
        self.in_file(|| {
            let info = self.tensor_info(name)?;
            let dtype = from_st_dtype(info.dtype)
                .ok_or_else(|| wrong_dtype(name, info.dtype, "bf16, f16 or f32"))?;
            let (rows, cols) = matrix_shape(name, &info.shape)?;
            let t = self.read(name, info)?;
            Ok(Activations {
                dtype,
                rows,
                cols,
                data: dtype.try_decode(&t.data, &format!("tensor `{name}`"))?,
            })
        })
    }

    /// A dense matrix `[rows, cols]` in bf16, f16 or f32, as exact f32 values (dtype and
    /// shape checked before the data is read).
    pub fn dense(&self, name: &str) -> Result<(Vec<f32>, usize, usize)> {
        self.in_file(|| {
            let info = self.tensor_info(name)?;
            if from_st_dtype(info.dtype).is_none() {
                return Err(wrong_dtype(name, info.dtype, "bf16, f16 or f32"));
            }
            let (rows, cols) = matrix_shape(name, &info.shape)?;
            let data = self.read(name, info)?.to_f32()?;
            Ok((data, rows, cols))
        })
    }
}

/// `names` for an error line: "none", or the first 8 and how many more (a file may hold
/// hundreds of thousands).
fn list_or_none(names: &[String]) -> String {
    const SHOWN: usize = 8;
    match names.len() {
        0 => "none".to_string(),
        n if n <= SHOWN => names.join(", "),
        n => format!("{}, and {} more", names[..SHOWN].join(", "), n - SHOWN),
    }
}

/// Parse `<key>` = `code=..;k=..;...`; errors name the key and the field.
fn parse_geometry(key: &str, value: &str) -> Result<Geometry> {
    Geometry::from_metadata(value).map_err(|e| match e {
        Error::Invalid {
            field,
            value,
            reason,
        } => Error::Invalid {
            field: if field == "trellis metadata" {
                key.to_string()
            } else {
                format!("{key} {field}")
            },
            value,
            reason,
        },
        other => other,
    })
}

/// Read the quantized matrix stored under `prefix` (SPEC section 8).
pub fn read_quantized(path: &Path, prefix: &str) -> Result<QuantizedMatrix> {
    SafetensorsFile::open(path)?.quantized(prefix)
}

/// Every quantized matrix in a file: `(prefix, geometry)` from the metadata keys ending
/// in `.trellis`, sorted by prefix. Only the file's header is read (the whole header is
/// validated, see [`SafetensorsFile::open`]); of the matrices only the metadata is
/// checked, not their tensors.
pub fn list_quantized(path: &Path) -> Result<Vec<(String, Geometry)>> {
    let f = SafetensorsFile::open(path)?;
    f.in_file(|| {
        f.quantized_prefixes()
            .into_iter()
            .map(|p| {
                let key = metadata_key(&p);
                let g = parse_geometry(&key, f.metadata_value(&key).unwrap_or_default())?;
                Ok((p, g))
            })
            .collect()
    })
}

/// Read activations `name` (`[M, C]`, bf16/f16/f32).
pub fn read_activations(path: &Path, name: &str) -> Result<Activations> {
    SafetensorsFile::open(path)?.activations(name)
}

/// Read a dense matrix `name` (`[rows, cols]`, bf16/f16/f32) as `(values, rows, cols)`.
pub fn read_dense(path: &Path, name: &str) -> Result<(Vec<f32>, usize, usize)> {
    SafetensorsFile::open(path)?.dense(name)
}

/// Read a value table for code `lut` from a file of its own: the f32 tensor named `lut`,
/// or else the first f32 tensor in file order. Returns the tensor's name and values;
/// the table must be one-dimensional (its length is checked against `2^L` by the caller).
pub fn read_lut_file(path: &Path) -> Result<(String, Vec<f32>)> {
    let f = SafetensorsFile::open(path)?;
    let name = if f.info("lut").is_some() {
        "lut".to_string()
    } else {
        f.names()
            .into_iter()
            .find(|n| f.info(n).is_some_and(|t| t.dtype == Dtype::F32))
            .ok_or_else(|| {
                Error::file(
                    path,
                    format!(
                        "no f32 tensor to use as a lut (the file holds: {})",
                        list_or_none(&f.names())
                    ),
                )
            })?
    };
    f.in_file(|| {
        let info = f.tensor_info(&name)?;
        if info.dtype != Dtype::F32 {
            return Err(wrong_dtype(&name, info.dtype, "f32"));
        }
        if info.shape.len() != 1 {
            return Err(Error::Shape {
                name: name.clone(),
                actual: info.shape.to_vec(),
                expected: vec![info.shape.iter().product()],
            });
        }
        let values = f.tensor(&name)?.to_f32()?;
        Ok((name, values))
    })
}

/// Write one quantized matrix under `prefix` (atomically).
pub fn write_quantized(path: &Path, prefix: &str, w: &QuantizedMatrix) -> Result<()> {
    let mut out = Writer::new();
    out.quantized(prefix, w);
    out.write(path)
}

/// Write activations (or outputs `y`, `mid`) as tensor `name` (atomically).
pub fn write_activations(path: &Path, name: &str, a: &Activations) -> Result<()> {
    let mut out = Writer::new();
    out.activations(name, a);
    out.write(path)
}

/// Collects tensors and metadata for one file, then writes it atomically.
#[derive(Default, Debug)]
pub struct Writer {
    tensors: Vec<OwnedTensor>,
    metadata: HashMap<String, String>,
    /// The first tensor whose bytes could not be had: [`Writer::write`] returns it.
    error: Option<Error>,
}

#[derive(Debug)]
struct OwnedTensor {
    name: String,
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl View for &OwnedTensor {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

impl Writer {
    /// An empty file.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add raw little-endian bytes as tensor `name`.
    pub fn raw(
        &mut self,
        name: impl Into<String>,
        dtype: Dtype,
        shape: Vec<usize>,
        data: Vec<u8>,
    ) -> &mut Self {
        self.tensors.push(OwnedTensor {
            name: name.into(),
            dtype,
            shape,
            data,
        });
        self
    }

    /// Add a tensor of `bytes`, or keep their error for [`Writer::write`] (a huge tensor's
    /// bytes that cannot be had are an error, not an allocation abort).
    fn add(&mut self, name: String, dtype: Dtype, shape: Vec<usize>, bytes: Result<Vec<u8>>) {
        match bytes {
            Ok(data) => {
                self.raw(name, dtype, shape, data);
            }
            Err(e) => {
                self.error.get_or_insert(e);
            }
        }
    }

    /// Add f32 values as a tensor of `dtype`.
    fn floats(&mut self, name: String, dtype: DType, shape: Vec<usize>, data: &[f32]) {
        let bytes = dtype.try_encode(data, &format!("tensor `{name}`"));
        self.add(name, to_st_dtype(dtype), shape, bytes);
    }

    /// Add an f32 tensor.
    pub fn f32(&mut self, name: impl Into<String>, shape: Vec<usize>, data: &[f32]) -> &mut Self {
        self.floats(name.into(), DType::F32, shape, data);
        self
    }

    /// Add a u32 tensor.
    pub fn u32(&mut self, name: impl Into<String>, shape: Vec<usize>, data: &[u32]) -> &mut Self {
        let name = name.into();
        let bytes = crate::error::collect_reserved(
            data.len() * 4,
            data.iter().flat_map(|v| v.to_le_bytes()),
            format!("tensor `{name}`"),
            format!("{} words", data.len()),
        );
        self.add(name, Dtype::U32, shape, bytes);
        self
    }

    /// Add a metadata entry.
    pub fn metadata(&mut self, key: impl Into<String>, value: impl Into<String>) -> &mut Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    /// Add a quantized matrix: `<prefix>.codes`, `<prefix>.scales`, `<prefix>.lut`
    /// (code `lut`) and the `<prefix>.trellis` metadata.
    pub fn quantized(&mut self, prefix: &str, w: &QuantizedMatrix) -> &mut Self {
        // Its fields are public: a matrix that would not read back is not written.
        if let Err(e) = w.validate() {
            self.error.get_or_insert(Error::invalid(
                format!("matrix `{prefix}`"),
                "not written",
                e.to_string(),
            ));
            return self;
        }
        let g = &w.geometry;
        self.u32(codes_name(prefix), g.codes_shape().to_vec(), &w.codes);
        let dtype = match w.scale_dtype {
            ScaleDType::F16 => DType::F16,
            ScaleDType::F32 => DType::F32,
        };
        self.floats(scales_name(prefix), dtype, vec![g.rows], &w.scales);
        if let Some(lut) = &w.lut {
            self.f32(lut_name(prefix), vec![lut.len()], lut);
        }
        self.metadata(metadata_key(prefix), g.to_metadata())
    }

    /// Add activations `[M, C]` in their dtype.
    pub fn activations(&mut self, name: impl Into<String>, a: &Activations) -> &mut Self {
        let name = name.into();
        // Its fields are public: a value that is none of its dtype's would be rounded
        // silently (an infinity or a NaN, as an output may hold, is written as it is).
        let foreign = |v: &f32| !a.dtype.holds(*v);
        if let Some(i) = a.data.iter().position(foreign) {
            self.error.get_or_insert(Error::invalid(
                format!(
                    "tensor `{name}` [{}, {}]",
                    i / a.cols.max(1),
                    i % a.cols.max(1)
                ),
                a.data[i],
                format!("is no {} value", a.dtype),
            ));
            return self;
        }
        self.floats(name, a.dtype, vec![a.rows, a.cols], &a.data);
        self
    }

    /// Serialize and write atomically: a temporary file in the destination's directory,
    /// flushed, then renamed over `path`. On any failure the temporary file is removed and
    /// `path` is left as it was.
    pub fn write(&self, path: &Path) -> Result<()> {
        if let Some(e) = &self.error {
            return Err(Error::file(path, format!("cannot write: {e}")));
        }
        let mut seen = std::collections::HashSet::new();
        for t in &self.tensors {
            if tensor_bits(t.dtype, &t.shape).map(|b| b.div_ceil(8)) != Some(t.data.len()) {
                return Err(Error::invalid(
                    format!("tensor `{}` shape", t.name),
                    format!("{:?}", t.shape),
                    format!("does not hold its {} bytes of {:?}", t.data.len(), t.dtype),
                ));
            }
            if t.name == "__metadata__" {
                return Err(Error::invalid(
                    "tensor name",
                    &t.name,
                    "reserved for the safetensors header's metadata",
                ));
            }
            if !seen.insert(t.name.as_str()) {
                return Err(Error::invalid(
                    "tensor name",
                    &t.name,
                    "added twice to one file",
                ));
            }
        }
        let metadata = (!self.metadata.is_empty()).then(|| self.metadata.clone());
        // Streamed to the file: serializing to memory first would copy every tensor again.
        write_atomic_with(path, |tmp| {
            safetensors::serialize_to_file(self.tensors.iter().map(|t| (&t.name, t)), metadata, tmp)
                .map_err(|e| e.to_string())
        })
    }
}

/// Write `bytes` to `path` through a temporary sibling file and a rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic_with(path, |tmp| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(tmp)
            .map_err(|e| e.to_string())?;
        f.write_all(bytes).map_err(|e| e.to_string())
    })
}

/// Whether `path` may be written as an output, asked before any work that would be lost:
/// its directory exists, and an existing `path` is a regular file (a rename would replace
/// a device or a pipe with a file) that is not read-only. The existing file's
/// permissions, which the new one takes.
pub fn check_output(path: &Path) -> Result<Option<std::fs::Permissions>> {
    // `out.st/` and `out.st/.` name a directory (their file name reads `out.st`, and
    // the write failed only after the work); `.` and `..` name no file.
    let text = path.as_os_str().as_encoded_bytes();
    let sep = |b: &u8| std::path::is_separator(*b as char);
    let trailing = text.last().is_some_and(sep)
        || (text.ends_with(b".") && (text.len() == 1 || sep(&text[text.len() - 2])));
    if trailing || path.file_name().is_none() {
        return Err(Error::file(path, "names a directory, not a file"));
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(Error::file(path, "its directory does not exist"));
    }
    match std::fs::metadata(path) {
        Ok(kind) => match not_regular(&kind) {
            Some(what) => Err(Error::file(
                path,
                format!("not a regular file ({what}); outputs replace files only"),
            )),
            None if kind.permissions().readonly() => {
                Err(Error::file(path, "the file is read-only"))
            }
            None => Ok(Some(kind.permissions())),
        },
        Err(_) => Ok(None),
    }
}

/// Have `fill` write a temporary sibling file of `path`, flush it and rename it over
/// `path`; on any failure the temporary file is removed and `path` is left as it was.
/// An existing `path` must be a regular file (a rename would replace a device or a pipe
/// with a file) that is not read-only; a symlink's target is replaced, not the link; the
/// new file gets the old one's permissions, and a new one those this process gives a file
/// it creates (the umask's), not the temporary file's 0600.
fn write_atomic_with(
    path: &Path,
    fill: impl FnOnce(&Path) -> std::result::Result<(), String>,
) -> Result<()> {
    let existing = check_output(path).map_err(|e| match e {
        Error::File { path, reason } => Error::file(path, format!("cannot write: {reason}")),
        e => e,
    })?;
    // A symlink's target is what is replaced, not the link.
    let resolved = match existing {
        Some(_) => std::fs::canonicalize(path)
            .map_err(|e| Error::file(path, format!("cannot write: {e}")))?,
        None => path.to_path_buf(),
    };
    let path = resolved.as_path();
    let file_name = path
        .file_name()
        .ok_or_else(|| Error::file(path, "output path has no file name"))?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(
        ".{}.{}.{n}.tmp",
        file_name.to_string_lossy(),
        std::process::id()
    ));
    // The permissions a file created here gets: a file made and removed at the temporary
    // name (which `fill` then creates again, 0600 where it uses a temporary-file crate).
    let permissions = match existing {
        Some(p) => p,
        None => std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .and_then(|f| f.metadata())
            .map(|m| m.permissions())
            .and_then(|p| std::fs::remove_file(&tmp).map(|()| p))
            .map_err(|e| Error::file(path, format!("cannot write: {e}")))?,
    };
    let result = fill(&tmp).and_then(|()| {
        std::fs::set_permissions(&tmp, permissions)
            .and_then(|()| std::fs::File::open(&tmp))
            .and_then(|f| f.sync_all())
            .and_then(|()| std::fs::rename(&tmp, path))
            .map_err(|e| e.to_string())
    });
    result.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        Error::file(path, format!("cannot write: {e}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matrix(code: Code) -> QuantizedMatrix {
        let g = Geometry::new(3, 64, 32, 2, 6, code).unwrap();
        let codes = (0..g.codes_shape().iter().product::<usize>() as u32)
            .map(|i| i.wrapping_mul(0x9E37_79B9))
            .collect();
        let lut = (code == Code::Lut).then(|| (0..64).map(|i| i as f32 / 64.0).collect());
        QuantizedMatrix::new(g, codes, vec![0.5, 0.25, 0.125], ScaleDType::F16, lut).unwrap()
    }

    #[test]
    fn quantized_and_activations_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.safetensors");
        for code in [Code::Mcg, Code::Lut] {
            let w = matrix(code);
            let x = Activations::from_f32(DType::Bf16, 2, 64, (0..128).map(|i| i as f32).collect())
                .unwrap();
            let mut out = Writer::new();
            out.quantized("gate", &w).activations("x", &x);
            out.write(&path).unwrap();
            assert_eq!(read_quantized(&path, "gate").unwrap(), w);
            assert!(read_activations(&path, "x").unwrap().bits_eq(&x));
            let listed = list_quantized(&path).unwrap();
            assert_eq!(listed, vec![("gate".to_string(), w.geometry)]);
        }
        // No temporary file is left beside the output.
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1);
    }

    /// Every cut of a valid file, and bytes that are no file at all, are errors that name
    /// the path (never a panic or a partial matrix).
    #[test]
    fn truncated_and_malformed_files_are_errors_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.safetensors");
        write_quantized(&path, "w", &matrix(Code::OneMad)).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let cut = dir.path().join("cut.safetensors");
        for len in (0..bytes.len()).step_by(7) {
            std::fs::write(&cut, &bytes[..len]).unwrap();
            let e = read_quantized(&cut, "w").unwrap_err().to_string();
            assert!(e.contains("cut.safetensors"), "{len} bytes: {e}");
        }
        std::fs::write(
            &cut,
            b"\xff\xff\xff\xff\xff\xff\xff\x7fnot a safetensors file",
        )
        .unwrap();
        let e = read_quantized(&cut, "w").unwrap_err().to_string();
        assert!(e.contains("cut.safetensors"), "{e}");
    }

    /// A file whose header declares other sizes than it holds, a repeated header key and
    /// a path that is no regular file are refused, each by what is wrong.
    #[test]
    fn padded_repeated_and_irregular_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.safetensors");
        write_quantized(&path, "w", &matrix(Code::OneMad)).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let bad = dir.path().join("bad.safetensors");
        let open_err = |b: &[u8]| {
            std::fs::write(&bad, b).unwrap();
            SafetensorsFile::open(&bad).unwrap_err().to_string()
        };

        // The data bytes the header declares, and what the file holds after it.
        let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let data_len = bytes.len() - 8 - n;
        let mut padded = bytes.clone();
        padded.extend_from_slice(&[0; 5]);
        let e = open_err(&padded);
        assert!(
            e.contains("bad.safetensors")
                && e.contains(&format!("declares {data_len} data bytes"))
                && e.contains(&format!("holds {} after the header", data_len + 5)),
            "{e}"
        );

        // A header length beyond the file, and beyond the crate's header limit, named
        // with its value and the limit.
        let mut long = bytes.clone();
        long[..8].copy_from_slice(&(bytes.len() as u64).to_le_bytes());
        let e = open_err(&long);
        assert!(
            e.contains("bad.safetensors")
                && e.contains(&format!(
                    "header length {} exceeds {} bytes",
                    bytes.len(),
                    bytes.len() - 8
                )),
            "{e}"
        );
        long[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        let e = open_err(&long);
        assert!(
            e.contains(&format!("header length {} exceeds", u64::MAX)),
            "{e}"
        );

        // Repeated keys, at the top level and in __metadata__, spaces kept so the
        // offsets stay right.
        let header = std::str::from_utf8(&bytes[8..8 + n]).unwrap();
        let with = |h: String| {
            let mut b = (h.len() as u64).to_le_bytes().to_vec();
            b.extend_from_slice(h.as_bytes());
            b.extend_from_slice(&bytes[8 + n..]);
            b
        };
        let meta_dup = header.replacen(
            "\"__metadata__\":{",
            "\"__metadata__\":{\"a\":\"1\",\"a\":\"2\",",
            1,
        );
        assert_ne!(meta_dup, header);
        let e = open_err(&with(meta_dup));
        assert!(
            e.contains("`__metadata__.a`") && e.contains("more than once"),
            "{e}"
        );
        let at = header.find("\"w.scales\":").unwrap();
        let entry = &header[at..at + header[at..].find('}').unwrap() + 1];
        let top = header.trim_end().strip_suffix('}').unwrap();
        let e = open_err(&with(format!("{top},{entry}}}")));
        assert!(
            e.contains("`w.scales`") && e.contains("more than once"),
            "{e}"
        );
        // A second copy with other offsets and dtype is still a repeated key, not a
        // wrong offset of one of them.
        let e = open_err(&with(format!(
            "{top},{}}}",
            entry.replace("\"w.scales\"", "\"w.codes\"")
        )));
        assert!(
            e.contains("`w.codes`") && e.contains("more than once"),
            "{e}"
        );

        // Each tensor entry's fault, named with its tensor.
        let edit = |f: &dyn Fn(&mut serde_json::Value)| {
            let mut h: serde_json::Value = serde_json::from_str(header).unwrap();
            f(&mut h);
            open_err(&with(h.to_string()))
        };
        let offsets = |h: &serde_json::Value, name: &str| {
            [0, 1].map(|i| h[name]["data_offsets"][i].as_u64().unwrap())
        };
        let parsed: serde_json::Value = serde_json::from_str(header).unwrap();
        let [sa, sb] = offsets(&parsed, "w.scales");
        let [ca, cb] = offsets(&parsed, "w.codes");
        // The writer puts the codes first, then the scales, each where the last ended.
        assert_eq!((ca, cb, sa, sb as usize), (0, sa, 48, data_len), "{header}");
        type Change = dyn Fn(&mut serde_json::Value);
        let cases: [(&Change, Vec<String>); 9] = [
            // The header's shape and `__metadata__`'s, named (the crate's own messages
            // name a serde type and a column).
            (
                &|h| *h = serde_json::json!([1, 2, 3]),
                vec!["the header is an array of 3 items, not a JSON object".into()],
            ),
            (
                &|h| h["__metadata__"] = serde_json::json!(5),
                vec!["`__metadata__` is a number, 5, not an object of strings".into()],
            ),
            (
                &|h| h["__metadata__"]["w.trellis"] = serde_json::json!({"k": 2}),
                vec!["`__metadata__` field `w.trellis` is an object, not a string".into()],
            ),
            (
                &|h| h["w.scales"]["data_offsets"] = serde_json::json!([8192, 8198]),
                vec![
                    "`w.scales`".into(),
                    "data_offsets [8192, 8198]".into(),
                    format!("end past the {data_len} data bytes"),
                ],
            ),
            (
                &|h| h["w.scales"]["dtype"] = "F4".into(),
                vec![
                    "`w.scales`".into(),
                    "hold 6 bytes".into(),
                    "F4".into(),
                    "need 12 bits".into(),
                ],
            ),
            (
                &|h| h["w.codes"]["shape"] = serde_json::json!([1u64 << 33, 0, 1u64 << 33]),
                vec![
                    "`w.codes`".into(),
                    "hold 48 bytes".into(),
                    "need 0 bytes".into(),
                ],
            ),
            (
                &move |h| h["w.scales"]["data_offsets"] = serde_json::json!([sb, sa]),
                vec![
                    "`w.scales`".into(),
                    format!("data_offsets [{sb}, {sa}] end before they begin"),
                ],
            ),
            (
                &|h| h["w.scales"]["dtype"] = "Q7".into(),
                vec!["`w.scales`".into(), "Q7".into()],
            ),
            // The scales' bytes over the codes' first ones: sizes right, data not
            // contiguous.
            (
                &|h| h["w.scales"]["data_offsets"] = serde_json::json!([0, 6]),
                vec![
                    "`w.codes`".into(),
                    "begins at byte 0 of the data, where the tensors before it end at 6".into(),
                ],
            ),
        ];
        for (change, needles) in cases {
            let e = edit(change);
            for n in needles {
                assert!(e.contains(&n), "{n}: {e}");
            }
        }

        let e = SafetensorsFile::open(dir.path()).unwrap_err().to_string();
        assert!(
            e.starts_with(&dir.path().display().to_string())
                && e.contains("not a regular file (a directory)"),
            "{e}"
        );
        #[cfg(unix)]
        {
            let e = SafetensorsFile::open("/dev/zero").unwrap_err().to_string();
            assert!(
                e.starts_with("/dev/zero: not a regular file (a device, pipe or socket)"),
                "{e}"
            );
        }
    }

    /// `src` (a valid file) written to `dst` with a tensor `big` of `big` u8 bytes before
    /// its data: a hole in a sparse file, which costs no disk.
    fn with_big_hole(src: &Path, dst: &Path, big: u64) {
        use std::io::{Seek, SeekFrom};
        let bytes = std::fs::read(src).unwrap();
        let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let mut header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
        for (name, t) in header.as_object_mut().unwrap() {
            if name != "__metadata__" {
                for i in 0..2 {
                    let at = t["data_offsets"][i].as_u64().unwrap();
                    t["data_offsets"][i] = (at + big).into();
                }
            }
        }
        header["big"] =
            serde_json::json!({"dtype": "U8", "shape": [big], "data_offsets": [0, big]});
        let header = header.to_string();
        let mut f = std::fs::File::create(dst).unwrap();
        f.write_all(&(header.len() as u64).to_le_bytes()).unwrap();
        f.write_all(header.as_bytes()).unwrap();
        f.seek(SeekFrom::Current(big as i64)).unwrap();
        f.write_all(&bytes[8 + n..]).unwrap();
    }

    /// A file of 8 GiB (sparse) whose other tensors are a few hundred bytes: listed from
    /// its header alone, and one matrix or one tensor read by reading its bytes alone.
    #[cfg(target_pointer_width = "64")]
    #[test]
    fn a_large_file_is_listed_from_its_header_and_read_by_the_tensors_used() {
        let dir = tempfile::tempdir().unwrap();
        let (small, path) = (dir.path().join("small"), dir.path().join("big.safetensors"));
        let w = matrix(Code::Lut);
        let x =
            Activations::from_f32(DType::F16, 2, 64, (0..128).map(|i| i as f32).collect()).unwrap();
        let mut out = Writer::new();
        out.quantized("w", &w).activations("x", &x);
        out.write(&small).unwrap();
        let big = 8u64 << 30;
        with_big_hole(&small, &path, big);
        let file_len = std::fs::metadata(&path).unwrap().len();
        assert!(file_len > big, "{file_len}");

        let f = SafetensorsFile::open(&path).unwrap();
        assert_eq!(f.data_read(), 0);
        assert_eq!(f.info("big").unwrap().shape, vec![big as usize]);
        assert_eq!(f.names()[0], "big");
        assert_eq!(f.quantized_prefixes(), vec!["w".to_string()]);
        assert_eq!(
            f.quantized_layout("w").unwrap(),
            (w.geometry, ScaleDType::F16)
        );
        assert_eq!(f.data_read(), 0, "listing reads the header only");
        assert_eq!(
            list_quantized(&path).unwrap(),
            vec![("w".to_string(), w.geometry)]
        );

        // The matrix: its three tensors' bytes, no more.
        let used: u64 = ["w.codes", "w.scales", "w.lut"]
            .map(|n| {
                let (b, e) = f.info(n).unwrap().data_offsets;
                (e - b) as u64
            })
            .iter()
            .sum();
        assert_eq!(used, (w.codes.len() * 4 + 3 * 2 + 64 * 4) as u64);
        assert_eq!(f.quantized("w").unwrap(), w);
        assert_eq!(f.data_read(), used);
        assert!(f.activations("x").unwrap().bits_eq(&x));
        assert_eq!(f.data_read(), used + 128 * 2);
        // Through the path-taking readers too.
        assert_eq!(read_quantized(&path, "w").unwrap(), w);
        assert!(read_activations(&path, "x").unwrap().bits_eq(&x));
    }

    /// A file that shrank or changed after it was opened is an error naming the file and
    /// the tensor read, never other data; one replaced by a rename is read as opened.
    #[test]
    fn a_file_changed_after_open_is_an_error_naming_the_tensor() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.safetensors");
        let w = matrix(Code::OneMad);
        write_quantized(&path, "w", &w).unwrap();
        let full = std::fs::metadata(&path).unwrap().len();
        let f = SafetensorsFile::open(&path).unwrap();
        let (sb, se) = f.info("w.scales").unwrap().data_offsets;
        assert_eq!(se, sb + 6);
        let scales_at = f.data_start + sb as u64;
        // Cut 3 bytes into the scales.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(scales_at + 3)
            .unwrap();
        let e = f.tensor("w.scales").unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("{}: tensor `w.scales`", path.display()))
                && e.contains(&format!(
                    "cannot read its 6 bytes at byte {scales_at} of the file: the file ends 3 \
                     bytes into them (it was truncated after it was opened)"
                )),
            "{e}"
        );
        // The codes are all there, but the file is no longer the one opened.
        let e = f.quantized("w").unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("{}: tensor `w.codes`", path.display()))
                && e.contains(&format!(
                    "the file changed after it was opened: {full} bytes then, {} now",
                    scales_at + 3
                )),
            "{e}"
        );

        // Rewritten in place, at its length: its modification time tells (set here, as
        // a write may land within the file system's timestamp granularity).
        write_quantized(&path, "w", &w).unwrap();
        let f = SafetensorsFile::open(&path).unwrap();
        assert_eq!(f.quantized("w").unwrap(), w);
        let g = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        g.set_modified(std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1 << 20))
            .unwrap();
        let e = f.tensor("w.codes").unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("{}: tensor `w.codes`", path.display()))
                && e.contains("the file changed after it was opened: it was modified since"),
            "{e}"
        );

        // Replaced by a rename (as the writer replaces a file): the open file is read.
        let f = SafetensorsFile::open(&path).unwrap();
        write_quantized(&path, "w", &matrix(Code::Mcg)).unwrap();
        assert_eq!(f.quantized("w").unwrap(), w);
        assert_eq!(read_quantized(&path, "w").unwrap(), matrix(Code::Mcg));
    }

    /// An output replaces a symlink's target, not the link; a read-only file is refused
    /// and left as it was.
    #[cfg(unix)]
    #[test]
    fn outputs_follow_symlinks_and_leave_read_only_files() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let (target, link) = (dir.path().join("target.txt"), dir.path().join("link.txt"));
        std::fs::write(&target, b"old").unwrap();
        std::os::unix::fs::symlink(&target, &link).unwrap();
        write_atomic(&link, b"new").unwrap();
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o444)).unwrap();
        let e = write_atomic(&link, b"newer").unwrap_err().to_string();
        assert!(
            e.contains(&format!(
                "{}: cannot write: the file is read-only",
                link.display()
            )),
            "{e}"
        );
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
    }

    /// A file of many tensors: the error lists the first few and counts the rest.
    #[test]
    fn a_missing_tensor_among_many_lists_a_few() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("many.safetensors");
        let mut out = Writer::new();
        for i in 0..20 {
            out.f32(format!("t{i:02}"), vec![1], &[0.0]);
        }
        out.write(&path).unwrap();
        let e = SafetensorsFile::open(&path)
            .unwrap()
            .tensor("nope")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("t00") && e.contains("and 12 more") && !e.contains("t19"),
            "{e}"
        );
    }

    #[test]
    fn missing_tensor_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.safetensors");
        write_quantized(&path, "w", &matrix(Code::OneMad)).unwrap();
        let f = SafetensorsFile::open(&path).unwrap();
        assert_eq!(f.tensor("w.codes").unwrap().name, "w.codes");
        assert!(f
            .tensor("w.nope")
            .unwrap_err()
            .to_string()
            .contains("w.nope"));
    }

    #[test]
    fn reserved_and_repeated_names_are_errors_and_leave_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.safetensors");
        let x = Activations::from_f32(DType::F32, 1, 4, vec![1.0; 4]).unwrap();
        let mut out = Writer::new();
        out.activations("__metadata__", &x);
        let e = out.write(&path).unwrap_err().to_string();
        assert!(e.contains("__metadata__") && e.contains("reserved"), "{e}");
        let mut out = Writer::new();
        out.activations("x", &x).activations("x", &x);
        let e = out.write(&path).unwrap_err().to_string();
        assert!(e.contains("twice"), "{e}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    /// A byte of a header edit: digits (shapes, offsets, geometry), the JSON punctuation
    /// and a few letters (dtypes, code names).
    fn header_byte() -> impl proptest::strategy::Strategy<Value = u8> {
        proptest::sample::select(b"0123456789\"{}[],:-.eEFUIa ".to_vec())
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(192))]

        /// A file of a matrix and activations, with a few bytes edited in place (in its
        /// header, so the framing holds and the JSON may still parse with other numbers or
        /// names, or in its data): every reader returns what it read or an error naming
        /// the file, never a panic; and what it read multiplies through the reference
        /// (so no edit gets past the readers' checks into an out-of-bounds access).
        #[test]
        fn edited_files_read_or_fail_by_name(
            code in proptest::sample::select(Code::ALL.to_vec()),
            header_edits in proptest::collection::vec(
                (proptest::prelude::any::<proptest::sample::Index>(), header_byte()), 0..3),
            data_edits in proptest::collection::vec(
                (proptest::prelude::any::<proptest::sample::Index>(), proptest::prelude::any::<u8>()), 0..3),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("edited.safetensors");
            let x = Activations::from_f32(DType::Bf16, 2, 64, (0..128).map(|i| i as f32 / 8.0).collect())
                .unwrap();
            let mut out = Writer::new();
            out.quantized("w", &matrix(code)).activations("x", &x);
            out.write(&path).unwrap();
            let mut bytes = std::fs::read(&path).unwrap();
            let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
            for (at, b) in &header_edits {
                bytes[8 + at.index(n)] = *b;
            }
            let data = bytes.len() - 8 - n;
            for (at, b) in &data_edits {
                bytes[8 + n + at.index(data)] = *b;
            }
            std::fs::write(&path, &bytes).unwrap();

            let named = |e: Error| {
                let e = e.to_string();
                proptest::prop_assert!(e.contains("edited.safetensors"), "{}", e);
                Ok(())
            };
            match read_quantized(&path, "w") {
                Ok(w) => {
                    let x = Activations::from_f32(DType::F32, 1, w.geometry.cols, vec![1.0; w.geometry.cols])
                        .unwrap();
                    proptest::prop_assert_eq!(crate::reference::reduce(&w, &x).unwrap().rows, 1);
                }
                Err(e) => named(e)?,
            }
            match read_activations(&path, "x") {
                Ok(x) => proptest::prop_assert!(x.data.len() == x.rows * x.cols && x.data.len() <= 128),
                Err(e) => named(e)?,
            }
            if let Err(e) = list_quantized(&path) {
                named(e)?;
            }
        }
    }
}
