//! Lab 1's stretch goal, the file you edit (optional: lab 1 is done when
//! `cargo lab check 1` passes): **time a collective the way nccl-tests does**.
//!
//! Lab 1's program compares your all-reduce with the communicator's by their
//! times. One `Instant::now()` around one call on one rank measures little:
//! the first calls pay for connections and cold caches, one call in a few is
//! slowed by the machine, and the ranks finish at different times, while a
//! collective is only done when its slowest rank is.
//!
//! **Contract.** Every rank calls this with the same `warmup` and `iters`.
//! Call `call` exactly `warmup + iters` times: the first `warmup` untimed,
//! then `iters` timed iterations that the ranks start together. An
//! iteration's time is the slowest rank's time for it; return the median of
//! those, in microseconds, the same number on every rank.
//!
//! **What the check proves** (`cargo lab check 1 --stretch`): on 3 ranks, with
//! a `call` that sleeps for known times (rank r 10·(r + 1) ms, one iteration
//! 100 ms longer on every rank, 200 ms for each untimed call), every rank
//! returns about 30 ms, and `call` ran `warmup + iters` times. It names the
//! rank's own time instead of the slowest, the mean instead of the median,
//! and timed warm-up calls.
//!
//! Then time something real: `time_collective` with a broadcast and with an
//! all_reduce of the same buffer (the chapter's "Stretch goal" asks why they
//! differ).

// Until the TODO is done the imports and arguments below are unused; delete
// this line when you have finished, and the compiler will tell you what is left.
#![allow(unused_imports, unused_variables)]

use std::time::Instant;

use collectives::{BufferMut, Communicator, Input, ReduceOp};
use labkit::LabError;

/// This file, as the TODO error names it (`file!()` would name it from
/// tests/, which includes it).
const FILE: &str = "labs/01-first-allreduce/src/stretch.rs";

// ANCHOR: time_collective
/// The median over `iters` timed iterations of the slowest rank's time for
/// `call`, in µs, after `warmup` untimed calls; the same on every rank.
pub fn time_collective(
    comm: &dyn Communicator,
    warmup: usize,
    iters: usize,
    call: &mut dyn FnMut() -> collectives::Result<()>,
) -> Result<f64, LabError> {
    // TODO(lab 01 stretch): warm up, time, combine, take the median. Stuck?
    // `cargo lab hint 1 --stretch`.
    Err(labkit::stretch_todo(1, "time_collective", FILE))
}
// ANCHOR_END: time_collective
