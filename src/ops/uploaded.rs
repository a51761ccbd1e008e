//! A matrix on a backend for the facade's calls ([`Uploaded`]): its upload, made once
//! and shared by a call's launches (or a [`super::Resident`]'s life), and what the calls
//! learn of it once (its weights finite per dtype, the fast tier's operand facts, its
//! table and power on the device), with the buffers its calls reuse (x and y of calls
//! on host data, the fast path's scratch).

use crate::error::Result;
use crate::families::mma::MmaVariant;
use crate::families::reduce_mma::{beyond_f16_operands_of, OperandFacts, Prescale, TablePowers};
use crate::families::DeviceMatrix;
use crate::kernel::{Backend, DeviceTensor, Elem, TensorSpec};
use crate::matrix::{Activations, QuantizedMatrix};
use crate::DType;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

/// A matrix uploaded on the first launch that needs it and shared by the call's other
/// launches (the chunks of a large M), so one call copies each matrix to the device once
/// (and a [`super::Resident`] one, none). It also remembers the activation dtypes its
/// weights were found finite in: the matrix is held (borrowed or shared), so it cannot
/// change, and the check reads every scale and the value table (about 0.1 ms at 17408
/// rows, L 16, a call).
pub(super) struct Uploaded<'a, B: Backend> {
    pub(super) b: Held<'a, B>,
    pub(super) w: Held<'a, QuantizedMatrix>,
    /// The upload, made on the first launch that needs it and shared by the clones.
    pub(super) dev: Arc<OnceLock<Arc<DeviceMatrix<B>>>>,
    /// Set once the matrix has been validated whole ([`Uploaded::validate`]).
    pub(super) valid: Arc<OnceLock<()>>,
    /// Bit `i`: the weights are finite in `DType::ALL[i]`.
    pub(super) finite_in: Arc<AtomicU8>,
    /// What the fast tier's operand check reads of the matrix, made on first need.
    pub(super) facts: Arc<OnceLock<OperandFacts>>,
    /// The fast tier's table and its power, for its device path, which its calls on
    /// host data take too (first need).
    pub(super) fast_tables: Arc<OnceLock<Arc<FastTables<B>>>>,
    /// The fast device path's buffers (its calls on host data take that path too) of its
    /// last few keys (a call with this matrix first), reused: the prescale's three
    /// outputs and the split-K partials, not allocated a call on CUDA and the CPU
    /// (Metal's launches return fresh arrays, so there it saves nothing).
    pub(super) scratch: Arc<Pool<FastScratch<B>>>,
    /// The prescale's `powers` inputs of the last few calls with this matrix first (its
    /// table's power; a fused pair's, gate's then up's), by value.
    pub(super) powers: Arc<Pool<PowersUpload<B>>>,
    /// The device tensors of the last few calls on host data with this matrix first.
    pub(super) io: Arc<HostIo<B>>,
}

/// The device tensors of a matrix's last few calls on host data (with it first), by
/// element type and shape, for its next: x's layouts, which a call writes x over, and
/// the matrix kernel's outputs (y; the fast tier's other buffers are its
/// [`FastScratch`]), which a call launches into. A new tensor costs an allocation and a
/// clear on the device (CUDA: driver calls beside a small copy; Metal's uploads and
/// launches make fresh arrays, so there it saves nothing). Inputs and outputs are kept
/// apart: a square matrix's x and y have one type and shape, and an upload's slack (the
/// Metal simulator fills it to catch reads past the end) is not an output's. At most
/// [`KEEP_IO`] of each, so a resident holds at most that many of its calls' x and
/// y on the device beside its matrix.
pub(super) struct HostIo<B: Backend> {
    inputs: Pool<B::Tensor, KEEP_IO>,
    outputs: Pool<B::Tensor, KEEP_IO>,
}

/// How many inputs and how many outputs a [`HostIo`] keeps: a resident's matvec and
/// fused pair at a few M (each one x layout and one y).
const KEEP_IO: usize = 6;

impl<B: Backend> Default for HostIo<B> {
    fn default() -> Self {
        HostIo {
            inputs: Pool::default(),
            outputs: Pool::default(),
        }
    }
}

/// The prescale's `powers` (their bits, in order) and their upload.
pub(super) type PowersUpload<B> = (Vec<u32>, Arc<<B as Backend>::Tensor>);

/// A few values kept for reuse (at most `KEEP`, of any keys), most recently put last; a
/// lock held only to take or put one. Two threads that miss at once each make a value
/// and both put it back (the oldest past `KEEP` dropped).
pub(super) struct Pool<T, const KEEP: usize = KEEP_FEW>(std::sync::Mutex<Vec<T>>);

/// What a [`Pool`] keeps unless told: a resident's matvec and fused pair at a couple of
/// M.
const KEEP_FEW: usize = 4;

impl<T, const KEEP: usize> Default for Pool<T, KEEP> {
    fn default() -> Self {
        Pool(Default::default())
    }
}

impl<T, const KEEP: usize> Pool<T, KEEP> {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Vec<T>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Take out the value `is` picks, if one is here.
    pub(super) fn take(&self, is: impl Fn(&T) -> bool) -> Option<T> {
        let mut kept = self.lock();
        let i = kept.iter().position(is)?;
        Some(kept.remove(i))
    }

    /// Drop every value kept.
    pub(super) fn clear(&self) {
        self.lock().clear();
    }

    /// Keep `t`, dropping the least recent past `KEEP`.
    pub(super) fn put(&self, t: T) {
        let mut kept = self.lock();
        if kept.len() >= KEEP {
            kept.remove(0);
        }
        kept.push(t);
    }
}

/// The fast device path's buffers (host calls' too) for a prescale and a variant: the
/// prescale's outputs (x prescaled, `unscale`, the flags) and the matrix kernel's outputs after y (its
/// split-K partials, `ws`; none for a fused pair). A call takes them out of the pool and
/// puts them back once its kernels are queued: calls run in stream order, so the next
/// call's prescale writes them after this call's kernels have read them, and two
/// threads' calls at once use two sets.
pub(super) struct FastScratch<B: Backend> {
    pub(super) key: (Prescale, MmaVariant),
    pub(super) prescaled: [B::Tensor; 3],
    pub(super) rest: Vec<B::Tensor>,
}

/// What the fast tier's device path reads of one matrix alone, uploaded once: its
/// prescaled value table (code `lut`) and the table's power of two (the prescale's
/// `powers` input, [`Uploaded::prescale_powers`]).
pub(super) struct FastTables<B: Backend> {
    pub(super) table: Option<Arc<B::Tensor>>,
    pub(super) power: f32,
}

impl<B: Backend> Clone for Uploaded<'_, B> {
    fn clone(&self) -> Self {
        Uploaded {
            b: self.b.clone(),
            w: self.w.clone(),
            dev: self.dev.clone(),
            valid: self.valid.clone(),
            finite_in: self.finite_in.clone(),
            facts: self.facts.clone(),
            fast_tables: self.fast_tables.clone(),
            scratch: self.scratch.clone(),
            powers: self.powers.clone(),
            io: self.io.clone(),
        }
    }
}

/// A value borrowed for `'a`, or shared (a [`super::Resident::shared`]'s backend and
/// matrix).
pub(super) enum Held<'a, T> {
    Borrowed(&'a T),
    Shared(Arc<T>),
}

impl<T> Clone for Held<'_, T> {
    fn clone(&self) -> Self {
        match self {
            Held::Borrowed(t) => Held::Borrowed(t),
            Held::Shared(t) => Held::Shared(t.clone()),
        }
    }
}

impl<T> std::ops::Deref for Held<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        match self {
            Held::Borrowed(t) => t,
            Held::Shared(t) => t,
        }
    }
}

impl<'a, B: Backend> Uploaded<'a, B> {
    pub(super) fn new(b: &'a B, w: &'a QuantizedMatrix) -> Self {
        Uploaded::held(Held::Borrowed(b), Held::Borrowed(w))
    }

    pub(super) fn held(b: Held<'a, B>, w: Held<'a, QuantizedMatrix>) -> Self {
        Uploaded {
            b,
            w,
            dev: Default::default(),
            valid: Default::default(),
            finite_in: Default::default(),
            facts: Default::default(),
            fast_tables: Default::default(),
            scratch: Default::default(),
            powers: Default::default(),
            io: Default::default(),
        }
    }

    /// An output of `spec` for a host call: a recent call's output of its type and shape
    /// (its elements as that call left them: a kernel writes its outputs whole, and the
    /// launch clears those it accumulates into), else a new one.
    pub(super) fn io_alloc(&self, spec: &TensorSpec) -> Result<B::Tensor> {
        let is = |t: &B::Tensor| t.elem() == spec.elem && t.shape() == spec.shape;
        match self.io.outputs.take(is) {
            Some(t) => Ok(t),
            None => self.b.alloc(spec),
        }
    }

    /// `bytes` on the device as an input of `elem` and `shape`: written over a recent
    /// call's input ([`Backend::write`], in stream order), else uploaded.
    pub(super) fn io_upload(&self, elem: Elem, shape: &[usize], bytes: &[u8]) -> Result<B::Tensor> {
        match self
            .io
            .inputs
            .take(|t| t.elem() == elem && t.shape() == shape)
        {
            Some(mut t) => {
                self.b.write(&mut t, bytes)?;
                Ok(t)
            }
            None => self.b.upload(elem, shape, bytes),
        }
    }

    /// Keep a host call's inputs and outputs for the next: only once the call has read
    /// its outputs back (which waits for its kernels), so no queued kernel still reads
    /// or writes them.
    pub(super) fn io_keep(
        &self,
        inputs: impl IntoIterator<Item = B::Tensor>,
        outputs: impl IntoIterator<Item = B::Tensor>,
    ) {
        inputs.into_iter().for_each(|t| self.io.inputs.put(t));
        outputs.into_iter().for_each(|t| self.io.outputs.put(t));
    }

    /// The bytes of the device tensors kept for the next calls (x and y of calls on
    /// host data, the fast tier's scratch and `powers`); not the matrix's.
    pub(super) fn kept_bytes(&self) -> usize {
        let bytes = |t: &B::Tensor| t.elem().size() * t.shape().iter().product::<usize>();
        let io = self.io.inputs.lock().iter().map(bytes).sum::<usize>()
            + self.io.outputs.lock().iter().map(bytes).sum::<usize>();
        let scratch = (self.scratch.lock().iter())
            .flat_map(|s| s.prescaled.iter().chain(&s.rest))
            .map(bytes)
            .sum::<usize>();
        let powers = self
            .powers
            .lock()
            .iter()
            .map(|(_, t)| bytes(t))
            .sum::<usize>();
        io + scratch + powers
    }

    /// Drop the tensors [`Self::kept_bytes`] counts. A call in flight holds what it uses
    /// outside the store (and puts it back after); a dropped tensor that queued kernels
    /// still read is freed in stream order (CUDA) or once they let go (Metal), as a
    /// store dropping its least recent one already does.
    pub(super) fn release_kept(&self) {
        self.io.inputs.clear();
        self.io.outputs.clear();
        self.scratch.clear();
        self.powers.clear();
    }

    /// The prescale's `powers` input (one or two: a matrix's, a fused pair's) on the
    /// device: a recent call's upload of the same values (bits), else a new one.
    pub(super) fn prescale_powers(&self, powers: &[f32]) -> Result<Arc<B::Tensor>> {
        let key: Vec<u32> = powers.iter().map(|p| p.to_bits()).collect();
        let is = |(k, _): &PowersUpload<B>| *k == key;
        let t = match self.powers.take(is) {
            Some((_, t)) => t,
            None => {
                let bytes: Vec<u8> = powers.iter().flat_map(|v| v.to_le_bytes()).collect();
                Arc::new(self.b.upload(Elem::F32, &[powers.len()], &bytes)?)
            }
        };
        self.powers.put((key, t.clone()));
        Ok(t)
    }

    /// [`FastTables`] of the matrix, uploaded once while this (or a clone) lives.
    pub(super) fn fast_tables(&self) -> Result<Arc<FastTables<B>>> {
        if let Some(t) = self.fast_tables.get() {
            return Ok(t.clone());
        }
        let TablePowers { mut tables, powers } = TablePowers::upload(&*self.b, &[&self.w])?;
        let t = Arc::new(FastTables {
            table: tables.pop().flatten(),
            power: powers.first().copied().unwrap_or(1.0),
        });
        Ok(self.fast_tables.get_or_init(|| t).clone())
    }

    /// [`OperandFacts::of`] the matrix, once while this (or a clone) lives.
    pub(super) fn operand_facts(&self) -> Result<&OperandFacts> {
        if let Some(f) = self.facts.get() {
            return Ok(f);
        }
        let f = OperandFacts::of(&self.w)?;
        Ok(self.facts.get_or_init(|| f))
    }

    /// [`QuantizedMatrix::validate`], once while this (or a clone) lives: a resident's
    /// matrix, held, cannot change, and the check reads every scale (54 us at 17408 f16
    /// scales on this machine's host, where a fused pair's call checks two).
    pub(super) fn validate(&self) -> Result<()> {
        if self.valid.get().is_none() {
            self.w.validate()?;
            let _ = self.valid.set(());
        }
        Ok(())
    }

    /// [`QuantizedMatrix::check_weights_finite`], once per dtype while this (or a clone)
    /// lives.
    pub(super) fn check_weights_finite(&self, dtype: DType) -> Result<()> {
        let i = DType::ALL.iter().position(|&d| d == dtype).unwrap_or(0);
        let bit = 1u8 << i;
        if self.finite_in.load(Ordering::Relaxed) & bit == 0 {
            self.w.check_weights_finite(dtype)?;
            self.finite_in.fetch_or(bit, Ordering::Relaxed);
        }
        Ok(())
    }

    /// [`Self::check_weights_finite`] of a gate/up pair, each named.
    pub(super) fn check_pair_finite([gate, up]: [&Self; 2], dtype: DType) -> Result<()> {
        gate.check_weights_finite(dtype).map_err(|e| e.of("gate"))?;
        up.check_weights_finite(dtype).map_err(|e| e.of("up"))
    }

    /// The upload, made now if no launch made it yet. (Two threads of a [`super::Resident`]
    /// need not race here: `Resident`s upload when they are made.)
    pub(super) fn get(&self) -> Result<Arc<DeviceMatrix<B>>> {
        if let Some(d) = self.dev.get() {
            return Ok(d.clone());
        }
        let d = Arc::new(DeviceMatrix::upload(&*self.b, &self.w)?);
        let _ = self.valid.set(()); // the upload validated the matrix whole
        Ok(self.dev.get_or_init(|| d).clone())
    }
}

/// The samples of `x` held back from the fast kernels, those their operands cannot carry
/// ([`beyond_f16_operands_of`] over the matrices' facts, made once per upload); none where
/// the operands are bf16.
pub(super) fn held_samples<B: Backend>(
    x: &Activations,
    ws: &[&Uploaded<B>],
    f16_operands: bool,
) -> Result<Vec<usize>> {
    if !f16_operands {
        return Ok(Vec::new());
    }
    let facts = ws
        .iter()
        .map(|w| w.operand_facts())
        .collect::<Result<Vec<_>>>()?;
    let mats: Vec<&QuantizedMatrix> = ws.iter().map(|w| &*w.w).collect();
    beyond_f16_operands_of(x, &mats, &facts)
}

#[cfg(test)]
mod tests {
    use super::{Pool, Uploaded};
    use crate::backend::cpu::CpuBackend;
    use crate::kernel::{Backend, DeviceTensor, Elem, TensorSpec};
    use crate::{check, Code, Geometry};

    /// A host call's kept inputs serve only inputs and its outputs only outputs, though
    /// a square matrix's x and y share a type and shape: an output is never a tensor an
    /// upload made (whose slack the Metal simulator fills), nor an input one a launch
    /// wrote. Each comes back with the bytes it was given.
    #[test]
    fn kept_inputs_and_outputs_serve_only_their_own_role() {
        let cpu = CpuBackend::new().unwrap();
        let w = check::random_matrix(Geometry::new(64, 64, 64, 2, 12, Code::OneMad).unwrap(), 1);
        let wd = Uploaded::new(&cpu, &w);
        let spec = TensorSpec {
            name: "y",
            elem: Elem::F32,
            shape: vec![1, 64],
        };
        let bytes = |v: f32| -> Vec<u8> { (0..64).flat_map(|_| v.to_le_bytes()).collect() };
        let x = wd.io_upload(Elem::F32, &[1, 64], &bytes(1.0)).unwrap();
        wd.io_keep([x], []);
        // An output of x's type and shape: a new one (zeroed), not the kept x.
        let y = wd.io_alloc(&spec).unwrap();
        assert_eq!(cpu.download(&y).unwrap(), bytes(0.0));
        wd.io_keep([], [y]);
        // The next x is written over the kept x; the kept y is the next output.
        let x = wd.io_upload(Elem::F32, &[1, 64], &bytes(2.0)).unwrap();
        assert_eq!(cpu.download(&x).unwrap(), bytes(2.0));
        assert_eq!(wd.io.inputs.lock().len(), 0, "the kept x taken");
        let y = wd.io_alloc(&spec).unwrap();
        assert_eq!((y.elem(), y.shape()), (Elem::F32, vec![1, 64]));
        assert_eq!(wd.io.outputs.lock().len(), 0, "the kept y taken");
    }

    /// A pool hands back what was put, by key, keeps at most `KEEP` (the least recent
    /// dropped first: a take and a put make a value the most recent), and keeps two
    /// values of one key where two were put.
    #[test]
    fn a_pool_keeps_the_most_recent_few() {
        let pool = Pool::<(u32, u32)>::default();
        let keys = |pool: &Pool<(u32, u32)>| pool.lock().iter().map(|v| v.0).collect::<Vec<_>>();
        for k in 0..super::KEEP_FEW as u32 {
            pool.put((k, 10 * k));
        }
        assert_eq!(keys(&pool), [0, 1, 2, 3]);
        let taken = pool.take(|v| v.0 == 1).unwrap();
        assert_eq!(taken, (1, 10));
        assert!(pool.take(|v| v.0 == 1).is_none(), "taken out");
        pool.put(taken);
        pool.put((4, 40));
        assert_eq!(keys(&pool), [2, 3, 1, 4], "0 dropped, 1 now recent");
        pool.put((4, 41));
        assert_eq!(keys(&pool), [3, 1, 4, 4]);
        assert_eq!(pool.take(|v| v.0 == 4), Some((4, 40)));
        assert_eq!(pool.take(|v| v.0 == 4), Some((4, 41)));
    }
}
