//! Timing collectives the way nccl-tests does.
//!
//! The rule (shared with the MPI and Gloo peer programs under `benches/peers`
//! and with the torch peer, so ratios compare like with like): warm up, then
//! for each iteration `barrier; t0; collective; t1`. Each rank records its own
//! times; the time of an iteration combines the ranks' times ([`Combine`]:
//! by default the slowest rank's, an element-wise max all_reduce), and
//! min / median / mean / p99 / max are taken over iterations. Afterwards one
//! more call on fresh integer-valued input is checked element by element
//! (`wrong`, summed over ranks).
//!
//! What differs between collectives (sizes per nccl-tests, reducing or
//! rooted, how to call it, bus factor) is in their descriptors
//! ([`crate::collective`]); this file is the one shared harness.

mod beside;
mod memory;

use std::time::Instant;

pub use crate::collective::Shape;
pub use beside::{BARE_MPI_LABEL, BESIDE_SUFFIX, BareAllReduce, Beside, all_reduce_f32_beside};
pub use memory::{available_bytes, bytes_needed, check_fits};

use crate::aligned::Aligned;
use crate::collective;
use crate::conformance;
use crate::element::{DType, ReduceOp};
use crate::error::{Error, Result};
use crate::{Buffer, BufferMut, Collective, Communicator, Input};

/// How the ranks' times for one iteration become that iteration's time
/// (nccl-tests `-a`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Combine {
    /// The slowest rank (nccl-tests' default).
    #[default]
    Max,
    /// The mean over ranks.
    Avg,
    /// The fastest rank.
    Min,
}

impl Combine {
    /// `max`, `avg` or `min`.
    pub const fn name(self) -> &'static str {
        match self {
            Combine::Max => "max",
            Combine::Avg => "avg",
            Combine::Min => "min",
        }
    }
    /// The element-wise reduction over ranks' times that combines them so.
    pub const fn op(self) -> ReduceOp {
        match self {
            Combine::Max => ReduceOp::Max,
            Combine::Min => ReduceOp::Min,
            Combine::Avg => ReduceOp::Avg,
        }
    }
    /// Parses `max`, `avg`/`mean` or `min` (nccl-tests' `-a` numbers 2, 1, 0 too).
    pub fn parse(s: &str) -> Option<Combine> {
        match s.to_ascii_lowercase().as_str() {
            "max" | "2" => Some(Combine::Max),
            "avg" | "mean" | "1" => Some(Combine::Avg),
            "min" | "0" => Some(Combine::Min),
            _ => None,
        }
    }
}

/// One thing to time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Case {
    /// The collective.
    pub collective: Collective,
    /// Element type.
    pub dtype: DType,
    /// Reduction (used by all_reduce, reduce and reduce_scatter only).
    pub op: ReduceOp,
    /// Root (used by broadcast, reduce, gather and scatter only).
    pub root: usize,
    /// The in-place form (nccl-tests' conventions, see the crate docs).
    pub in_place: bool,
    /// nccl-tests' size S in bytes (see [`Shape`]).
    pub bytes: usize,
}

impl Case {
    /// An in-place f32 sum of `bytes`, rooted at 0 where the collective has a
    /// root: what the peers and the labs time.
    pub fn f32_sum(collective: Collective, bytes: usize) -> Case {
        Case {
            collective,
            dtype: DType::F32,
            op: ReduceOp::Sum,
            root: 0,
            in_place: true,
            bytes,
        }
    }
}

/// How to time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Untimed calls first.
    pub warmup: usize,
    /// Timed calls.
    pub iters: usize,
    /// Check one more call's result exactly.
    pub check: bool,
    /// How ranks' times combine.
    pub combine: Combine,
}

/// One measured size.
#[derive(Clone, Debug, PartialEq)]
pub struct Measurement {
    /// The collective timed.
    pub collective: Collective,
    /// World size.
    pub world: usize,
    /// Message size in bytes (nccl-tests' S, after rounding to whole blocks).
    pub bytes: usize,
    /// nccl-tests' count column.
    pub count: usize,
    /// Element type.
    pub dtype: DType,
    /// Reduction, for reducing collectives.
    pub op: Option<ReduceOp>,
    /// Root, for rooted collectives.
    pub root: Option<usize>,
    /// The in-place form.
    pub in_place: bool,
    /// Timed iterations.
    pub iters: usize,
    /// Fastest iteration, µs.
    pub min_us: f64,
    /// Median iteration, µs.
    pub median_us: f64,
    /// Mean iteration, µs.
    pub mean_us: f64,
    /// 99th percentile iteration (nearest rank), µs.
    pub p99_us: f64,
    /// Slowest iteration, µs.
    pub max_us: f64,
    /// Wrong elements in the checked call, summed over ranks (`None`: not checked).
    pub wrong: Option<usize>,
}

impl Measurement {
    /// An in-place sum all_reduce of `count` `dtype` elements (`bytes`
    /// bytes) over `world` ranks, timed `iters` times with statistics `st`;
    /// unchecked (`wrong` is `None`): for harnesses that time it their own way.
    pub fn all_reduce_sum(
        world: usize,
        bytes: usize,
        count: usize,
        dtype: DType,
        iters: usize,
        st: &Stats,
    ) -> Measurement {
        Measurement {
            collective: Collective::AllReduce,
            world,
            bytes,
            count,
            dtype,
            op: Some(ReduceOp::Sum),
            root: None,
            in_place: true,
            iters,
            min_us: st.min,
            median_us: st.median,
            mean_us: st.mean,
            p99_us: st.p99,
            max_us: st.max,
            wrong: None,
        }
    }
    /// Algorithm bandwidth: bytes / median time, GB/s (1 GB = 1e9 bytes).
    pub fn algbw_gbps(&self) -> f64 {
        if self.median_us <= 0.0 {
            return 0.0;
        }
        self.bytes as f64 / (self.median_us * 1e-6) / 1e9
    }
    /// Bus bandwidth: algbw × the collective's nccl-tests factor.
    pub fn busbw_gbps(&self) -> f64 {
        self.algbw_gbps() * collective::of(self.collective).bus_factor(self.world)
    }
    /// The results-file record of this measurement, for `label` (what was
    /// measured: backend + transport + algorithm) on `backend` with `algo`.
    pub fn to_record(&self, label: &str, backend: &str, algo: &str) -> measure::Record {
        measure::Record {
            label: label.to_owned(),
            backend: backend.to_owned(),
            algo: algo.to_owned(),
            peer: false,
            collective: self.collective,
            world: self.world,
            bytes: self.bytes as u64,
            count: self.count as u64,
            dtype: dtype_key(self.dtype).to_owned(),
            op: self.op.map_or("none", ReduceOp::name).to_owned(),
            root: self.root.map_or(-1, |r| r as i64),
            in_place: self.in_place,
            iters: self.iters as u64,
            min_us: self.min_us,
            median_us: self.median_us,
            mean_us: Some(self.mean_us),
            p99_us: Some(self.p99_us),
            max_us: self.max_us,
            algbw_gbps: Some(self.algbw_gbps()),
            busbw_gbps: Some(self.busbw_gbps()),
            wrong: self.wrong.map_or(-1, |w| w as i64),
        }
    }
}

/// The short dtype names results files and the torch peer use (`f32`, ...).
pub fn dtype_key(d: DType) -> &'static str {
    match d {
        DType::F32 => "f32",
        DType::F64 => "f64",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        DType::I32 => "i32",
        DType::I64 => "i64",
        DType::U8 => "u8",
    }
}

/// Times `case` on `comm`; `None` when the size holds no whole element (per
/// block), or for send/recv on one rank. Every rank must call it with the
/// same arguments.
pub fn run(comm: &dyn Communicator, case: &Case, s: &Settings) -> Result<Option<Measurement>> {
    let n = comm.world_size();
    let d = collective::of(case.collective);
    if d.rooted && case.root >= n {
        return Err(Error::InvalidArgument(format!(
            "root {} is not a rank of this {n}-rank job",
            case.root
        )));
    }
    if s.iters == 0 {
        return Err(Error::InvalidArgument(
            "at least one timed iteration is needed".into(),
        ));
    }
    let shape = Shape::of(case.collective, case.bytes, n, case.dtype);
    if (shape.count == 0 && d.payload) || (case.collective == Collective::SendRecv && n == 1) {
        return Ok(None);
    }
    let (dt, e) = (case.dtype, case.dtype.size());
    // Zeros: every op on every dtype stays finite however often it runs in
    // place, and CPUs take no slow path for them.
    let input = Aligned::zeros(shape.input * e);
    let out_len = if case.in_place {
        shape.in_place_len()
    } else {
        shape.output
    };
    let mut output = Aligned::zeros(out_len * e);
    // The views are made once, outside the timed calls: only the collective
    // is timed, as in the C peers (making one divides by the element size).
    // A collective without an in-place form gets its input buffer even for
    // the in-place case (send/recv sends it; a barrier ignores it).
    let inp = (!(case.in_place && d.in_place))
        .then(|| Buffer::from_bytes(dt, input.bytes()))
        .transpose()?;
    let out = &mut BufferMut::from_bytes(dt, output.bytes_mut())?;
    let mut call = || -> Result<()> {
        let inp = inp.clone().map_or(Input::InPlace, Input::Buffer);
        (d.run)(comm, inp, out, case.op, case.root)
    };
    let st = time(comm, s.warmup, s.iters, s.combine, &mut call)?;
    let wrong = if s.check && d.payload {
        let mine = conformance::check_once(
            comm,
            case.collective,
            dt,
            d.reducing.then_some(case.op),
            shape.count,
            case.in_place,
            case.root,
        )?;
        let mut total = [mine as i64];
        comm.all_reduce(
            Input::InPlace,
            &mut BufferMut::from_slice(&mut total),
            ReduceOp::Sum,
        )?;
        Some(total[0].max(0) as usize)
    } else if !d.payload {
        Some(0)
    } else {
        None
    };
    Ok(Some(Measurement {
        collective: case.collective,
        world: n,
        bytes: shape.bytes,
        count: shape.reported_count,
        dtype: dt,
        op: d.reducing.then_some(case.op),
        root: d.rooted.then_some(case.root),
        in_place: case.in_place,
        iters: s.iters,
        min_us: st.min,
        median_us: st.median,
        mean_us: st.mean,
        p99_us: st.p99,
        max_us: st.max,
        wrong,
    }))
}

/// Times an in-place f32 sum all_reduce of `bytes` bytes with the slowest
/// rank's time per iteration, result checked: the rule the peer programs
/// under `benches/peers` follow.
pub fn all_reduce_f32(
    comm: &dyn Communicator,
    bytes: usize,
    warmup: usize,
    iters: usize,
) -> Result<Measurement> {
    let case = Case::f32_sum(Collective::AllReduce, bytes);
    let settings = Settings {
        warmup,
        iters,
        check: true,
        combine: Combine::Max,
    };
    run(comm, &case, &settings)?
        .ok_or_else(|| Error::InvalidArgument(format!("{bytes} bytes hold no f32 element")))
}

/// The timing rule of every measurement (the bench, the tour, the labs), as
/// nccl-tests times: `warmup` untimed calls, then `iters` calls, each started
/// together after a barrier; each iteration's time is combined over the ranks by
/// `combine` (`Max`: the slowest rank's), and the statistics are over those
/// iterations, in µs. Every rank must call it with the same arguments; every
/// rank gets the same [`Stats`].
pub fn time(
    comm: &dyn Communicator,
    warmup: usize,
    iters: usize,
    combine: Combine,
    mut call: impl FnMut() -> Result<()>,
) -> Result<Stats> {
    if iters == 0 {
        return Err(Error::InvalidArgument(
            "at least one timed iteration is needed".into(),
        ));
    }
    // ANCHOR: timed_loop
    for _ in 0..warmup {
        call()?;
    }
    let mut times = Vec::with_capacity(iters);
    for _ in 0..iters {
        comm.barrier()?;
        let t0 = Instant::now();
        call()?;
        times.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    let op = combine.op();
    comm.all_reduce(Input::InPlace, &mut BufferMut::from_slice(&mut times), op)?;
    // ANCHOR_END: timed_loop
    Ok(Stats::of(&mut times))
}

/// Order statistics over iterations.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Stats {
    /// Smallest.
    pub min: f64,
    /// Median (mean of the middle two for even counts).
    pub median: f64,
    /// Arithmetic mean.
    pub mean: f64,
    /// 99th percentile, nearest-rank definition.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl Stats {
    /// Statistics of `v` (sorted in place); zeros when empty.
    pub fn of(v: &mut [f64]) -> Stats {
        if v.is_empty() {
            return Stats::default();
        }
        let (min, median, max) = summarize(v);
        let m = v.len();
        // Nearest rank: the smallest value with at least 99% of samples at or below it.
        let rank = (0.99 * m as f64).ceil() as usize;
        Stats {
            min,
            median,
            mean: v.iter().sum::<f64>() / m as f64,
            p99: v[rank.clamp(1, m) - 1],
            max,
        }
    }
}

/// (min, median, max) of `v`, sorting it; zeros when empty.
pub fn summarize(v: &mut [f64]) -> (f64, f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    v.sort_by(f64::total_cmp);
    let m = v.len();
    let median = if m % 2 == 1 {
        v[m / 2]
    } else {
        (v[m / 2 - 1] + v[m / 2]) / 2.0
    };
    (v[0], median, v[m - 1])
}

/// Sizes from `min` to `max` bytes, multiplying by `factor` (nccl-tests
/// `-b -e -f`; the one progression is `measure::size::sweep_sizes`), refusing
/// flags that would measure nothing.
pub fn sizes(min: usize, max: usize, factor: usize) -> Result<Vec<usize>> {
    measure::size::sweep_sizes(min as u64, max as u64, factor as u64, 0)
        .map(|v| v.into_iter().map(|s| s as usize).collect())
        .map_err(|e| Error::InvalidArgument(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_even_and_odd() {
        assert_eq!(summarize(&mut [3.0, 1.0, 2.0]), (1.0, 2.0, 3.0));
        assert_eq!(summarize(&mut [4.0, 1.0, 2.0, 3.0]), (1.0, 2.5, 4.0));
    }

    #[test]
    fn p99_is_nearest_rank() {
        let mut v: Vec<f64> = (1..=200).map(f64::from).collect();
        let st = Stats::of(&mut v);
        assert_eq!(
            (st.min, st.p99, st.max, st.mean),
            (1.0, 198.0, 200.0, 100.5)
        );
        let mut v = vec![5.0];
        assert_eq!(Stats::of(&mut v).p99, 5.0);
        assert_eq!(Combine::parse("2"), Some(Combine::Max));
        assert_eq!(Combine::parse("mean"), Some(Combine::Avg));
    }

    #[test]
    fn sizes_multiply() {
        assert_eq!(sizes(8, 64, 2).unwrap(), vec![8, 16, 32, 64]);
        assert_eq!(sizes(1 << 20, 4 << 20, 4).unwrap(), vec![1 << 20, 4 << 20]);
        assert!(sizes(64, 8, 2).is_err());
    }
}
