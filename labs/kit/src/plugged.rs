//! One all-reduce through a learner's [`Plug`] on thread ranks, for the checks
//! of the labs whose exercise runs inside the reference backend (lab 6's
//! bidirectional ring, lab 8's hierarchical all-reduce): what every rank ended
//! with, or what went wrong, as text.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;

use collectives::algorithms::plug::Plug;
use collectives::transport::TransportKind;
use collectives::{BufferMut, Communicator, Element, Input, ReduceOp, thread_ranks};

/// Runs one in-place sum of `count` elements, rank r's element i being
/// `value(r, i)`, through `plug` on `world` thread ranks over shared memory,
/// each wait bounded by `wait`. Returns every rank's numbers afterwards; an
/// error, a panic or a hang (named by the backend after `wait`) becomes the
/// message.
pub fn sum_through<T: Element + Send>(
    plug: Arc<dyn Plug>,
    world: usize,
    wait: Duration,
    count: usize,
    value: impl Fn(usize, usize) -> T + Sync,
) -> Result<Vec<Vec<T>>, String> {
    let ran = catch_unwind(AssertUnwindSafe(|| {
        thread_ranks::with_ranks(world, TransportKind::Shm, wait, |rank, comm| {
            comm.plug(Some(plug.clone()));
            let mut v: Vec<T> = (0..count).map(|i| value(rank, i)).collect();
            comm.all_reduce(
                Input::InPlace,
                &mut BufferMut::from_slice(&mut v),
                ReduceOp::Sum,
            )
            .map(|()| v)
            .map_err(|e| e.to_string())
        })
    }));
    match ran {
        Ok(Ok(outcomes)) => outcomes.into_iter().collect(),
        Ok(Err(e)) => Err(e.to_string()),
        Err(panic) => Err(crate::panic_message(&*panic)),
    }
}
