//! Lab 2: the baseline. Single-device training of the CNN on Fashion-MNIST with a
//! training step of your own ([`exercise`]) plugged into `trainers`' real loop
//! ([`trainers::train::baseline`]), timed phase by phase; the reference solution
//! is the step every trainer of `trainers` runs, [`SgdStep`].

pub mod exercise;

use std::path::Path;

use labkit::Variant;
use trainers::data::{self, Dataset, Split};
use trainers::optim::Sgd;
use trainers::train::baseline::{Baseline, compare_steps};
use trainers::train::phases::PhaseClock;
use trainers::train::step::{Batch, Replica, SgdStep, StepOutput, TrainStep};

/// The training step of `variant`: the learner's or `trainers`' own.
#[derive(Debug, Clone, Copy)]
pub struct Step(pub Variant);

impl TrainStep for Step {
    type Error = anyhow::Error;

    fn forward_backward(
        &mut self,
        model: &mut dyn Replica,
        batch: &Batch,
        clock: &mut PhaseClock,
    ) -> anyhow::Result<StepOutput> {
        match self.0 {
            Variant::Exercise => exercise::forward_backward(model, batch, clock),
            Variant::Solution => Ok(SgdStep.forward_backward(model, batch, clock)?),
        }
    }

    fn optimizer_step(&mut self, opt: &mut Sgd, clock: &mut PhaseClock) -> anyhow::Result<()> {
        match self.0 {
            Variant::Exercise => exercise::optimizer_step(opt, clock),
            Variant::Solution => Ok(SgdStep.optimizer_step(opt, clock)?),
        }
    }
}

/// Fashion-MNIST's training set and the first `test` examples of its test set
/// (all 10,000 if `test` is larger), on the CPU, from `dir`.
pub fn load(dir: &Path, test: usize) -> anyhow::Result<(Dataset, Dataset)> {
    let train_set = data::load(dir, Split::Train)?;
    let test_set = data::load(dir, Split::Test)?.head(test)?;
    Ok((train_set, test_set))
}

/// The self-check's training: 40 steps of batch 64 from seed 0 on one CPU
/// thread, evaluated on the first 2,000 test examples (a few seconds in a debug
/// build, twice).
pub fn check_config() -> Baseline {
    Baseline {
        steps: 40,
        warmup: 2,
        ..Baseline::default()
    }
}

/// The self-check: trains [`check_config`] with `variant`'s step and with the
/// real one from the same seed on Fashion-MNIST; the training loss must fall and
/// the test loss and accuracy must match within `compare_steps`' tolerances
/// (see `trainers::train::baseline::LOSS_TOLERANCE`). Returns the summary.
pub fn check(variant: Variant) -> anyhow::Result<String> {
    tch::set_num_threads(1);
    let (train_set, test_set) = load(Path::new(data::DEFAULT_DIR), 2_000)?;
    let comparison = compare_steps(&check_config(), &mut Step(variant), &train_set, &test_set)?;
    comparison.verdict().map_err(anyhow::Error::msg)
}
