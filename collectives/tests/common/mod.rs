//! Ranks as threads of the test process, over the real transports.

use std::time::Duration;

use collectives::backends::reference::ReferenceComm;
use collectives::transport::TransportKind;

/// Runs `body(rank, comm)` on `world` threads connected by `kind`; returns each
/// rank's result in rank order.
pub fn with_ranks<T: Send>(
    world: usize,
    kind: TransportKind,
    timeout: Duration,
    body: impl Fn(usize, &ReferenceComm) -> T + Sync,
) -> Vec<T> {
    collectives::thread_ranks::with_ranks(world, kind, timeout, |rank, comm| body(rank, &comm))
        .unwrap()
}
