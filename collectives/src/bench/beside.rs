//! Timing a library's own all_reduce, called bare, beside ringside's call of
//! the same library in the same process: what the binding adds, free of the
//! differences between two programs' runs.
//!
//! Each iteration times both, each after its own barrier (ringside's before
//! ringside's call, the library's before the bare one, as the C peer does),
//! taking turns at going first so neither always meets the cache or the
//! other rank in the same state. The rule is otherwise [`super::time`]'s:
//! the slowest rank's time per iteration, statistics over iterations, and
//! one checked call each afterwards.

use crate::aligned::Aligned;
use crate::bench::{Combine, Measurement, Stats};
use crate::collective::{self, Shape};
use crate::conformance;
use crate::element::{DType, ReduceOp};
use crate::error::{Error, Result};
use crate::{BufferMut, Collective, Communicator, Input};

/// The label of the bare MPI call's records (`peers`' `mpi-bare`).
pub const BARE_MPI_LABEL: &str = "mpi-bare";

/// Added to ringside's label for its records timed beside a bare call: taking
/// turns slows both calls a little, so they are not its records timed alone.
pub const BESIDE_SUFFIX: &str = "-beside";

/// A library's all_reduce and barrier called directly, with nothing of
/// ringside around them (made by [`crate::backends::bare_all_reduce`]).
pub trait BareAllReduce {
    /// The library's barrier, before a call on `count` elements. Untimed,
    /// and before every call: the place for what keeps the job's timeout
    /// (MPI's arms its watchdog here), so the timed call stays bare.
    fn barrier(&mut self, count: usize) -> Result<()>;
    /// The library's in-place f32 sum all_reduce of `buf`.
    fn all_reduce_f32_sum(&mut self, buf: &mut [f32]) -> Result<()>;
}

/// One size timed both ways.
#[derive(Clone, Debug, PartialEq)]
pub struct Beside {
    /// Ringside's all_reduce.
    pub ours: Measurement,
    /// The bare library call.
    pub bare: Measurement,
}

/// Times an in-place f32 sum all_reduce of `bytes` bytes through `comm` and
/// through `bare`, iteration by iteration in turn (see the module docs).
/// Every rank must call it with the same arguments.
pub fn all_reduce_f32_beside(
    comm: &dyn Communicator,
    bare: &mut dyn BareAllReduce,
    bytes: usize,
    warmup: usize,
    iters: usize,
) -> Result<Beside> {
    if iters == 0 {
        return Err(Error::InvalidArgument(
            "at least one timed iteration is needed".into(),
        ));
    }
    let n = comm.world_size();
    let shape = Shape::of(Collective::AllReduce, bytes, n, DType::F32);
    if shape.count == 0 {
        return Err(Error::InvalidArgument(format!(
            "{bytes} bytes hold no f32 element"
        )));
    }
    let run = collective::of(Collective::AllReduce).run;
    let mut ours_buf = Aligned::zeros(shape.count * 4);
    let mut bare_buf = Aligned::zeros(shape.count * 4);
    let ours_view = &mut BufferMut::from_bytes(DType::F32, ours_buf.bytes_mut())?;
    let bare_view: &mut [f32] = bytemuck::cast_slice_mut(bare_buf.bytes_mut());
    let count = bare_view.len();
    for _ in 0..warmup {
        run(comm, Input::InPlace, ours_view, ReduceOp::Sum, 0)?;
        bare.barrier(count)?;
        bare.all_reduce_f32_sum(bare_view)?;
    }
    let mut ours_t = Vec::with_capacity(iters);
    let mut bare_t = Vec::with_capacity(iters);
    for i in 0..iters {
        for bare_turn in [i % 2 == 1, i % 2 == 0] {
            if bare_turn {
                bare.barrier(count)?;
                let t0 = std::time::Instant::now();
                bare.all_reduce_f32_sum(bare_view)?;
                bare_t.push(t0.elapsed().as_secs_f64() * 1e6);
            } else {
                comm.barrier()?;
                let t0 = std::time::Instant::now();
                run(comm, Input::InPlace, ours_view, ReduceOp::Sum, 0)?;
                ours_t.push(t0.elapsed().as_secs_f64() * 1e6);
            }
        }
    }
    // The slowest rank's time per iteration, as `time` combines.
    let op = Combine::Max.op();
    comm.all_reduce(Input::InPlace, &mut BufferMut::from_slice(&mut ours_t), op)?;
    comm.all_reduce(Input::InPlace, &mut BufferMut::from_slice(&mut bare_t), op)?;
    let (ours_st, bare_st) = (Stats::of(&mut ours_t), Stats::of(&mut bare_t));

    let ours_wrong = conformance::check_once(
        comm,
        Collective::AllReduce,
        DType::F32,
        Some(ReduceOp::Sum),
        shape.count,
        true,
        0,
    )?;
    let bare_wrong = check_bare(bare, comm.rank(), n, bare_view)?;
    let mut wrong = [ours_wrong as i64, bare_wrong as i64];
    comm.all_reduce(
        Input::InPlace,
        &mut BufferMut::from_slice(&mut wrong),
        ReduceOp::Sum,
    )?;
    let measured = |st: Stats, wrong: i64| Measurement {
        wrong: Some(wrong.max(0) as usize),
        ..Measurement::all_reduce_sum(n, shape.bytes, shape.reported_count, DType::F32, iters, &st)
    };
    Ok(Beside {
        ours: measured(ours_st, wrong[0]),
        bare: measured(bare_st, wrong[1]),
    })
}

/// One bare call on integer inputs whose sum every rank knows, elements
/// compared exactly (integers this small are exact in f32 however summed):
/// the wrong elements on this rank.
fn check_bare(
    bare: &mut dyn BareAllReduce,
    rank: usize,
    world: usize,
    buf: &mut [f32],
) -> Result<usize> {
    let pattern = |i: usize| (i % 7 + 1) as f32;
    for (i, x) in buf.iter_mut().enumerate() {
        *x = (rank + 1) as f32 * pattern(i);
    }
    bare.barrier(buf.len())?;
    bare.all_reduce_f32_sum(buf)?;
    let ranks_sum = (world * (world + 1) / 2) as f32;
    Ok(buf
        .iter()
        .enumerate()
        .filter(|&(i, &x)| x != ranks_sum * pattern(i))
        .count())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::thread_ranks::with_ranks;
    use crate::transport::TransportKind;

    /// A "bare" all_reduce that is ringside's own, plus `skew` on every
    /// element afterwards: the harness cannot tell, so it shows what the
    /// harness does with any library's call.
    struct ViaComm<'a> {
        comm: &'a dyn Communicator,
        skew: f32,
    }

    impl BareAllReduce for ViaComm<'_> {
        fn barrier(&mut self, _count: usize) -> Result<()> {
            self.comm.barrier()
        }
        fn all_reduce_f32_sum(&mut self, buf: &mut [f32]) -> Result<()> {
            self.comm.all_reduce(
                Input::InPlace,
                &mut BufferMut::from_slice(buf),
                ReduceOp::Sum,
            )?;
            buf.iter_mut().for_each(|x| *x += self.skew);
            Ok(())
        }
    }

    fn beside(skew: f32, bytes: usize, iters: usize) -> Vec<Result<Beside>> {
        with_ranks(2, TransportKind::Shm, Duration::from_secs(30), |_, comm| {
            let mut bare = ViaComm { comm: &comm, skew };
            all_reduce_f32_beside(&comm, &mut bare, bytes, 1, iters)
        })
        .unwrap()
    }

    #[test]
    fn both_calls_are_timed_and_checked_alike() {
        for r in beside(0.0, 64, 9) {
            let Beside { ours, bare } = r.unwrap();
            for m in [&ours, &bare] {
                assert_eq!((m.bytes, m.count, m.iters, m.world), (64, 16, 9, 2));
                assert_eq!(m.wrong, Some(0));
                assert!(m.min_us > 0.0 && m.min_us <= m.median_us && m.median_us <= m.max_us);
            }
        }
    }

    #[test]
    fn a_bare_call_that_sums_wrong_is_counted_on_its_side_only() {
        for r in beside(1.0, 32, 3) {
            let Beside { ours, bare } = r.unwrap();
            assert_eq!(ours.wrong, Some(0));
            // 8 elements wrong on each of the 2 ranks.
            assert_eq!(bare.wrong, Some(16));
        }
    }

    #[test]
    fn nothing_to_time_is_refused() {
        for r in beside(0.0, 2, 3) {
            assert!(matches!(r, Err(Error::InvalidArgument(m)) if m.contains("no f32 element")));
        }
        for r in beside(0.0, 64, 0) {
            assert!(matches!(r, Err(Error::InvalidArgument(m)) if m.contains("timed iteration")));
        }
    }
}
