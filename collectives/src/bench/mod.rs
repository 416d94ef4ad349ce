//! Timing collectives the way nccl-tests does.
//!
//! The rule (shared with the MPI and Gloo peer programs under `benches/peers`,
//! so ratios compare like with like): warm up, then for each iteration
//! `barrier; t0; collective; t1`. Each rank records its own times; the time of
//! an iteration is the slowest rank's (an element-wise max all_reduce), and
//! min / median / max are taken over iterations. Afterwards one more run on
//! fresh integer-valued input is checked element by element (`wrong`).

use std::time::Instant;

use crate::element::{DType, ReduceOp};
use crate::error::Result;
use crate::{BufferMut, Collective, Communicator, Input};

/// One measured size.
#[derive(Clone, Debug, PartialEq)]
pub struct Measurement {
    /// The collective timed.
    pub collective: Collective,
    /// World size.
    pub world: usize,
    /// Message size in bytes (nccl-tests' S).
    pub bytes: usize,
    /// Element type.
    pub dtype: DType,
    /// Timed iterations.
    pub iters: usize,
    /// Fastest iteration (slowest rank), µs.
    pub min_us: f64,
    /// Median iteration, µs.
    pub median_us: f64,
    /// Slowest iteration, µs.
    pub max_us: f64,
    /// Wrong elements in the checked run.
    pub wrong: usize,
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
            self.wrong
        )
    }
}

/// nccl-tests' bus-bandwidth factor for `collective` at `n` ranks.
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

/// Times an in-place f32 sum all_reduce of `bytes` bytes.
pub fn all_reduce_f32(
    comm: &dyn Communicator,
    bytes: usize,
    warmup: usize,
    iters: usize,
) -> Result<Measurement> {
    let n = comm.world_size();
    let count = bytes / 4;
    let fresh = |rank: usize| -> Vec<f32> { (0..count).map(|i| ((rank + i) % 7) as f32).collect() };
    let mut buf = fresh(comm.rank());
    for _ in 0..warmup {
        comm.all_reduce(
            Input::InPlace,
            &mut BufferMut::from_slice(&mut buf),
            ReduceOp::Sum,
        )?;
    }
    let mut times = Vec::with_capacity(iters);
    for _ in 0..iters {
        comm.barrier()?;
        let t0 = Instant::now();
        comm.all_reduce(
            Input::InPlace,
            &mut BufferMut::from_slice(&mut buf),
            ReduceOp::Sum,
        )?;
        times.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    // The slowest rank defines each iteration's time.
    comm.all_reduce(
        Input::InPlace,
        &mut BufferMut::from_slice(&mut times),
        ReduceOp::Max,
    )?;
    let mut buf = fresh(comm.rank());
    comm.all_reduce(
        Input::InPlace,
        &mut BufferMut::from_slice(&mut buf),
        ReduceOp::Sum,
    )?;
    let wrong = buf
        .iter()
        .enumerate()
        .filter(|&(i, &x)| x != (0..n).map(|r| ((r + i) % 7) as f32).sum::<f32>())
        .count();
    let (min_us, median_us, max_us) = summarize(&mut times);
    Ok(Measurement {
        collective: Collective::AllReduce,
        world: n,
        bytes: count * 4,
        dtype: DType::F32,
        iters,
        min_us,
        median_us,
        max_us,
        wrong,
    })
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
    fn busbw_factors_match_nccl_tests() {
        assert_eq!(busbw_factor(Collective::AllReduce, 2), 1.0);
        assert_eq!(busbw_factor(Collective::AllReduce, 4), 1.5);
        assert_eq!(busbw_factor(Collective::AllGather, 4), 0.75);
        assert_eq!(busbw_factor(Collective::Broadcast, 8), 1.0);
    }

    #[test]
    fn sizes_multiply() {
        assert_eq!(sizes(8, 64, 2), vec![8, 16, 32, 64]);
        assert_eq!(sizes(1 << 20, 4 << 20, 4), vec![1 << 20, 4 << 20]);
    }
}
