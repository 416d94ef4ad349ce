//! Lab 2, the file you edit: one training step, timed phase by phase.
//!
//! The program (`cargo lab 2`) trains the CNN on Fashion-MNIST with *your* step:
//! it loads each batch (the data phase), calls your step's `forward_backward`
//! and then its `optimizer_step`, and after the last step evaluates the model on
//! the test set. The loop, the data, the model and the evaluation are the real
//! ones from `trainers`, which runs your step through its `TrainStep` seam; only
//! the step is yours.
//!
//! Check it with `cargo lab check 2`, run it with `cargo lab 2`.

// Until the TODOs are done the imports and arguments below are unused; delete
// this line when you have finished, and the compiler will tell you what is left.
#![allow(unused_imports, unused_variables)]

use trainers::optim::Sgd;
use trainers::train::cross_entropy;
use trainers::train::phases::{Phase, PhaseClock};
use trainers::train::step::{Batch, Replica, StepOutput, TrainStep};
use trainers::{Error, Result};

/// Your training step.
#[derive(Debug, Clone, Copy, Default)]
pub struct YourStep;

impl TrainStep for YourStep {
    type Error = Error;

    // ANCHOR: forward_backward
    /// Forward, loss and backward for one batch: returns the loss backward ran
    /// from and the model's output, both detached.
    fn forward_backward(
        &mut self,
        model: &mut dyn Replica,
        batch: &Batch,
        clock: &mut PhaseClock,
    ) -> Result<StepOutput> {
        // TODO(lab 02): forward, loss, backward. Contract: on return every
        // parameter's `.grad` holds the gradient of this batch's mean
        // cross-entropy (divided by `batch.accumulate` when several batches make
        // one optimizer step), the forward (with the loss) was timed as
        // `Phase::Forward` and the backward as `Phase::Backward` on `clock`, and
        // what you return is detached. The check trains 40 steps from the same
        // seed as trainers' own step and compares the test loss and accuracy.
        // Which tensor does backward start from? Stuck? `cargo lab hint 2`.
        Err(labkit::todo!(
            2,
            "forward_backward (forward, loss, backward)"
        ))
    }
    // ANCHOR_END: forward_backward

    // ANCHOR: optimizer_step
    /// The update from the gradients backward left, then those gradients zeroed
    /// for the next step.
    fn optimizer_step(&mut self, opt: &mut Sgd, clock: &mut PhaseClock) -> Result<()> {
        // TODO(lab 02): the update. Contract: every parameter moved once by the
        // optimizer from the gradients the step's batches left, and the next
        // step's backward starts from no gradient at all; timed as
        // `Phase::Optimizer`. What does a backward do to a `.grad` that is
        // already there?
        Err(labkit::todo!(2, "optimizer_step"))
    }
    // ANCHOR_END: optimizer_step
}
