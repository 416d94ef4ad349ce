//! The benchmark harness on thread ranks: every collective is timed and
//! checked, sizes follow nccl-tests, and a corrupting communicator is caught.

mod common;

use std::time::Duration;

use collectives::bench::{self, Case, Combine, Settings, Shape};
use collectives::transport::TransportKind;
use collectives::{
    Backend, Buffer, BufferMut, Collective, Communicator, DType, Input, ReduceOp, Result,
};

const SETTINGS: Settings = Settings {
    warmup: 1,
    iters: 5,
    check: true,
    combine: Combine::Max,
};

#[test]
fn every_collective_is_timed_and_checked() {
    let world = 3;
    let results = common::with_ranks(
        world,
        TransportKind::Shm,
        Duration::from_secs(30),
        |_, comm| {
            let mut out = Vec::new();
            for collective in Collective::ALL {
                for in_place in [false, true] {
                    let case = Case {
                        collective,
                        dtype: DType::F32,
                        op: ReduceOp::Sum,
                        root: 1,
                        in_place,
                        bytes: 12 << 10,
                    };
                    out.push((case, bench::run(comm, &case, &SETTINGS).unwrap()));
                }
            }
            out
        },
    );
    for (case, m) in &results[0] {
        let m = m
            .as_ref()
            .unwrap_or_else(|| panic!("{case:?} not measured"));
        let shape = Shape::of(case.collective, case.bytes, world, case.dtype);
        assert_eq!(m.bytes, shape.bytes, "{case:?}");
        assert_eq!(m.wrong, Some(0), "{case:?}");
        assert!(
            0.0 < m.min_us
                && m.min_us <= m.median_us
                && m.median_us <= m.p99_us
                && m.p99_us <= m.max_us,
            "{m:?}"
        );
    }
    // Every rank reports the same combined times.
    for r in &results[1..] {
        for ((_, a), (_, b)) in r.iter().zip(&results[0]) {
            assert_eq!(
                a.as_ref().map(|m| m.median_us),
                b.as_ref().map(|m| m.median_us)
            );
        }
    }
}

#[test]
fn sizes_too_small_for_a_block_are_skipped() {
    let r = common::with_ranks(2, TransportKind::Tcp, Duration::from_secs(30), |_, comm| {
        let case = Case {
            collective: Collective::AllGather,
            dtype: DType::F64,
            op: ReduceOp::Sum,
            root: 0,
            in_place: false,
            bytes: 8,
        };
        bench::run(comm, &case, &SETTINGS).unwrap()
    });
    assert!(r.iter().all(Option::is_none));
}

/// Delegates to a real communicator but flips one output byte of every
/// all_reduce on rank 1: the harness must report it in `wrong`.
struct Corrupting<'a>(&'a (dyn Communicator + Sync));

impl Communicator for Corrupting<'_> {
    fn backend(&self) -> Backend {
        self.0.backend()
    }
    fn rank(&self) -> usize {
        self.0.rank()
    }
    fn world_size(&self) -> usize {
        self.0.world_size()
    }
    fn all_reduce(&self, i: Input<'_>, o: &mut BufferMut<'_>, op: ReduceOp) -> Result<()> {
        self.0.all_reduce(i, o, op)?;
        if self.rank() == 1 && o.dtype() == DType::I32 {
            let bytes = o.host_bytes_mut(Backend::Reference)?;
            bytes[4] ^= 1;
        }
        Ok(())
    }
    fn broadcast(&self, i: Input<'_>, o: &mut BufferMut<'_>, root: usize) -> Result<()> {
        self.0.broadcast(i, o, root)
    }
    fn reduce(&self, i: Input<'_>, o: &mut BufferMut<'_>, op: ReduceOp, r: usize) -> Result<()> {
        self.0.reduce(i, o, op, r)
    }
    fn all_gather(&self, i: Input<'_>, o: &mut BufferMut<'_>) -> Result<()> {
        self.0.all_gather(i, o)
    }
    fn reduce_scatter(&self, i: Input<'_>, o: &mut BufferMut<'_>, op: ReduceOp) -> Result<()> {
        self.0.reduce_scatter(i, o, op)
    }
    fn all_to_all(&self, i: Input<'_>, o: &mut BufferMut<'_>) -> Result<()> {
        self.0.all_to_all(i, o)
    }
    fn gather(&self, i: Input<'_>, o: &mut BufferMut<'_>, root: usize) -> Result<()> {
        self.0.gather(i, o, root)
    }
    fn scatter(&self, i: Input<'_>, o: &mut BufferMut<'_>, root: usize) -> Result<()> {
        self.0.scatter(i, o, root)
    }
    fn barrier(&self) -> Result<()> {
        self.0.barrier()
    }
    fn send(&self, b: &Buffer<'_>, peer: usize) -> Result<()> {
        self.0.send(b, peer)
    }
    fn recv(&self, b: &mut BufferMut<'_>, peer: usize) -> Result<()> {
        self.0.recv(b, peer)
    }
}

#[test]
fn a_corrupted_result_is_counted_as_wrong() {
    let r = common::with_ranks(2, TransportKind::Shm, Duration::from_secs(30), |_, comm| {
        let case = Case {
            collective: Collective::AllReduce,
            dtype: DType::I32,
            op: ReduceOp::Sum,
            root: 0,
            in_place: false,
            bytes: 4096,
        };
        bench::run(&Corrupting(comm), &case, &SETTINGS)
            .unwrap()
            .unwrap()
    });
    assert_eq!(r[0].wrong, Some(1), "{:?}", r[0]);
    assert_eq!(r[1].wrong, Some(1));
}
