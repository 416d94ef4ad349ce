//! Each named mistake, fed to the probe as a learner would write it: trainers'
//! own step with one half replaced.

use super::*;
use trainers::Result;
use trainers::train::step::{Replica, SgdStep, StepOutput};

/// Trainers' step, but the optimizer never zeroes the gradients.
struct NoZeroGrad;

impl TrainStep for NoZeroGrad {
    type Error = trainers::Error;
    fn forward_backward(
        &mut self,
        model: &mut dyn Replica,
        batch: &Batch,
        clock: &mut PhaseClock,
    ) -> Result<StepOutput> {
        SgdStep.forward_backward(model, batch, clock)
    }
    fn optimizer_step(&mut self, opt: &mut Sgd, clock: &mut PhaseClock) -> Result<()> {
        clock.time(Phase::Optimizer, || opt.step())
    }
}

/// Trainers' step, but the gradients are zeroed before the update.
struct ZeroFirst;

impl TrainStep for ZeroFirst {
    type Error = trainers::Error;
    fn forward_backward(
        &mut self,
        model: &mut dyn Replica,
        batch: &Batch,
        clock: &mut PhaseClock,
    ) -> Result<StepOutput> {
        SgdStep.forward_backward(model, batch, clock)
    }
    fn optimizer_step(&mut self, opt: &mut Sgd, clock: &mut PhaseClock) -> Result<()> {
        clock.time(Phase::Optimizer, || {
            opt.zero_grad();
            opt.step()
        })
    }
}

/// Trainers' step, but backward runs inside the timed forward phase.
struct BackwardTimedAsForward;

impl TrainStep for BackwardTimedAsForward {
    type Error = trainers::Error;
    fn forward_backward(
        &mut self,
        model: &mut dyn Replica,
        batch: &Batch,
        clock: &mut PhaseClock,
    ) -> Result<StepOutput> {
        clock.time(Phase::Forward, || {
            let logits = model.forward(&batch.x)?;
            let loss = trainers::train::cross_entropy(&logits, &batch.y)?;
            model.backward(&loss)?;
            Ok(StepOutput {
                loss: loss.f_detach()?,
                logits: logits.f_detach()?,
            })
        })
    }
    fn optimizer_step(&mut self, opt: &mut Sgd, clock: &mut PhaseClock) -> Result<()> {
        SgdStep.optimizer_step(opt, clock)
    }
}

#[test]
fn trainers_own_step_names_nothing() {
    assert_eq!(diagnose(&mut SgdStep), None);
}

#[test]
fn gradients_never_zeroed_are_named() {
    let e = diagnose(&mut NoZeroGrad).unwrap();
    assert!(
        e.contains("After your optimizer_step, gradient element 0: got "),
        "{e}"
    );
    assert!(e.ends_with("hint: grads-not-zeroed"), "{e}");
}

#[test]
fn gradients_zeroed_before_the_update_are_named() {
    let e = diagnose(&mut ZeroFirst).unwrap();
    assert!(e.ends_with("hint: zeroed-before-step"), "{e}");
}

#[test]
fn a_backward_not_timed_as_its_own_phase_is_named() {
    let e = diagnose(&mut BackwardTimedAsForward).unwrap();
    assert!(e.contains("no time for the backward phase"), "{e}");
    assert!(e.ends_with("hint: phase-not-timed"), "{e}");
}
