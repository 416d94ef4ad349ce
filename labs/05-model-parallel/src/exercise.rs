//! Lab 5, the file you edit: two pipeline schedules.
//!
//! The CNN is cut into stages, each on its own device (or its own CPU thread), and the
//! batch into `micro_batches` micro-batches. For each micro-batch `m` every stage runs
//! one forward pass, `Action::Forward(m)`, and one backward pass, `Action::Backward(m)`.
//! A schedule is the order in which one stage runs them. Everything else is ringside's
//! real pipeline (`trainers::pipeline::Pipeline`): a stage's forward waits for the
//! previous stage's activation of that micro-batch, its backward for the next stage's
//! gradient, gradients add up over the micro-batches, and one optimizer step ends the
//! step. Whatever your order, the result is the same; only the time changes.
//!
//! Check with `cargo lab check 5`, run with `cargo lab 5`.

// Until the TODOs are done the imports and arguments below are unused; delete this
// line when you have finished, and the compiler will tell you what is left over.
#![allow(unused_imports, unused_variables)]

use labkit::LabError;
use trainers::pipeline::Action;

// ANCHOR: naive
/// Naive model parallelism: stage `stage` (of `stages`) runs micro-batch 0 forward
/// and backward, then micro-batch 1, and so on. Run, only one stage is ever busy.
pub fn naive(stage: usize, stages: usize, micro_batches: usize) -> Result<Vec<Action>, LabError> {
    // TODO(lab 05): the naive schedule. Contract: every micro-batch's forward
    // and backward exactly once, a micro-batch's forward before its backward,
    // and no stage ever runs two micro-batches' work at once: the check replays
    // your order on equal stages and expects its bubble, (p − 1)/p of the time.
    Err(labkit::todo(5, "naive", file!()))
}
// ANCHOR_END: naive

// ANCHOR: gpipe
/// GPipe: stage `stage` (of `stages`) runs the forward passes of all micro-batches,
/// then all their backward passes, so that the stages work at the same time.
pub fn gpipe(stage: usize, stages: usize, micro_batches: usize) -> Result<Vec<Action>, LabError> {
    // TODO(lab 05): GPipe. Contract: the same actions, ordered so that the
    // bubble falls to (p − 1)/(m + p − 1): while the next stage works on
    // micro-batch 0, what can this stage already be doing? Stuck? `cargo lab
    // hint 5`.
    Err(labkit::todo(5, "gpipe", file!()))
}
// ANCHOR_END: gpipe
