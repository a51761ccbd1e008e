//! The selector's cost a call, memoized and not (fiftieth session): copy into
//! `examples/` and `cargo run --release --example select_time`.
use trellis::families::reduce::{ReduceFamily, ReduceProblem};
use trellis::families::reduce_mma::ReduceMmaFamily;
use trellis::numerics::Tier;
use trellis::{Code, DType, Geometry, ScaleDType};
fn main() {
    let g = Geometry::new(17408, 5120, 256, 3, 12, Code::OneMad).unwrap();
    let p = ReduceProblem { geometry: g, scale: ScaleDType::F16, act: DType::Bf16, m: 1 };
    let s = trellis::tune::global();
    let _ = s.select::<ReduceFamily>("cuda", "nvidia-h200", &p, Tier::Exact);
    let n = 20000;
    let t = std::time::Instant::now();
    for _ in 0..n { std::hint::black_box(s.select::<ReduceFamily>("cuda", "nvidia-h200", &p, Tier::Exact)); }
    println!("exact select {:.2} us", t.elapsed().as_secs_f64() * 1e6 / n as f64);
    let t = std::time::Instant::now();
    for _ in 0..n { std::hint::black_box(s.select::<ReduceMmaFamily>("cuda", "nvidia-h200", &p, Tier::Fast)); }
    println!("fast select {:.2} us", t.elapsed().as_secs_f64() * 1e6 / n as f64);
    let t = std::time::Instant::now();
    for _ in 0..n { std::hint::black_box(s.select::<ReduceFamily>("cuda", "nvidia-h100-80gb-hbm3", &p, Tier::Exact)); }
    println!("h100 exact select {:.2} us", t.elapsed().as_secs_f64() * 1e6 / n as f64);
}
