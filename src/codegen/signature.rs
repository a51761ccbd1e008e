//! What a kernel's entry point is made of, as the code generator writes it and the
//! backends bind it: each argument's element type and shape ([`TensorSpec`]) and the
//! launch grid ([`Grid`]). A leaf of the kernel layer: [`crate::kernel`] re-exports
//! these, and nothing here reads a declaration.

use super::Dialect;
use crate::error::{Error, Result};
use std::fmt;

/// Element type of a kernel buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Elem {
    /// 32-bit unsigned integer (the `codes` words).
    U32,
    /// IEEE binary32.
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16.
    Bf16,
}

impl Elem {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Elem::U32 | Elem::F32 => 4,
            Elem::F16 | Elem::Bf16 => 2,
        }
    }

    /// Name in errors and files.
    pub fn name(self) -> &'static str {
        match self {
            Elem::U32 => "u32",
            Elem::F32 => "f32",
            Elem::F16 => "f16",
            Elem::Bf16 => "bf16",
        }
    }

    /// The C type each dialect spells this element as (CPU and CUDA wrap 16-bit floats'
    /// bits in a struct and convert with their shims).
    pub fn c_type(self, dialect: Dialect) -> &'static str {
        match (self, dialect) {
            (Elem::U32, _) => "uint32_t",
            (Elem::F32, _) => "float",
            (Elem::F16, Dialect::Metal) => "half",
            (Elem::F16, Dialect::Cuda) => "f16_t",
            (Elem::Bf16, Dialect::Metal) => "bfloat16_t",
            (Elem::Bf16, Dialect::Cuda) => "bf16_t",
            (Elem::F16, Dialect::Cpu) => "f16_t",
            (Elem::Bf16, Dialect::Cpu) => "bf16_t",
        }
    }
}

impl fmt::Display for Elem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl From<crate::DType> for Elem {
    fn from(d: crate::DType) -> Self {
        match d {
            crate::DType::Bf16 => Elem::Bf16,
            crate::DType::F16 => Elem::F16,
            crate::DType::F32 => Elem::F32,
        }
    }
}

/// The activation dtype a float element type holds; `u32` (code words) holds none.
impl TryFrom<Elem> for crate::DType {
    type Error = Error;
    fn try_from(e: Elem) -> Result<Self> {
        match e {
            Elem::Bf16 => Ok(crate::DType::Bf16),
            Elem::F16 => Ok(crate::DType::F16),
            Elem::F32 => Ok(crate::DType::F32),
            Elem::U32 => Err(Error::invalid(
                "dtype",
                e,
                "activations are f32, f16 or bf16",
            )),
        }
    }
}

impl From<crate::ScaleDType> for Elem {
    fn from(d: crate::ScaleDType) -> Self {
        match d {
            crate::ScaleDType::F16 => Elem::F16,
            crate::ScaleDType::F32 => Elem::F32,
        }
    }
}

/// Name, element type and shape of one kernel argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSpec {
    /// The argument's name in the kernel signature.
    pub name: &'static str,
    /// Its element type.
    pub elem: Elem,
    /// Its shape, row-major (empty for a 0-d argument).
    pub shape: Vec<usize>,
}

/// Bytes of a tensor of `elem` and `shape`, or an error naming the shape when the
/// product overflows (a shape from a declaration's expressions or a caller's upload is
/// any usize: wrapped, it would size a buffer smaller than the kernel walks).
pub fn tensor_bytes(elem: Elem, shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .try_fold(elem.size(), |acc, &n| acc.checked_mul(n))
        .ok_or_else(|| {
            Error::invalid(
                "tensor shape",
                format!("{shape:?}"),
                format!("its size in {elem} elements overflows"),
            )
        })
}

impl TensorSpec {
    /// Elements in the tensor (`usize::MAX` where the count overflows: a shape no
    /// allocation holds, which [`tensor_bytes`] refuses by name).
    pub fn len(&self) -> usize {
        self.shape
            .iter()
            .try_fold(1usize, |acc, &n| acc.checked_mul(n))
            .unwrap_or(usize::MAX)
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Check a concrete tensor against this spec; `kernel` prefixes the error.
    pub fn check(&self, kernel: &str, elem: Elem, shape: &[usize]) -> Result<()> {
        if elem != self.elem {
            return Err(Error::DType {
                name: format!("{kernel}.{}", self.name),
                actual: elem.to_string(),
                expected: self.elem.to_string(),
            });
        }
        if shape != self.shape.as_slice() {
            return Err(Error::Shape {
                name: format!("{kernel}.{}", self.name),
                actual: shape.to_vec(),
                expected: self.shape.clone(),
            });
        }
        Ok(())
    }
}

/// How a kernel is launched: `groups` threadgroups (CUDA blocks) of `threads` threads.
/// Threads come in simdgroups of 32; the CPU backend runs one group per task and
/// emulates its simdgroups' lanes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Grid {
    /// Threadgroups along x, y and z. The kernels' vocabulary indexes groups along x and
    /// y (`GROUP_X`, `GROUP_Y`), so z is 1 (0 for an empty grid).
    pub groups: [u32; 3],
    /// Threads per threadgroup, all along x: whole simdgroups of 32.
    pub threads: u32,
}

impl Grid {
    /// No threadgroups (an empty problem): every backend launches nothing, and the
    /// outputs keep what they held.
    pub fn is_empty(&self) -> bool {
        self.groups.contains(&0)
    }

    /// Whether every backend can run this grid alike: whole simdgroups (a partial one
    /// would leave lanes out of the shuffles on a GPU, while the CPU emulates 32), and
    /// no groups along z (the vocabulary has no `GROUP_Z`: a GPU would run each group
    /// z times over the same outputs, the CPU once).
    pub fn check(&self, kernel: &str) -> Result<()> {
        if self.threads == 0 || !self.threads.is_multiple_of(32) {
            return Err(Error::invalid(
                format!("{kernel} threads per threadgroup"),
                self.threads,
                "must be a positive multiple of 32 (whole simdgroups)",
            ));
        }
        if self.groups[2] > 1 {
            return Err(Error::invalid(
                format!("{kernel} grid z"),
                self.groups[2],
                "must be 1: kernels index threadgroups along x and y only",
            ));
        }
        Ok(())
    }
}
