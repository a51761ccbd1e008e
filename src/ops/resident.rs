//! [`Resident`]: a matrix kept on a backend for many calls, on host data or on
//! activations kept on the device (the exact tier in one launch; the fast tier after a
//! prescale kernel, [`fast_on_device`]).

use super::uploaded::{FastScratch, Held, Uploaded};
use super::{check_finite, first, gate_up_uploaded, held_samples, matvec_uploaded, Choice};
use crate::error::{Error, Result};
use crate::families::gate_up::{GateUpDevice, GateUpFamily, GateUpProblem};
use crate::families::gate_up_mma::{GateUpMmaDevice, GateUpMmaFamily};
use crate::families::mma::{MmaVariant, MAX_M_MMA};
use crate::families::reduce::{ReduceDevice, ReduceFamily, ReduceProblem};
use crate::families::reduce_mma::{Prescale, Prescaled, ReduceMmaDevice, ReduceMmaFamily};
use crate::families::simt::{Variant, MAX_M};
use crate::families::DeviceActivations;
use crate::family;
use crate::kernel::{Backend, DeviceTensor, KernelSpec};
use crate::matrix::{Activations, QuantizedMatrix};
use crate::numerics::{Tail, Tier};
use crate::DType;
use std::sync::Arc;

/// A matrix uploaded to a backend once and kept there for any number of calls
/// ([`Resident::matvec`], [`gate_up_resident`]), with the same results as
/// [`matvec`](super::matvec) and [`gate_up`](super::gate_up), which copy their matrices
/// to the device every call. Its calls on host data keep their device tensors (x, y, and
/// the fast tier's prescaled x and partials) for the next call of the same shapes, a
/// few kinds at a time (a few of each on the device for the resident's life): such a
/// call copies x over its tensor and allocates nothing. It
/// holds the host matrix, which the fast tier's checks and its fallback read, borrowed
/// ([`Resident::new`]) or shared ([`Resident::shared`]: a `Resident<'static, B>`, to
/// keep in a server's state), and checks its weights finite
/// once per activation dtype (the matrix cannot change while it is held). It is `Send`
/// and `Sync` where the backend is (the cpu, cuda and metal-sim backends): several
/// threads may call one. On a backend chosen at run time, make them inside
/// [`AnyBackend::visit`](crate::backend::AnyBackend::visit) (`examples/facade.rs` does).
pub struct Resident<'a, B: Backend> {
    w: Uploaded<'a, B>,
}

impl<'a, B: Backend> Resident<'a, B> {
    /// Validate `w` and upload it to `b`.
    pub fn new(b: &'a B, w: &'a QuantizedMatrix) -> Result<Self> {
        Resident::upload(Uploaded::new(b, w))
    }

    fn upload(w: Uploaded<'a, B>) -> Result<Self> {
        w.get()?; // validates the matrix whole, once
        Ok(Resident { w })
    }

    /// The host matrix.
    pub fn matrix(&self) -> &QuantizedMatrix {
        &self.w.w
    }

    /// The bytes of the device tensors its calls keep for the next (x and y of calls on
    /// host data, the fast tier's prescaled x and partials), beside the matrix: a few
    /// of each kind of call, for its life unless [released](Resident::release_kept).
    pub fn kept_bytes(&self) -> usize {
        self.w.kept_bytes()
    }

    /// Give back the device tensors its calls keep ([`Resident::kept_bytes`]); the next
    /// call of each kind makes them anew. Safe while other threads call it.
    pub fn release_kept(&self) {
        self.w.release_kept()
    }

    /// `y = W x` in `tier`, as [`matvec`](super::matvec) gives it.
    pub fn matvec(&self, x: &Activations, tier: Tier) -> Result<Activations> {
        matvec_uploaded(self.w.clone(), x, Choice::Tables(tier))
    }

    /// `y = W x` with a forced variant of the SIMT family, as
    /// [`matvec_with`](super::matvec_with) gives it.
    pub fn matvec_with(&self, x: &Activations, variant: Variant) -> Result<Activations> {
        matvec_uploaded(self.w.clone(), x, Choice::Forced(variant))
    }

    /// `y = W x` on activations already on the device (uploaded once with
    /// [`DeviceActivations::upload`], or a previous kernel's output through
    /// [`DeviceActivations::from_tensor`]), y left there: `[M, R]` in x's dtype, with the
    /// bits [`Resident::matvec`] gives, and no copy between host and device. M is one
    /// launch's (exact 1..=8, fast 1..=16). The host does not check x's values: a NaN or
    /// an infinity in x makes non-finite outputs, as IEEE arithmetic does (the host
    /// facade refuses them; so does a fast call that reads x on the host, below).
    ///
    /// Exact: where `x` lacks the layout the table's winner reads (x as it is, or its
    /// lane-interleaved copy), the winner's twin that reads the other runs (the same
    /// bits: the layout only moves x in memory).
    ///
    /// Fast: a kernel prescales x on the device as the host facade does
    /// ([`Prescale`]). With f16 operands (the tables' usual choice) and bf16 or f32
    /// activations it also flags the samples the host's operand check must read (a
    /// value below 2^-28 of its sample's largest, or a largest below 2^-113), and the
    /// call waits for those flags (a small copy back, started before the matrix kernel
    /// is queued, so the two kernels run back to back): a flagged sample brings x to
    /// the host (its values checked finite there, as the host facade checks them), and
    /// where the check holds a sample the whole call runs as [`Resident::matvec`] on
    /// it, its result written over y. bf16 operands and f16 activations need no flags
    /// and leave the call asynchronous. On an error y's elements are unspecified (the
    /// matrix kernel may have run). A matrix whose every
    /// sample the f16 operands cannot serve (a lut table spanning more than 2^28, row
    /// scales below 2^-60, products near f32's ends), and x uploaded for an interleaved
    /// variant alone (no plain copy, read back through that copy), run through the host
    /// as well.
    pub fn matvec_device(
        &self,
        x: &DeviceActivations<B>,
        tier: Tier,
    ) -> Result<DeviceActivations<B>> {
        if tier == Tier::Fast {
            let mut y = self
                .w
                .b
                .alloc(&output_spec("y", x, self.w.w.geometry.rows))?;
            self.matvec_device_fast(x, &mut y)?;
            return DeviceActivations::from_tensor(y);
        }
        let (p, v, d) = self.reduce_on_device(x, tier)?;
        DeviceActivations::from_tensor(first(family::launch::<ReduceFamily, B>(
            &self.w.b, &p, v, &d,
        )?))
    }

    /// [`Resident::matvec_device`] into `y`, a `[M, R]` tensor of x's element type made
    /// once (`Backend::alloc`) and reused: no allocation a call (the fast tier's reuses
    /// its scratch too; where it runs a call on the host, the result is written into
    /// y). Every element of y is written; a y of another shape or type is an error
    /// naming it.
    pub fn matvec_device_into(
        &self,
        x: &DeviceActivations<B>,
        y: &mut B::Tensor,
        tier: Tier,
    ) -> Result<()> {
        if tier == Tier::Fast {
            return self.matvec_device_fast(x, y);
        }
        let (p, v, d) = self.reduce_on_device(x, tier)?;
        family::launch_into::<ReduceFamily, B>(&self.w.b, &p, v, &d, &mut [y])
    }

    /// The fast tier of [`Resident::matvec_device`], into `y`.
    fn matvec_device_fast(&self, x: &DeviceActivations<B>, y: &mut B::Tensor) -> Result<()> {
        self.matvec_device_fast_in(x, y, None)
    }

    /// [`Resident::matvec_device_into`]'s fast tier in matrix-unit variant `v`, forced
    /// rather than the tables' (as [`Resident::matvec_with`] forces a SIMT one): a
    /// variant's experiments, and the tests that hold two variants' bits side by side.
    /// A variant that does not fit the problem or the device is refused, named.
    pub fn matvec_device_with(
        &self,
        x: &DeviceActivations<B>,
        y: &mut B::Tensor,
        v: MmaVariant,
    ) -> Result<()> {
        self.matvec_device_fast_in(x, y, Some(v))
    }

    /// The fast tier into `y`, in `v` or the tables' variant.
    fn matvec_device_fast_in(
        &self,
        x: &DeviceActivations<B>,
        y: &mut B::Tensor,
        v: Option<MmaVariant>,
    ) -> Result<()> {
        let w = &*self.w.w;
        crate::reference::check_x_shape([x.samples(), x.cols()], w.geometry.cols)?;
        let p = ReduceProblem::of_samples(w, x.dtype(), x.samples(), MAX_M_MMA)?;
        let matrix = self.w.get()?;
        let v = v.unwrap_or_else(|| {
            crate::tune::select_for::<ReduceMmaFamily, B>(&*self.w.b, &p, Tier::Fast).variant
        });
        fast_on_device::<ReduceMmaFamily, B>(
            &[&self.w],
            (&p, v),
            x,
            y,
            |ops| ReduceMmaDevice { w: matrix, ops },
            |d| d.ops,
            Source::Device(|xh: &Activations| self.matvec(xh, Tier::Fast)),
        )
    }

    /// The problem, variant (checked to fit) and device data of a `matvec` on `x`.
    fn reduce_on_device(
        &self,
        x: &DeviceActivations<B>,
        tier: Tier,
    ) -> Result<(ReduceProblem, Variant, ReduceDevice<B>)> {
        let (b, w) = (&*self.w.b, &*self.w.w);
        crate::reference::check_x_shape([x.samples(), x.cols()], w.geometry.cols)?;
        let p = ReduceProblem::of_samples(w, x.dtype(), x.samples(), MAX_M)?;
        self.w.check_weights_finite(x.dtype())?;
        let v = device_variant(Choice::Tables(tier).simt::<ReduceFamily, B>(b, &p), x);
        family::fits::<ReduceFamily>(&p, v, &b.limits())?;
        let d = ReduceDevice {
            w: self.w.get()?,
            x: x.clone(),
        };
        Ok((p, v, d))
    }

    /// `mid = silu(G x) * (U x)` with this matrix as G and `up` as U on activations
    /// already on the device, mid left there, as [`Resident::matvec_device`] does for
    /// `matvec`: the bits [`Resident::gate_up`] gives, in either tier (M as one launch's:
    /// exact 1..=8, fast 1..=16; the fast tier prescales x, reads flags back and treats
    /// NaN, infinity and held samples as `matvec_device` does). The pair must share T
    /// (one fused matrix kernel; a pair of two T takes host activations: its tail runs
    /// on the host).
    pub fn gate_up_device(
        &self,
        up: &Resident<'_, B>,
        x: &DeviceActivations<B>,
        tail: Tail,
        tier: Tier,
    ) -> Result<DeviceActivations<B>> {
        if tier == Tier::Fast {
            let mut mid = self
                .w
                .b
                .alloc(&output_spec("mid", x, self.w.w.geometry.rows))?;
            self.gate_up_device_fast(up, x, &mut mid, tail)?;
            return DeviceActivations::from_tensor(mid);
        }
        let (p, v, d) = self.gate_up_on_device(up, x, tail, tier)?;
        DeviceActivations::from_tensor(first(family::launch::<GateUpFamily, B>(
            &self.w.b, &p, v, &d,
        )?))
    }

    /// [`Resident::gate_up_device`] into `mid`, a `[M, R]` tensor of x's element type
    /// made once and reused, as [`Resident::matvec_device_into`] writes y.
    pub fn gate_up_device_into(
        &self,
        up: &Resident<'_, B>,
        x: &DeviceActivations<B>,
        mid: &mut B::Tensor,
        tail: Tail,
        tier: Tier,
    ) -> Result<()> {
        if tier == Tier::Fast {
            return self.gate_up_device_fast(up, x, mid, tail);
        }
        let (p, v, d) = self.gate_up_on_device(up, x, tail, tier)?;
        family::launch_into::<GateUpFamily, B>(&self.w.b, &p, v, &d, &mut [mid])
    }

    /// The fast tier of [`Resident::gate_up_device`], into `mid`.
    fn gate_up_device_fast(
        &self,
        up: &Resident<'_, B>,
        x: &DeviceActivations<B>,
        mid: &mut B::Tensor,
        tail: Tail,
    ) -> Result<()> {
        same_backend(self, up)?;
        let (gate, upm) = (&*self.w.w, &*up.w.w);
        crate::reference::check_x_shape([x.samples(), x.cols()], gate.geometry.cols)?;
        let p = GateUpProblem::of_samples(gate, upm, x.dtype(), x.samples(), tail, MAX_M_MMA)?;
        let (gm, um) = (self.w.get()?, up.w.get()?);
        let v = crate::tune::select_for::<GateUpMmaFamily, B>(&*self.w.b, &p, Tier::Fast);
        fast_on_device::<GateUpMmaFamily, B>(
            &[&self.w, &up.w],
            (&p, v.variant),
            x,
            mid,
            |ops| GateUpMmaDevice {
                gate: gm,
                up: um,
                ops,
            },
            |d| d.ops,
            Source::Device(|xh: &Activations| self.gate_up(up, xh, tail, Tier::Fast)),
        )
    }

    /// The problem, variant (checked to fit) and device data of a `gate_up` on `x`.
    fn gate_up_on_device(
        &self,
        up: &Resident<'_, B>,
        x: &DeviceActivations<B>,
        tail: Tail,
        tier: Tier,
    ) -> Result<(GateUpProblem, Variant, GateUpDevice<B>)> {
        same_backend(self, up)?;
        let (b, gate, upm) = (&*self.w.b, &*self.w.w, &*up.w.w);
        crate::reference::check_x_shape([x.samples(), x.cols()], gate.geometry.cols)?;
        let p = GateUpProblem::of_samples(gate, upm, x.dtype(), x.samples(), tail, MAX_M)?;
        Uploaded::check_pair_finite([&self.w, &up.w], x.dtype())?;
        let v = device_variant(Choice::Tables(tier).simt::<GateUpFamily, B>(b, &p), x);
        family::fits::<GateUpFamily>(&p, v, &b.limits())?;
        let d = GateUpDevice {
            gate: self.w.get()?,
            up: up.w.get()?,
            x: x.clone(),
        };
        Ok((p, v, d))
    }

    /// `mid = silu(G x) * (U x)` with this matrix as G and `up` as U, in `tier`, as
    /// [`gate_up`](super::gate_up) gives it ([`gate_up_resident`]).
    pub fn gate_up(
        &self,
        up: &Resident<'_, B>,
        x: &Activations,
        tail: Tail,
        tier: Tier,
    ) -> Result<Activations> {
        gate_up_resident(self, up, x, tail, tier)
    }
}

impl<B: Backend + 'static> Resident<'static, B> {
    /// Validate `w` and upload it to `b`, both shared: the resident owns its part and
    /// borrows nothing.
    pub fn shared(b: Arc<B>, w: Arc<QuantizedMatrix>) -> Result<Self> {
        Resident::upload(Uploaded::held(Held::Shared(b), Held::Shared(w)))
    }
}

/// A device call's output `name`: `[M, rows]` of x's element type.
fn output_spec<B: Backend>(
    name: &'static str,
    x: &DeviceActivations<B>,
    rows: usize,
) -> crate::kernel::TensorSpec {
    crate::kernel::TensorSpec {
        name,
        elem: x.elem(),
        shape: vec![x.samples(), rows],
    }
}

/// Where a fast device call's x comes from, with the host facade's call (`H`) for an x
/// the f16 operands cannot serve (y written from its result).
pub(super) enum Source<H> {
    /// Made on the device: the prescale's flags are read back, and a flagged sample
    /// brings x to the host, where `H` runs the call if the operand check holds it.
    Device(H),
    /// Copied from the host facade's x, checked there (finite; its held samples run on
    /// the host by the caller, over this call's result): no flags to read.
    Host(H),
}

/// The fast tier on activations on the device, into `y`: problem `p` of family `F`
/// in variant `v` (the table's) over `projections` (one matrix, or a fused pair: gate,
/// then up), x prescaled on the device ([`Prescale`]; its flags read by
/// [`held_after_flags`] where x comes from the device), or, for a variant that prescales
/// x itself ([`MmaVariant::fused_x`]), by the matrix kernel, its flags read from its
/// `ws`'s tail ([`fused_flags`]). `device` makes the family's
/// device data of the prescaled operands and `operands` takes them back (they go back
/// to the scratch).
pub(super) fn fast_on_device<F, B>(
    projections: &[&Uploaded<B>],
    (p, v): (&F::Problem, MmaVariant),
    x: &DeviceActivations<B>,
    y: &mut B::Tensor,
    device: impl FnOnce(Prescaled<B>) -> F::Device<B>,
    operands: impl FnOnce(F::Device<B>) -> Prescaled<B>,
    source: Source<impl FnOnce(&Activations) -> Result<Activations>>,
) -> Result<()>
where
    F: family::Family<Variant = MmaVariant>,
    F::Kernel: crate::families::mma::MmaLayout,
    B: Backend,
{
    let (owner, b) = (projections[0], &*projections[0].b);
    family::fits::<F>(p, v, &b.limits())?;
    let kernel = F::kernel(p, v);
    kernel.validate()?;
    let specs = kernel.outputs();
    specs[0].check(kernel.id().name, y.elem(), &y.shape())?;
    let (on_host, from_device) = match source {
        Source::Device(h) => (h, true),
        Source::Host(h) => (h, false),
    };
    let host = |xh: &Activations, y: &mut B::Tensor| {
        let yh = on_host(xh)?;
        b.write(y, &yh.dtype.try_encode(&yh.data, "y")?)
    };
    // x without its plain copy (uploaded for an interleaved SIMT variant alone), or a
    // matrix whose every sample f16 operands cannot serve (whatever x is): the host's.
    let Some(plain) = x.tensor() else {
        return host(&x.download(b)?, y);
    };
    let mut every = false;
    if v.operands.is_f16() {
        for w in projections {
            every |= w.operand_facts()?.every_sample();
        }
    }
    if every {
        return host(&x.download(b)?, y);
    }
    let tables = projections
        .iter()
        .map(|w| w.fast_tables())
        .collect::<Result<Vec<_>>>()?;
    let powers = owner.prescale_powers(&tables.iter().map(|t| t.power).collect::<Vec<_>>())?;
    let k = Prescale::of(&kernel)?;
    k.validate()?;
    let key = (k, v);
    // Every path below puts the buffers back for the next call.
    let put_back = |prescaled, rest| {
        owner.scratch.put(FastScratch {
            key,
            prescaled,
            rest,
        })
    };
    let FastScratch {
        prescaled,
        mut rest,
        ..
    } = match owner.scratch.take(|s| s.key == key) {
        Some(s) => s,
        None => FastScratch {
            key,
            prescaled: prescale_outputs(b, &k)?,
            rest: specs[1..]
                .iter()
                .map(|s| b.alloc(s))
                .collect::<Result<_>>()?,
        },
    };
    let [mut xs, mut unscale, mut flag_out] = prescaled;
    // A fused variant prescales x itself (`fused_x`): no prescale launch (the scratch's
    // outputs wait unused); its flags are the last words of its `ws`, read once it is done.
    if !v.fused_x {
        let launched = k.launch_request().and_then(|launch| {
            let mut refs = [&mut xs, &mut unscale, &mut flag_out];
            b.launch_into(&launch, &[plain, &*powers], &mut refs)
        });
        if let Err(e) = launched {
            put_back([xs, unscale, flag_out], rest);
            return Err(e);
        }
    }
    // Only bf16 and f32 samples can be held with f16 operands (f16 ones fit them; bf16
    // operands hold any), so only those read the flags back (where the host has not
    // read x): started now, taken once the matrix kernel is queued behind them, so the
    // GPU runs the two back to back while the host waits for the flags alone.
    // The error taken out of the match (a `match` on the result would keep flag_out
    // borrowed through its arms, so the scratch could not go back there).
    let mut failed = None;
    let flags = match !v.fused_x && from_device && v.operands.is_f16() && x.dtype() != DType::F16 {
        true => b
            .download_later(&flag_out)
            .map_err(|e| failed = Some(e))
            .ok(),
        false => None,
    };
    if let Some(e) = failed {
        drop(flags); // none: flag_out is no longer borrowed
        put_back([xs, unscale, flag_out], rest);
        return Err(e);
    }
    let d = device(Prescaled {
        x: xs,
        x_f16: None,
        unscale,
        tables: tables.iter().map(|t| t.table.clone()).collect(),
        // A fused variant's inputs: the caller's x and the projections' powers.
        fused: match v.fused_x {
            true => x.shared_tensor().map(|x| (x.clone(), powers.clone())),
            false => None,
        },
    });
    // y the caller's; the partials the scratch's (zeroed when bound, where the kernel
    // needs them zeroed).
    let launched = {
        let mut outs: Vec<&mut B::Tensor> =
            std::iter::once(&mut *y).chain(rest.iter_mut()).collect();
        family::launch_into::<F, B>(b, p, v, &d, &mut outs)
    };
    let flagged = match flags.map(|taken| taken()) {
        Some(read) => read.map(Some),
        None if v.fused_x && from_device && launched.is_ok() => {
            fused_flags(b, &kernel, &specs, &rest).map(Some)
        }
        None => Ok(None),
    };
    let Prescaled { x: xs, unscale, .. } = operands(d);
    // Stream order puts the next call's use of them after this one's kernels (and
    // after a host result written over y below).
    put_back([xs, unscale, flag_out], rest);
    launched?;
    match held_after_flags(b, projections, x, flagged?)? {
        // The host's call, its result written over the matrix kernel's.
        Some(xh) => host(&xh, y),
        None => Ok(()),
    }
}

/// A fused-prescale kernel's tiny flags ([`MmaVariant::fused_x`]): the last words of its
/// `ws` output (`rest`: its outputs after the first), read back after its launch.
fn fused_flags<B: Backend>(
    b: &B,
    kernel: &impl crate::families::mma::MmaLayout,
    specs: &[crate::kernel::TensorSpec],
    rest: &[B::Tensor],
) -> Result<Vec<u8>> {
    let ws = specs[1..]
        .iter()
        .position(|s| s.name == "ws")
        .and_then(|i| rest.get(i))
        .ok_or_else(|| Error::invalid("fused_x", true, "needs a ws output to hold its flags"))?;
    let start = 4 * kernel.ws_flags();
    b.download_range(ws, start..start + 4 * kernel.flag_words())
}

/// Fresh outputs of prescale `k`: x prescaled, `unscale`, the flags.
fn prescale_outputs<B: Backend>(b: &B, k: &Prescale) -> Result<[B::Tensor; 3]> {
    family::alloc_outputs(b, k)?
        .try_into()
        .map_err(|o: Vec<_>| {
            Error::invalid("prescale outputs", o.len(), "the kernel declares three")
        })
}

/// Where the prescale's flags (`flags`, read back: none where it raises none) flag a
/// sample of `x`, x read back to the host and checked finite there, and `Some(x)` where
/// the host's operand check over `projections` holds a sample: the call's result then
/// comes from the host.
fn held_after_flags<B: Backend>(
    b: &B,
    projections: &[&Uploaded<B>],
    x: &DeviceActivations<B>,
    flags: Option<Vec<u8>>,
) -> Result<Option<Activations>> {
    if flags.is_none_or(|f| f.iter().all(|&byte| byte == 0)) {
        return Ok(None);
    }
    let xh = x.download(b)?;
    // Read on the host: checked as the host facade checks it (an infinity flags its
    // sample: every finite value is tiny beside it).
    check_finite(&xh)?;
    Ok((!held_samples(&xh, projections, true)?.is_empty()).then_some(xh))
}

/// Variant `v` for activations on the device: where `x` lacks the layout `v` reads
/// (x as it is, or its lane-interleaved copy), `v`'s twin that reads the other (the same
/// bits: the layout only moves x in memory; the launch checks that the twin fits).
fn device_variant<B: Backend>(v: Variant, x: &DeviceActivations<B>) -> Variant {
    let interleaved_x = match v.interleaved_x {
        true => x.has_interleaved(),
        false => x.tensor().is_none(),
    };
    Variant { interleaved_x, ..v }
}

/// An error naming up's backend where `gate` and `up` are resident on two.
fn same_backend<B: Backend>(gate: &Resident<B>, up: &Resident<B>) -> Result<()> {
    if std::ptr::eq(&*gate.w.b, &*up.w.b) {
        return Ok(());
    }
    Err(Error::invalid(
        "up's backend",
        format!("{} {}", up.w.b.name(), up.w.b.device_id()),
        format!(
            "is not the gate's ({} {}): both must be resident on one backend",
            gate.w.b.name(),
            gate.w.b.device_id()
        ),
    ))
}

/// `mid = silu(G x) * (U x)` of two resident matrices in `tier`, as
/// [`gate_up`](super::gate_up) gives it; both must be resident on the same backend.
pub fn gate_up_resident<B: Backend>(
    gate: &Resident<B>,
    up: &Resident<B>,
    x: &Activations,
    tail: Tail,
    tier: Tier,
) -> Result<Activations> {
    same_backend(gate, up)?;
    gate_up_uploaded(
        [gate.w.clone(), up.w.clone()],
        x,
        tail,
        Choice::Tables(tier),
    )
}
