//! Lab 11's stretch goal, the file you edit (optional: lab 11 is done when
//! `cargo lab check 11` passes): the asynchronous parameter server's
//! **staleness-aware learning rate**.
//!
//! The asynchronous server applies each push as it arrives. A worker reads
//! the parameters at some version (the number of pushes the server has
//! applied), computes its gradient, and pushes it; meanwhile other workers'
//! pushes have moved the parameters on. Its gradient is *stale*: computed
//! where the parameters no longer are. The staleness-aware rule (Zhang et al.
//! 2016, "Staleness-aware Async-SGD for Distributed Deep Learning") applies
//! such a gradient with a smaller step, the staler the smaller.
//!
//! **Contract.** `lr` is the server's learning rate, `current` the server's
//! version as the push arrives, `read` the version the worker read. Let τ,
//! the staleness, be the number of versions between the two. Return `lr`
//! divided by τ, except that a gradient with τ of 0 or 1 keeps the whole
//! rate (the rule divides by max(1, τ)). A `read` newer than `current` is
//! an error: no worker reads a version not yet made.
//!
//! **What the check proves** (`cargo lab check 11 --stretch`): your rate for
//! a table of (current, read) pairs, to rounding; an error for a version
//! from the future; then the asynchronous server itself calls your function
//! for every push of 3 workers beside a 3× straggler, and every logged push
//! has the rate its logged versions call for. It names τ off by one, a
//! division by τ = 0, and a rate multiplied by τ or divided twice.

// Until the TODO is done the arguments below are unused; delete this line
// when you have finished, and the compiler will tell you what is left.
#![allow(unused_variables)]

use trainers::{Error, Result};

/// This file, as the TODO error names it (`file!()` would name it from
/// tests/, which includes it).
const FILE: &str = "labs/11-consistency-models/src/stretch.rs";

// ANCHOR: stretch
/// The learning rate for a push of a gradient computed on version `read`,
/// arriving at a server at version `current`, whose own rate is `lr`.
pub fn staleness_lr(lr: f64, current: u64, read: u64) -> Result<f64> {
    // TODO(lab 11 stretch): the staleness-aware rate. Stuck? `cargo lab hint 11 --stretch`.
    Err(Error::Seam(Box::new(labkit::stretch_todo(
        11,
        "the staleness-aware learning rate",
        FILE,
    ))))
}
// ANCHOR_END: stretch
