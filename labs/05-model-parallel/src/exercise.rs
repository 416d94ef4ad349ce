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
    // TODO(lab 05): return the list `Forward(0), Backward(0), Forward(1), Backward(1),
    // ...` up to micro-batch `micro_batches - 1`. Every stage runs the same list.
    // `Action::Forward(m)` and `Action::Backward(m)` are the two actions; a `Vec`
    // built in a `for` loop with `push` is all it takes.
    Err(labkit::todo(5, "naive", file!()))
}
// ANCHOR_END: naive

// ANCHOR: gpipe
/// GPipe: stage `stage` (of `stages`) runs the forward passes of all micro-batches,
/// then all their backward passes, so that the stages work at the same time.
pub fn gpipe(stage: usize, stages: usize, micro_batches: usize) -> Result<Vec<Action>, LabError> {
    // TODO(lab 05): return every micro-batch's forward, in order, then every
    // micro-batch's backward, the last micro-batch first (as GPipe does; the other
    // order works too). While this stage runs micro-batch 1's forward, the next stage
    // can already run micro-batch 0's: that overlap is the whole point.
    Err(labkit::todo(5, "gpipe", file!()))
}
// ANCHOR_END: gpipe
