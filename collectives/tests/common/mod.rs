//! Ranks as threads of the test process, over the real transports.

use std::sync::Arc;
use std::time::Duration;

use collectives::backends::reference::ReferenceComm;
use collectives::backends::{self, Options};
use collectives::rendezvous::MemStore;
use collectives::transport::TransportKind;

/// Runs `body(rank, comm)` on `world` threads connected by `kind`; returns each
/// rank's result in rank order.
pub fn with_ranks<T: Send>(
    world: usize,
    kind: TransportKind,
    timeout: Duration,
    body: impl Fn(usize, &ReferenceComm) -> T + Sync,
) -> Vec<T> {
    let store = Arc::new(MemStore::new(timeout));
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..world)
            .map(|rank| {
                let store = store.clone();
                let body = &body;
                s.spawn(move || {
                    let mut opts = Options::new([7; 16]).unwrap();
                    opts.transport = kind;
                    opts.timeout = timeout;
                    let comm = backends::reference(store.as_ref(), rank, world, &opts).unwrap();
                    body(rank, &comm)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}
