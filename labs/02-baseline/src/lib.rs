//! Lab 2: the baseline. Single-device training of the CNN on Fashion-MNIST with a
//! training step of your own ([`exercise::YourStep`], a `TrainStep`) plugged
//! into `trainers`' real loop ([`trainers::train::baseline`]), timed phase by
//! phase; the reference solution is the step every trainer of `trainers` runs,
//! [`SgdStep`].
//!
//! The optional stretch goal, evaluating a model in eval mode and in batches,
//! is the learner's `src/stretch.rs`, compiled only by its own check
//! `tests/stretch.rs`; [`evaluation`] judges it, and
//! [`solution::evaluate`] is its solution.

pub mod diagnose;
pub mod evaluation;
pub mod exercise;
pub mod solution;

use std::path::Path;

use labkit::Variant;
use trainers::data::{self, Dataset, Split};
use trainers::train::baseline::{Baseline, BaselineRun, compare_steps};
use trainers::train::step::SgdStep;

/// Trains `config` with `variant`'s step (the learner's [`exercise::YourStep`]
/// or trainers' [`SgdStep`]).
pub fn train(
    variant: Variant,
    config: &Baseline,
    train_set: &Dataset,
    test_set: &Dataset,
) -> trainers::Result<BaselineRun> {
    match variant {
        Variant::Exercise => config.run(&mut exercise::YourStep, train_set, test_set),
        Variant::Solution => config.run(&mut SgdStep, train_set, test_set),
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

/// The self-check. First [`diagnose`] runs the step once on a tiny model: a
/// recognised mistake (a phase not timed, gradients not zeroed, ...) fails at
/// once, named. Then it trains [`check_config`] with `variant`'s step and with the
/// real one from the same seed on Fashion-MNIST; the training loss must fall and
/// the test loss and accuracy must match within `compare_steps`' tolerances
/// (see `trainers::train::baseline::LOSS_TOLERANCE`). Returns the summary.
pub fn check(variant: Variant) -> anyhow::Result<String> {
    tch::set_num_threads(1);
    let named = match variant {
        Variant::Exercise => diagnose::diagnose(&mut exercise::YourStep),
        Variant::Solution => diagnose::diagnose(&mut SgdStep),
    };
    if let Some(named) = named {
        anyhow::bail!("your step does not do what its contract says:{named}");
    }
    let (train_set, test_set) = load(Path::new(data::DEFAULT_DIR), 2_000)?;
    let config = check_config();
    let comparison = match variant {
        Variant::Exercise => compare_steps(&config, &mut exercise::YourStep, &train_set, &test_set),
        Variant::Solution => compare_steps(&config, &mut SgdStep, &train_set, &test_set),
    }?;
    comparison.verdict().map_err(anyhow::Error::msg)
}
