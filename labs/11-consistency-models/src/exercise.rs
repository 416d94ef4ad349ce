//! Lab 11, the file you edit: the staleness bound of stale-synchronous
//! training. Every worker keeps its own replica and publishes its gradient of
//! each step to the others; a worker may compute on a replica that misses the
//! newest gradients, but only up to a point: it may run at most `staleness`
//! steps ahead of the slowest worker. trainers asks your bound before every
//! step and waits (without spinning, woken whenever a worker finishes a step)
//! while it says no.

// Until the TODO is done the arguments below are unused; delete this line
// when you have finished, and the compiler will tell you what is left.
#![allow(unused_variables)]

use trainers::Result;
use trainers::consistency::StalenessBound;

/// Your staleness bound.
pub struct YourBound;

impl StalenessBound for YourBound {
    // ANCHOR: may_start
    /// May a worker that has completed `step` steps start its next one, when
    /// `completed[w]` is how many steps worker w has completed?
    fn may_start(&self, step: u64, completed: &[u64], staleness: u64) -> Result<bool> {
        // TODO(lab 11): the staleness bound. The contract: no worker ever
        // starts a step while it is more than `staleness` steps ahead of any
        // other worker, and a start the bound allows is never refused (with
        // staleness 0 every step is synchronous, not a deadlock). The check
        // asks your bound a few questions (which worker has completed how
        // much, may this one start?), then trains 3 workers beside a 3×
        // straggler and reads the log of step starts.
        Err(labkit::todo!(11, "the staleness bound"))
    }
    // ANCHOR_END: may_start
}
