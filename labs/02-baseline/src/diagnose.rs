//! Names the common mistakes of a training step by running it once on a tiny
//! model (4 inputs, 3 classes, 6 rows) and reading what it left: the phases
//! the clock saw, the parameters and their gradients. The training comparison
//! says *that* the test loss differs; this says *why*, and catches what that
//! comparison cannot see (a phase never timed trains just as well).

use tch::nn::VarStore;
use tch::{Device, Kind, Tensor};
use trainers::models::{self, MlpConfig};
use trainers::optim::{Sgd, SgdConfig};
use trainers::train::phases::{Phase, PhaseClock};
use trainers::train::step::{Batch, TrainStep};

/// An explanation and its `hint: <key>` line.
fn named(what: String, key: &str) -> Option<String> {
    Some(format!("\n{}", labkit::named(what, key)))
}

/// Every number of `ts`, in order.
fn values(ts: &[Tensor]) -> Option<Vec<f64>> {
    let mut all = Vec::new();
    for t in ts {
        if !t.defined() {
            continue;
        }
        all.extend(
            Vec::<f64>::try_from(t.f_to_kind(Kind::Double).ok()?.f_reshape([-1]).ok()?).ok()?,
        );
    }
    Some(all)
}

/// A phase `clock` has no time for, named.
fn untimed(clock: &PhaseClock, phases: &[Phase], after: &str) -> Option<String> {
    let phase = phases.iter().find(|&&p| clock.current().get(p) <= 0.0)?;
    named(
        format!(
            "After your {after}, the clock holds no time for the {} phase: its work ran \
             outside `clock.time(Phase::{phase:?}, ...)`, so the chart would put that time \
             nowhere (or in another phase).",
            phase.name()
        ),
        "phase-not-timed",
    )
}

/// Runs `step` once (forward and backward, then the optimizer) on a tiny
/// model and names the first mistake it recognises; `None` when the step
/// behaves or fails (an unsolved step: its own error says so).
pub fn diagnose<S: TrainStep>(step: &mut S) -> Option<String> {
    // Seeded (under trainers' seed lock): the same model and batch every time.
    let (vs, mut model, x) = trainers::seed::seeded(7, || {
        let vs = VarStore::new(Device::Cpu);
        let model = models::mlp(&MlpConfig {
            input: 4,
            hidden: vec![],
            classes: 3,
        })
        .build(&vs.root());
        let x = Tensor::randn([6, 4], (Kind::Float, Device::Cpu));
        (vs, model, x)
    });
    let mut opt = Sgd::new(&vs, SgdConfig::new(0.1)).ok()?;
    let batch = Batch::new(x, Tensor::from_slice(&[0i64, 1, 2, 0, 1, 2]));
    let params = vs.trainable_variables();
    let mut clock = PhaseClock::new(Device::Cpu);
    step.forward_backward(&mut model, &batch, &mut clock).ok()?;
    if let Some(n) = untimed(
        &clock,
        &[Phase::Forward, Phase::Backward],
        "forward_backward",
    ) {
        return Some(n);
    }
    let grads: Vec<Tensor> = params.iter().map(Tensor::grad).collect();
    let had_gradient = values(&grads)?.iter().any(|&g| g != 0.0);
    let before = values(&params)?;
    step.optimizer_step(&mut opt, &mut clock).ok()?;
    let after = values(&params)?;
    if had_gradient && before == after {
        return named(
            "Your optimizer_step left every parameter where it was, although backward had \
             left gradients: were they zeroed before the optimizer stepped?"
                .to_string(),
            "zeroed-before-step",
        );
    }
    let left: Vec<Tensor> = params.iter().map(Tensor::grad).collect();
    let left = values(&left)?;
    if let Some(i) = left.iter().position(|&g| g != 0.0) {
        return named(
            format!(
                "After your optimizer_step, gradient element {i}: got {}, expected 0: the \
                 gradients were not zeroed, so the next backward adds the next batch's \
                 gradient to this one, and every update repeats all earlier ones.",
                left[i]
            ),
            "grads-not-zeroed",
        );
    }
    untimed(&clock, &[Phase::Optimizer], "optimizer_step")
}

#[cfg(test)]
mod tests;
