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
//! Message sizes follow nccl-tests ([`Shape`]); bus bandwidth uses its
//! factors ([`busbw_factor`]).

pub mod shape;

use std::time::Instant;

pub use shape::Shape;

use crate::aligned::Aligned;
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
    fn reducing(&self) -> bool {
        matches!(
            self.collective,
            Collective::AllReduce | Collective::Reduce | Collective::ReduceScatter
        )
    }
    fn rooted(&self) -> bool {
        matches!(
            self.collective,
            Collective::Broadcast | Collective::Reduce | Collective::Gather | Collective::Scatter
        )
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
    /// Algorithm bandwidth: bytes / median time, GB/s (1 GB = 1e9 bytes).
    pub fn algbw_gbps(&self) -> f64 {
        if self.median_us <= 0.0 {
            return 0.0;
        }
        self.bytes as f64 / (self.median_us * 1e-6) / 1e9
    }
    /// Bus bandwidth: algbw × the collective's nccl-tests factor.
    pub fn busbw_gbps(&self) -> f64 {
        self.algbw_gbps() * busbw_factor(self.collective, self.world)
    }
    /// One JSON object on one line (the format the peer programs print too).
    pub fn to_json(&self, implementation: &str) -> String {
        format!(
            "{{\"impl\":\"{implementation}\",\"collective\":\"{}\",\"world\":{},\"bytes\":{},\"dtype\":\"{}\",\"iters\":{},\"min_us\":{:.3},\"median_us\":{:.3},\"max_us\":{:.3},\"algbw_gbps\":{:.4},\"busbw_gbps\":{:.4},\"wrong\":{}}}",
            self.collective,
            self.world,
            self.bytes,
            self.dtype,
            self.iters,
            self.min_us,
            self.median_us,
            self.max_us,
            self.algbw_gbps(),
            self.busbw_gbps(),
            self.wrong.map_or(-1, |w| w as i64)
        )
    }
}

/// nccl-tests' bus-bandwidth factor for `collective` at `n` ranks
/// (PERFORMANCE.md: the fraction of the data each rank's link must carry).
pub fn busbw_factor(collective: Collective, n: usize) -> f64 {
    let n = n as f64;
    match collective {
        Collective::AllReduce => 2.0 * (n - 1.0) / n,
        Collective::ReduceScatter
        | Collective::AllGather
        | Collective::AllToAll
        | Collective::Gather
        | Collective::Scatter => (n - 1.0) / n,
        Collective::Broadcast | Collective::Reduce | Collective::SendRecv | Collective::Barrier => {
            1.0
        }
    }
}

/// Times `case` on `comm`; `None` when the size holds no whole element (per
/// block), or for send/recv on one rank. Every rank must call it with the
/// same arguments.
pub fn run(comm: &dyn Communicator, case: &Case, s: &Settings) -> Result<Option<Measurement>> {
    let (me, n) = (comm.rank(), comm.world_size());
    if case.rooted() && case.root >= n {
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
    let barrier = case.collective == Collective::Barrier;
    if (shape.count == 0 && !barrier) || (case.collective == Collective::SendRecv && n == 1) {
        return Ok(None);
    }
    let (dt, e) = (case.dtype, case.dtype.size());
    // Zeros: every op on every dtype stays finite however often it runs in
    // place, and CPUs take no slow path for them.
    let input = Aligned::zeros(shape.input * e);
    let out_len = if case.in_place {
        shape.in_place_len(case.collective)
    } else {
        shape.output
    };
    let mut output = Aligned::zeros(out_len * e);
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
    let mut call = || -> Result<()> {
        let inp = if case.in_place {
            Input::InPlace
        } else {
            Input::Buffer(Buffer::from_bytes(dt, input.bytes())?)
        };
        let out = &mut BufferMut::from_bytes(dt, output.bytes_mut())?;
        match case.collective {
            Collective::AllReduce => comm.all_reduce(inp, out, case.op),
            Collective::Broadcast => comm.broadcast(inp, out, case.root),
            Collective::Reduce => comm.reduce(inp, out, case.op, case.root),
            Collective::AllGather => comm.all_gather(inp, out),
            Collective::ReduceScatter => comm.reduce_scatter(inp, out, case.op),
            Collective::AllToAll => comm.all_to_all(inp, out),
            Collective::Gather => comm.gather(inp, out, case.root),
            Collective::Scatter => comm.scatter(inp, out, case.root),
            Collective::Barrier => comm.barrier(),
            Collective::SendRecv => {
                let send = Buffer::from_bytes(dt, input.bytes())?;
                // Even ranks send first, odd ranks receive first, so blocking
                // sends cannot all wait on each other around the ring.
                if me % 2 == 0 {
                    comm.send(&send, right)?;
                    comm.recv(out, left)
                } else {
                    comm.recv(out, left)?;
                    comm.send(&send, right)
                }
            }
        }
    };
    // ANCHOR: timed_loop
    for _ in 0..s.warmup {
        call()?;
    }
    let mut times = Vec::with_capacity(s.iters);
    for _ in 0..s.iters {
        comm.barrier()?;
        let t0 = Instant::now();
        call()?;
        times.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    let op = match s.combine {
        Combine::Max => ReduceOp::Max,
        Combine::Min => ReduceOp::Min,
        Combine::Avg => ReduceOp::Avg,
    };
    comm.all_reduce(Input::InPlace, &mut BufferMut::from_slice(&mut times), op)?;
    // ANCHOR_END: timed_loop
    let wrong = if s.check && !barrier {
        let mine = conformance::check_once(
            comm,
            case.collective,
            dt,
            case.reducing().then_some(case.op),
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
    } else if barrier {
        Some(0)
    } else {
        None
    };
    let st = Stats::of(&mut times);
    Ok(Some(Measurement {
        collective: case.collective,
        world: n,
        bytes: shape.bytes,
        count: shape.reported_count,
        dtype: dt,
        op: case.reducing().then_some(case.op),
        root: case.rooted().then_some(case.root),
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
    let case = Case {
        collective: Collective::AllReduce,
        dtype: DType::F32,
        op: ReduceOp::Sum,
        root: 0,
        in_place: true,
        bytes,
    };
    let settings = Settings {
        warmup,
        iters,
        check: true,
        combine: Combine::Max,
    };
    run(comm, &case, &settings)?
        .ok_or_else(|| Error::InvalidArgument(format!("{bytes} bytes hold no f32 element")))
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

/// Sizes from `min` to `max` bytes, multiplying by `factor` (nccl-tests `-b -e -f`).
pub fn sizes(min: usize, max: usize, factor: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut s = min.max(1);
    while s <= max {
        out.push(s);
        if factor < 2 {
            break;
        }
        s = s.saturating_mul(factor);
    }
    out
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
    fn busbw_factors_match_nccl_tests() {
        assert_eq!(busbw_factor(Collective::AllReduce, 2), 1.0);
        assert_eq!(busbw_factor(Collective::AllReduce, 4), 1.5);
        assert_eq!(busbw_factor(Collective::AllGather, 4), 0.75);
        assert_eq!(busbw_factor(Collective::Broadcast, 8), 1.0);
        // PERFORMANCE.md, for every n: allreduce 2(n-1)/n; reducescatter,
        // allgather, alltoall (and gather/scatter in its gather.cu /
        // scatter.cu) (n-1)/n; broadcast, reduce, sendrecv 1.
        for n in 1..=64usize {
            let f = n as f64;
            assert_eq!(busbw_factor(Collective::AllReduce, n), 2.0 * (f - 1.0) / f);
            for c in [
                Collective::ReduceScatter,
                Collective::AllGather,
                Collective::AllToAll,
                Collective::Gather,
                Collective::Scatter,
            ] {
                assert_eq!(busbw_factor(c, n), (f - 1.0) / f, "{c} at {n}");
            }
            for c in [
                Collective::Broadcast,
                Collective::Reduce,
                Collective::SendRecv,
            ] {
                assert_eq!(busbw_factor(c, n), 1.0, "{c} at {n}");
            }
        }
    }

    #[test]
    fn sizes_multiply() {
        assert_eq!(sizes(8, 64, 2), vec![8, 16, 32, 64]);
        assert_eq!(sizes(1 << 20, 4 << 20, 4), vec![1 << 20, 4 << 20]);
    }
}
