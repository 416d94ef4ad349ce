//! The training step as a seam: forward, loss, backward, optimizer, each phase
//! timed. [`SgdStep`] is the step every single-device and DDP loop of this crate
//! runs (`ringside-train`, [`super::baseline`]); a [`TrainStep`] of your own (lab
//! 2's exercise) plugs into the same loops, data, models and evaluation.
//!
//! The step sees the model as a [`Replica`]: `forward` and `backward`. For one
//! device that is `forward_t(x, true)` and `loss.backward()`; for a
//! [`Ddp`] replica `backward` also averages the gradients across
//! ranks while it runs, so the very same step trains data-parallel.

use tch::Tensor;
use tch::nn::ModuleT;

use super::phases::{Phase, PhaseClock};
use crate::ddp::Ddp;
use crate::models::Stage;
use crate::optim::Sgd;
use crate::{Error, Result};

/// A model as a training step uses it.
pub trait Replica {
    /// The training-mode forward pass of `x`: the logits, tracking gradients.
    fn forward(&mut self, x: &Tensor) -> Result<Tensor>;

    /// Backward from `loss` (a scalar computed from the last `forward`'s output):
    /// adds the gradients into the parameters' `.grad`.
    fn backward(&mut self, loss: &Tensor) -> Result<()>;
}

/// One device: a model applied whole.
impl Replica for Stage {
    fn forward(&mut self, x: &Tensor) -> Result<Tensor> {
        Ok(self.forward_t(x, true))
    }

    fn backward(&mut self, loss: &Tensor) -> Result<()> {
        Ok(loss.f_backward()?)
    }
}

/// A DDP replica: one backward, whose autograd hooks start the gradients'
/// bucket all_reduces while it runs (not inside [`Ddp::no_sync`]).
impl Replica for Ddp {
    fn forward(&mut self, x: &Tensor) -> Result<Tensor> {
        Ddp::forward(self, x)
    }

    fn backward(&mut self, loss: &Tensor) -> Result<()> {
        Ddp::backward(self, loss)
    }
}

/// One batch of a step: images `x` `[N, 1, 28, 28]`, class labels `y` `[N]`, on
/// the model's device.
#[derive(Debug)]
pub struct Batch {
    /// The inputs.
    pub x: Tensor,
    /// The class labels.
    pub y: Tensor,
    /// How many batches make up this optimizer step (gradient accumulation): the
    /// loss is divided by it before backward, so that the accumulated gradient
    /// is the mean over all of them. 1 for a plain step.
    pub accumulate: usize,
}

impl Batch {
    /// A batch that is a whole step by itself.
    pub fn new(x: Tensor, y: Tensor) -> Batch {
        Batch {
            x,
            y,
            accumulate: 1,
        }
    }
}

/// What a step's forward and backward return.
#[derive(Debug)]
pub struct StepOutput {
    /// The loss backward ran from (divided by [`Batch::accumulate`]), detached.
    pub loss: Tensor,
    /// The model's output for the batch, detached (for accuracy).
    pub logits: Tensor,
}

/// A training step, in two halves so that a loop can accumulate several
/// batches' gradients (and clip them) before one optimizer update.
pub trait TrainStep {
    /// What the step fails with; the loops' own errors convert into it.
    type Error: From<Error>;

    /// Forward, loss (cross-entropy), backward for one batch, timing the forward
    /// (with the loss) as [`Phase::Forward`] and the backward as
    /// [`Phase::Backward`] on `clock`.
    fn forward_backward(
        &mut self,
        model: &mut dyn Replica,
        batch: &Batch,
        clock: &mut PhaseClock,
    ) -> std::result::Result<StepOutput, Self::Error>;

    /// The optimizer's update from the gradients the step's batches left, then
    /// the gradients zeroed for the next step, timed as [`Phase::Optimizer`].
    fn optimizer_step(
        &mut self,
        opt: &mut Sgd,
        clock: &mut PhaseClock,
    ) -> std::result::Result<(), Self::Error>;
}

/// The step of every training loop in `trainers`: cross-entropy and [`Sgd`].
#[derive(Debug, Clone, Copy, Default)]
pub struct SgdStep;

impl TrainStep for SgdStep {
    type Error = Error;

    // ANCHOR: forward_backward
    fn forward_backward(
        &mut self,
        model: &mut dyn Replica,
        batch: &Batch,
        clock: &mut PhaseClock,
    ) -> Result<StepOutput> {
        let (logits, loss) = clock.time(Phase::Forward, || -> Result<_> {
            let logits = model.forward(&batch.x)?;
            let loss = super::cross_entropy(&logits, &batch.y)?;
            // Divide (not multiply by 1/k): for k = 1 the loss keeps its bits.
            let loss = if batch.accumulate > 1 {
                loss.f_div_scalar(batch.accumulate as f64)?
            } else {
                loss
            };
            Ok((logits, loss))
        })?;
        clock.time(Phase::Backward, || model.backward(&loss))?;
        Ok(StepOutput {
            loss: loss.f_detach()?,
            logits: logits.f_detach()?,
        })
    }
    // ANCHOR_END: forward_backward

    // ANCHOR: optimizer_step
    fn optimizer_step(&mut self, opt: &mut Sgd, clock: &mut PhaseClock) -> Result<()> {
        clock.time(Phase::Optimizer, || {
            opt.step()?;
            // Zeroed here rather than before the next forward: every gradient a
            // backward leaves is then consumed by exactly one update.
            opt.zero_grad();
            Ok(())
        })
    }
    // ANCHOR_END: optimizer_step
}
