//! Tensors in host memory, for the backends that run kernels on the CPU (`cpu`,
//! `metal-sim`): little-endian elements in 4-byte-aligned storage, followed by
//! [`super::READ_SLACK_BYTES`] of padding.

use crate::error::{Error, Result};
use crate::kernel::{tensor_bytes, DeviceTensor, Elem};

/// A host tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    elem: Elem,
    pub(super) shape: Vec<usize>,
    /// The elements, then `READ_SLACK_BYTES` of padding (zeros, or poison where
    /// [`Self::poison_padding`] made it so).
    pub(super) words: Vec<u32>,
}

impl HostTensor {
    /// A zeroed tensor, its padding zeroed too; an error naming the shape where its size
    /// overflows or cannot be allocated.
    pub(super) fn zeroed(elem: Elem, shape: &[usize]) -> Result<Self> {
        let bytes = tensor_bytes(elem, shape)?;
        let n = bytes.div_ceil(4) + super::READ_SLACK_BYTES / 4;
        let mut words = crate::error::reserve(n, "tensor shape", format!("{shape:?}"))?;
        words.resize(n, 0);
        Ok(HostTensor {
            elem,
            shape: shape.to_vec(),
            words,
        })
    }
    /// A tensor holding `bytes`, which must be exactly its size (checked before anything
    /// is allocated).
    pub(super) fn from_bytes(elem: Elem, shape: &[usize], bytes: &[u8]) -> Result<Self> {
        let want = tensor_bytes(elem, shape)?;
        if bytes.len() != want {
            return Err(Error::invalid(
                "upload bytes",
                bytes.len(),
                format!("{elem} tensor of shape {shape:?} needs {want}"),
            ));
        }
        let mut t = Self::zeroed(elem, shape)?;
        t.bytes_mut().copy_from_slice(bytes);
        Ok(t)
    }
    /// Set every byte after the elements to `0xFF` (NaN in every float type, and no
    /// small index): an input read past its end then shows in the results, where zeros
    /// would add nothing to a sum.
    pub(super) fn poison_padding(&mut self) {
        let n = self.byte_len();
        self.storage_mut()[n..].fill(0xFF);
    }
    pub(super) fn byte_len(&self) -> usize {
        self.shape.iter().product::<usize>() * self.elem.size()
    }
    /// A copy of the tensor's bytes, in memory reserved first (a download of a huge
    /// output is an error, not an allocation abort).
    pub(super) fn download(&self) -> Result<Vec<u8>> {
        let mut v =
            crate::error::reserve(self.byte_len(), "download", format!("{:?}", self.shape))?;
        v.extend_from_slice(self.bytes());
        Ok(v)
    }
    /// Overwrite the elements with `bytes`, exactly their size (the padding kept).
    pub(super) fn write(&mut self, bytes: &[u8]) -> Result<()> {
        crate::kernel::check_write(self.elem, &self.shape, bytes)?;
        self.bytes_mut().copy_from_slice(bytes);
        Ok(())
    }
    /// The tensor's bytes.
    pub fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.words)[..self.byte_len()]
    }
    pub(super) fn bytes_mut(&mut self) -> &mut [u8] {
        let n = self.byte_len();
        &mut self.storage_mut()[..n]
    }
    /// The whole storage, elements and padding, as bytes.
    fn storage_mut(&mut self) -> &mut [u8] {
        bytemuck::cast_slice_mut(&mut self.words)
    }
}

impl DeviceTensor for HostTensor {
    fn elem(&self) -> Elem {
        self.elem
    }
    fn shape(&self) -> Vec<usize> {
        self.shape.clone()
    }
}
