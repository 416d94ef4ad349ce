//! Ranks as threads of this process, each with a handle on the same data:
//! how the mechanisms' checks and the labs run a small job without starting
//! processes.

use std::sync::Mutex;
use std::time::Duration;

use collectives::Communicator;
use collectives::transport::TransportKind;

use crate::data::Dataset;
use crate::{Error, Result};

/// `body(rank, comm, data)` on `world` thread ranks (reference backend over
/// shared memory, every wait bounded by `timeout`, at most 60 s), each with its
/// own handle on `data` (a `Tensor` is `Send` but not `Sync`).
pub fn with_data_ranks<T: Send>(
    world: usize,
    data: &Dataset,
    timeout: Duration,
    body: impl Fn(usize, Box<dyn Communicator>, Dataset) -> Result<T> + Sync,
) -> Result<Vec<Result<T>>> {
    let handles = Mutex::new(
        (0..world)
            .map(|_| Some(data.shallow_clone()))
            .collect::<Vec<_>>(),
    );
    // Below DDP's own bound, so a lost peer fails in the communicator first.
    let timeout = timeout.min(Duration::from_secs(60));
    Ok(collectives::thread_ranks::with_ranks(
        world,
        TransportKind::Shm,
        timeout,
        |rank, comm| {
            let data = handles.lock().ok().and_then(|mut h| h[rank].take());
            let data = data.ok_or_else(|| Error::InvalidArgument("no data handle".into()))?;
            body(rank, Box::new(comm), data)
        },
    )?)
}
