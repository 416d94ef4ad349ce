//! Ranks that disagree must all get an error — never a hang, never corrupted
//! output. Ranks are threads over the real transports.

mod common;

use std::time::{Duration, Instant};

use collectives::transport::TransportKind;
use collectives::{Buffer, BufferMut, Communicator, Error, Input, ReduceOp};

const KINDS: [TransportKind; 2] = [TransportKind::Tcp, TransportKind::Shm];

/// Runs an in-place f32 all_reduce where `odd` rank uses `odd_len` elements and
/// everyone else `len`; returns each rank's error and whether its buffer was
/// left exactly as it was.
fn mismatched_all_reduce(
    world: usize,
    kind: TransportKind,
    len: usize,
    odd: usize,
    odd_len: usize,
) {
    let started = Instant::now();
    let results = common::with_ranks(world, kind, Duration::from_secs(10), |rank, comm| {
        let n = if rank == odd { odd_len } else { len };
        let before: Vec<f32> = (0..n).map(|i| (i % 5) as f32).collect();
        let mut buf = before.clone();
        let res = comm.all_reduce(
            Input::InPlace,
            &mut BufferMut::from_slice(&mut buf),
            ReduceOp::Sum,
        );
        // The communicator refuses further calls after an error.
        let after = comm.barrier();
        (res, buf == before, after.is_err())
    });
    for (rank, (res, untouched, refused)) in results.into_iter().enumerate() {
        match res {
            Err(Error::Mismatch(m)) => assert!(m.contains("all_reduce"), "rank {rank}: {m}"),
            Err(Error::PeerAborted { reason, .. }) => {
                assert!(reason.contains("disagree"), "rank {rank}: {reason}")
            }
            other => panic!(
                "rank {rank} of {world} ({kind:?}, {len} vs {odd_len}): expected a mismatch error, got {other:?}"
            ),
        }
        assert!(
            untouched,
            "rank {rank}: buffer modified by a failed all_reduce"
        );
        assert!(
            refused,
            "rank {rank}: communicator still usable after an error"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn mismatched_lengths_fail_on_every_rank_small_and_large() {
    for kind in KINDS {
        for world in [2, 3, 4] {
            // Small (latency path, no agreement round) and large (agreement first).
            mismatched_all_reduce(world, kind, 100, world - 1, 200);
            mismatched_all_reduce(world, kind, 1 << 20, 1, (1 << 20) + 4);
        }
    }
}

#[test]
fn mismatched_dtypes_fail_on_every_rank() {
    for kind in KINDS {
        let results = common::with_ranks(3, kind, Duration::from_secs(10), |rank, comm| {
            if rank == 2 {
                let mut b = vec![1.0f64; 64];
                comm.all_reduce(
                    Input::InPlace,
                    &mut BufferMut::from_slice(&mut b),
                    ReduceOp::Sum,
                )
            } else {
                let mut b = vec![1.0f32; 64];
                comm.all_reduce(
                    Input::InPlace,
                    &mut BufferMut::from_slice(&mut b),
                    ReduceOp::Sum,
                )
            }
        });
        for (rank, r) in results.iter().enumerate() {
            let msg = format!("{:?}", r.as_ref().err());
            assert!(
                msg.contains("64 × double") || msg.contains("disagree"),
                "rank {rank}: {msg}"
            );
        }
    }
}

#[test]
fn different_collectives_or_roots_fail_on_every_rank() {
    for kind in KINDS {
        // Rank 1 broadcasts from a different root.
        let results = common::with_ranks(3, kind, Duration::from_secs(10), |rank, comm| {
            let mut b = vec![0i32; 1000];
            comm.broadcast(
                Input::InPlace,
                &mut BufferMut::from_slice(&mut b),
                if rank == 1 { 2 } else { 0 },
            )
        });
        assert!(results.iter().all(|r| r.is_err()), "{results:?}");
        // Rank 0 calls all_gather while the others reduce_scatter.
        let results = common::with_ranks(2, kind, Duration::from_secs(10), |rank, comm| {
            let input = vec![1u8; 8];
            let mut out = vec![0u8; if rank == 0 { 16 } else { 4 }];
            if rank == 0 {
                comm.all_gather(
                    Input::Buffer(Buffer::from_slice(&input)),
                    &mut BufferMut::from_slice(&mut out),
                )
            } else {
                comm.reduce_scatter(
                    Input::Buffer(Buffer::from_slice(&input)),
                    &mut BufferMut::from_slice(&mut out),
                    ReduceOp::Max,
                )
            }
        });
        for r in &results {
            let msg = format!("{:?}", r.as_ref().err());
            assert!(
                msg.contains("all_gather") && msg.contains("reduce_scatter")
                    || msg.contains("disagree"),
                "{msg}"
            );
        }
    }
}

#[test]
fn bad_arguments_on_one_rank_stop_every_rank_promptly() {
    for kind in KINDS {
        let started = Instant::now();
        let results = common::with_ranks(3, kind, Duration::from_secs(20), |rank, comm| {
            // all_gather output must be a multiple of the world size.
            let mut out = vec![0f32; if rank == 0 { 10 } else { 9 }];
            comm.all_gather(Input::InPlace, &mut BufferMut::from_slice(&mut out))
        });
        assert!(
            matches!(results[0], Err(Error::InvalidArgument(_))),
            "{:?}",
            results[0]
        );
        for r in &results[1..] {
            assert!(
                matches!(r, Err(Error::PeerAborted { rank: 0, .. })),
                "{r:?}"
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "waited for the timeout: {:?}",
            started.elapsed()
        );
    }
}
