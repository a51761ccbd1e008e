//! The prescale fused into `reduce_mma`'s staging ([`MmaVariant::fused_x`]) against the
//! prescale pipeline (the host's `Prescaled` then the plain staged kernel), on any
//! backend: the CPU tests and the GPU tests share it.
use trellis::check::{self, RealSums};
use trellis::families::mma::{MmaLayout, MmaVariant};
use trellis::families::reduce_mma::{ReduceMmaFamily, ReduceMmaHost};
use trellis::family::{self, Family};
use trellis::kernel::Backend;
use trellis::{Activations, QuantizedMatrix};

/// The tiny flag SPEC 7's range asks of sample `n`'s columns `[c0, c1)` of `x`: a
/// nonzero value below 2^-28 of their largest magnitude, or a largest below 2^-113 (the
/// rule `prescale.kernel` applies to a whole sample).
pub fn tiny_flag(x: &Activations, n: usize, (c0, c1): (usize, usize)) -> u32 {
    let vals = &x.data[n * x.cols + c0..n * x.cols + c1];
    let mx = vals.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let floor = mx * 2f32.powi(-28);
    let tiny =
        (mx != 0.0 && mx < 2f32.powi(-113)) || vals.iter().any(|&v| v != 0.0 && v.abs() < floor);
    tiny as u32
}

/// `plain` (staged x, batched) and its fused twin on `w` and `x` (bf16) on `b`: the fused
/// result meets SPEC 7, is `plain`'s bit for bit where a group's columns are the whole
/// sample (`k_split` 1), and its flags (the last `[k_split, M]` words of `ws`) are
/// SPEC 7's rule over each split's columns. `what` names the case in a failure.
pub fn fused_matches<B: Backend>(
    b: &B,
    w: &QuantizedMatrix,
    x: &Activations,
    plain: MmaVariant,
    what: &str,
) {
    let fused = MmaVariant {
        fused_x: true,
        ..plain
    };
    let p = ReduceMmaFamily::problem_of(w, x).unwrap();
    let real = RealSums::of(w, x).unwrap();
    let host = ReduceMmaHost {
        w: w.clone(),
        x: x.clone(),
    };
    let d = ReduceMmaFamily::upload(b, &p, &host).unwrap();
    let outs = family::launch::<ReduceMmaFamily, _>(b, &p, fused, &d).unwrap();
    let y = family::download(b, &outs[0]).unwrap();
    check::fast_reduce(&y, &real).unwrap_or_else(|e| panic!("{what} {fused}: {e}"));
    if plain.k_split == 1 {
        let want = family::run::<ReduceMmaFamily, _>(b, &p, plain, &d).unwrap();
        assert!(y.bits_eq(&want[0]), "{what}: {fused} differs from {plain}");
    }
    let (m, cols, ks) = (x.rows, x.cols, fused.k_split as usize);
    let bytes = b.download(&outs[1]).unwrap();
    // Where the facade reads them (`MmaLayout::ws_flags`, by a ranged download): the
    // last words.
    let k = ReduceMmaFamily::kernel(&p, fused);
    let start = 4 * k.ws_flags();
    let ranged = b
        .download_range(&outs[1], start..start + 4 * k.flag_words())
        .unwrap();
    assert_eq!(
        ranged,
        bytes[bytes.len() - 4 * ks * m..],
        "{what}: the flags' range"
    );
    let flags: Vec<u32> = bytes[bytes.len() - 4 * ks * m..]
        .chunks(4)
        .map(|w| u32::from_le_bytes(w.try_into().unwrap()))
        .collect();
    let steps = cols / 128;
    let want: Vec<u32> = (0..ks)
        .flat_map(|z| {
            let split = (z * steps / ks * 128, (z + 1) * steps / ks * 128);
            (0..m).map(move |n| (n, split))
        })
        .map(|(n, split)| tiny_flag(x, n, split))
        .collect();
    assert_eq!(flags, want, "{what} {fused}: flags per split and sample");
}

/// The facade's fast device call ([`trellis::ops::Resident::matvec_device_with`]) in
/// `plain`'s fused twin against `plain` itself, for x as it is, with a sample the
/// prescale flags and with one the host's operand check holds (the call then runs on the
/// host: both give the host's result; these two need M of 2 or more): the fused call's
/// bits are the pipeline's where a group's columns are the whole sample (`k_split` 1),
/// else within SPEC 7.
pub fn facade_fused_matches<B: Backend>(
    b: &B,
    w: &QuantizedMatrix,
    x: &Activations,
    plain: MmaVariant,
    what: &str,
) {
    use trellis::families::DeviceActivations;
    let fused = MmaVariant {
        fused_x: true,
        ..plain
    };
    let rw = trellis::ops::Resident::new(b, w).unwrap();
    let cases: &[(bool, bool)] = match x.rows {
        1 => &[(false, false)],
        _ => &[(false, false), (true, false), (true, true)],
    };
    for &(flagged, held) in cases {
        let x = match flagged {
            true => super::flagged::with_flagged_sample(x.clone(), held),
            false => x.clone(),
        };
        let xd = DeviceActivations::upload(b, &x).unwrap();
        let spec = trellis::kernel::TensorSpec {
            name: "y",
            elem: trellis::kernel::Elem::Bf16,
            shape: vec![x.rows, w.geometry.rows],
        };
        let run = |v: MmaVariant| {
            let mut y = b.alloc(&spec).unwrap();
            rw.matvec_device_with(&xd, &mut y, v)
                .unwrap_or_else(|e| panic!("{what} {v}: {e}"));
            family::download(b, &y).unwrap()
        };
        let (got, want) = (run(fused), run(plain));
        let case = format!("{what} {fused}, flagged {flagged} held {held}");
        let real = RealSums::of(w, &x).unwrap();
        check::fast_reduce(&got, &real).unwrap_or_else(|e| panic!("{case}: {e}"));
        if plain.k_split == 1 || held {
            assert!(got.bits_eq(&want), "{case}: differs from {plain}");
        }
    }
}
