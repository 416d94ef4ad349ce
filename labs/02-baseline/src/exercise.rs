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
        // TODO(lab 02): the forward phase: `model.forward(&batch.x)?` gives the
        // logits `[N, 10]`; `cross_entropy(&logits, &batch.y)?` the mean loss.
        // (When a step accumulates `batch.accumulate` batches, each loss is
        // divided by it.) Then the backward phase: `model.backward(&loss)?`
        // leaves the gradients in the parameters' `.grad`.
        //
        // Time each phase: `clock.time(Phase::Forward, || ...)` runs the closure
        // and adds its time to the step's forward phase (it returns what the
        // closure returns, so `clock.time(Phase::Forward, || -> Result<_> { ... })?`).
        //
        // Return `StepOutput { loss: loss.detach(), logits: logits.detach() }`.
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
        // TODO(lab 02): the optimizer phase: `opt.step()?` moves every parameter
        // against its gradient (SGD with momentum); `opt.zero_grad()` clears the
        // gradients, or the next backward would add to them. Time it as
        // `Phase::Optimizer`.
        Err(labkit::todo!(2, "optimizer_step"))
    }
    // ANCHOR_END: optimizer_step
}
