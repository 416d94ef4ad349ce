use std::time::Duration;

use crate::algorithms::Algo;
use crate::conformance::{self, SuiteConfig};
use crate::thread_ranks::with_ranks;
use crate::transport::TransportKind;
use crate::{BufferMut, Collective, Communicator, Error, Input, ReduceOp};

/// nodes × per_node layouts: one node, one rank per node, and in between.
const LAYOUTS: [(usize, usize); 5] = [(1, 3), (2, 2), (3, 1), (2, 3), (4, 2)];

/// Each rank's buffer after a hierarchical all_reduce of `init(rank)` with
/// nodes of `per_node` ranks.
fn run<T: crate::element::Element + Clone + Send>(
    world: usize,
    per_node: usize,
    op: ReduceOp,
    init: impl Fn(usize) -> Vec<T> + Sync,
) -> Vec<crate::Result<Vec<T>>> {
    with_ranks(
        world,
        TransportKind::Shm,
        Duration::from_secs(20),
        |rank, comm| {
            comm.set_algo(Algo::Hierarchical);
            comm.set_per_node(Some(per_node));
            let mut x = init(rank);
            comm.all_reduce(Input::InPlace, &mut BufferMut::from_slice(&mut x), op)
                .map(|()| x)
        },
    )
    .unwrap()
}

#[test]
fn integer_sums_are_exact_at_every_layout() {
    for (nodes, per_node) in LAYOUTS {
        let world = nodes * per_node;
        // 7 elements: blocks of the leaders' ring split unevenly.
        let init = |r: usize| (0..7).map(|i| (i * 1000 + r * r + 1) as i64).collect();
        let want: Vec<i64> = (0..7)
            .map(|i| (0..world).map(|r| (i * 1000 + r * r + 1) as i64).sum())
            .collect();
        for (rank, got) in run(world, per_node, ReduceOp::Sum, init)
            .into_iter()
            .enumerate()
        {
            assert_eq!(got.unwrap(), want, "{nodes}×{per_node} rank {rank}");
        }
        let init = |r: usize| {
            (0..5)
                .map(|i| (i + r) as i32 * if r % 2 == 0 { 1 } else { -1 })
                .collect()
        };
        let want: Vec<i32> = (0..5)
            .map(|i| {
                (0..world)
                    .map(|r| (i + r) as i32 * if r % 2 == 0 { 1 } else { -1 })
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        for (rank, got) in run(world, per_node, ReduceOp::Max, init)
            .into_iter()
            .enumerate()
        {
            assert_eq!(got.unwrap(), want, "max {nodes}×{per_node} rank {rank}");
        }
    }
}

#[test]
fn f32_sums_of_small_integers_are_exact_at_every_layout() {
    for (nodes, per_node) in LAYOUTS {
        let world = nodes * per_node;
        // Integers far below 2^24: every partial sum is exact in f32, in any order.
        let init = |r: usize| (0..1000).map(|i| ((i % 97) * 3 + r) as f32).collect();
        let want: Vec<f32> = (0..1000)
            .map(|i| (0..world).map(|r| ((i % 97) * 3 + r) as f32).sum())
            .collect();
        for (rank, got) in run(world, per_node, ReduceOp::Sum, init)
            .into_iter()
            .enumerate()
        {
            assert!(got.unwrap() == want, "{nodes}×{per_node} rank {rank}");
        }
    }
}

#[test]
fn a_layout_that_does_not_divide_the_world_is_an_error_on_every_rank() {
    for per_node in [0, 3] {
        for (rank, got) in run(4, per_node, ReduceOp::Sum, |r| vec![r as i32; 3])
            .into_iter()
            .enumerate()
        {
            match got {
                Err(Error::InvalidArgument(m)) => {
                    assert!(m.contains("do not divide the 4-rank world"), "{m}")
                }
                other => panic!("per_node {per_node} rank {rank}: {other:?}"),
            }
        }
    }
}

/// Every dtype and op, uneven and empty sizes, in and out of place, through
/// the backend's `--algo hierarchical` on layouts with more than one node.
#[test]
fn the_conformance_suite_passes_on_two_and_three_nodes() {
    let mut cfg = SuiteConfig::quick();
    cfg.collectives = vec![Collective::AllReduce];
    for (nodes, per_node) in [(2, 2), (3, 2), (2, 3)] {
        let world = nodes * per_node;
        let reports = with_ranks(
            world,
            TransportKind::Shm,
            Duration::from_secs(30),
            |_, comm| {
                comm.set_algo(Algo::Hierarchical);
                comm.set_per_node(Some(per_node));
                conformance::run(&comm, &cfg, |_, _| {})
            },
        )
        .unwrap();
        for (rank, r) in reports.into_iter().enumerate() {
            let r = r.unwrap();
            assert!(r.cases > 10, "{nodes}×{per_node}: {} cases", r.cases);
            assert!(
                r.failures.is_empty(),
                "{nodes}×{per_node} rank {rank}: {:#?}",
                r.failures
            );
        }
    }
}

#[test]
fn algo_hierarchical_parses_and_the_reference_backend_runs_it() {
    assert_eq!(Algo::parse("hierarchical"), Some(Algo::Hierarchical));
    assert_eq!(Algo::parse("hier"), Some(Algo::Hierarchical));
    assert_eq!(
        Algo::parse(Algo::Hierarchical.name()),
        Some(Algo::Hierarchical)
    );
    assert!(
        crate::Backend::Reference
            .algorithms()
            .contains(&Algo::Hierarchical)
    );
    assert!(
        !crate::Backend::Gloo
            .algorithms()
            .contains(&Algo::Hierarchical)
    );
}
