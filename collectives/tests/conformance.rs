//! The conformance suite with ranks as threads: cheap extra coverage beside the
//! process runs in `cli/tests/conformance.rs` (which run the full matrix).

mod common;

use std::time::Duration;

use collectives::algorithms::Algo;
use collectives::conformance::{self, SuiteConfig};
use collectives::transport::TransportKind;

fn quick(kind: TransportKind) {
    for world in 1..=5 {
        let reports = common::with_ranks(world, kind, Duration::from_secs(30), |_, comm| {
            conformance::run(comm, &SuiteConfig::quick(), |_, _| {}).unwrap()
        });
        for (rank, r) in reports.iter().enumerate() {
            assert!(r.cases > 300, "rank {rank}: only {} cases ran", r.cases);
            assert!(
                r.failures.is_empty(),
                "world {world} rank {rank}: {:#?}",
                r.failures
            );
        }
    }
}

#[test]
fn threads_over_tcp_worlds_1_to_5() {
    quick(TransportKind::Tcp);
}

#[test]
fn threads_over_shm_worlds_1_to_5() {
    quick(TransportKind::Shm);
}

/// Every all_reduce algorithm, forced, at sizes on both sides of the
/// small-message threshold and at non-powers-of-two.
#[test]
fn every_algorithm_is_exact_at_every_world() {
    let mut cfg = SuiteConfig::quick();
    cfg.collectives = vec![collectives::Collective::AllReduce];
    cfg.sizes.push(conformance::Size::Bytes(1 << 20));
    for algo in Algo::CONCRETE {
        for world in [2, 3, 5, 6] {
            let reports = common::with_ranks(
                world,
                TransportKind::Shm,
                Duration::from_secs(30),
                |_, comm| {
                    comm.set_algo(algo);
                    conformance::run(comm, &cfg, |_, _| {}).unwrap()
                },
            );
            for (rank, r) in reports.iter().enumerate() {
                assert!(
                    r.failures.is_empty(),
                    "{} world {world} rank {rank}: {:#?}",
                    algo.name(),
                    r.failures
                );
            }
        }
    }
}
