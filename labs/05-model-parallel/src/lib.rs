//! Lab 5: model parallelism. The CNN is cut into stages over devices (CPU + GPU when a
//! GPU exists, two CPU threads otherwise) and trained on Fashion-MNIST by ringside's
//! pipeline (`trainers::pipeline::Pipeline`) with a schedule: first the naive one
//! (stage after stage), then GPipe's micro-batches. The learner writes the two
//! schedules ([`exercise`]); the reference solution is trainers' own [`Naive`] and
//! [`GPipe`], reached through the same slot ([`Schedule`]).
//!
//! The optional stretch goal, the 1F1B schedule, is the learner's
//! `src/stretch.rs`, compiled only by its own check `tests/stretch.rs`;
//! [`one_f_one_b`] judges it, and its solution is trainers' own
//! [`OneFOneB`](trainers::pipeline::OneFOneB).

pub mod diagnose;
pub mod exercise;
pub mod one_f_one_b;

use labkit::{LabError, Variant};
use tch::Device;
use trainers::models::{self, Blueprint, MlpConfig};
use trainers::pipeline::{self, Action, GPipe, Naive, Schedule, check, theoretical_bubble};

/// Where the CNN is cut into two stages: before `conv2`, the cut that balances them best
/// on a CPU (at batch 64 on one thread, forward and backward, about 14 ms for
/// `conv1 relu1 pool1` and 14 ms for the rest; any later cut leaves the second stage
/// under a millisecond).
pub const CUT: &str = "conv2";

/// The two schedules of the lab.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One micro-batch at a time, forward and backward, stage after stage.
    Naive,
    /// All forwards, then all backwards: the stages overlap.
    GPipe,
}

impl Kind {
    /// Both, in the order the lab runs them.
    pub const ALL: [Kind; 2] = [Kind::Naive, Kind::GPipe];

    /// `naive` or `GPipe`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Naive => "naive",
            Kind::GPipe => "GPipe",
        }
    }

    /// The idle share of each of `stages` equal stages with `micro_batches`
    /// micro-batches: `(S-1)/S` naive, `(S-1)/(M+S-1)` GPipe.
    pub fn bubble(self, stages: usize, micro_batches: usize) -> f64 {
        match self {
            Kind::Naive => theoretical_bubble(stages, 1),
            Kind::GPipe => theoretical_bubble(stages, micro_batches),
        }
    }

    /// [`bubble`](Self::bubble) as a formula.
    pub fn rule(self) -> &'static str {
        match self {
            Kind::Naive => "(S-1)/S",
            Kind::GPipe => "(S-1)/(M+S-1)",
        }
    }
}

/// A schedule as the exercise writes it: stage, stages, micro-batches → the
/// stage's actions (so that a test can feed the check a mistaken one).
pub type ActionsFn = fn(usize, usize, usize) -> Result<Vec<Action>, LabError>;

/// The schedule of `kind`: the learner's (from [`exercise`]) or trainers' own.
pub fn schedule(variant: Variant, kind: Kind) -> Box<dyn Schedule> {
    match (variant, kind) {
        (Variant::Exercise, kind) => Box::new(Yours(kind, exercise_fn(kind))),
        (Variant::Solution, Kind::Naive) => Box::new(Naive),
        (Variant::Solution, Kind::GPipe) => Box::new(GPipe),
    }
}

/// The exercise's function for `kind`.
fn exercise_fn(kind: Kind) -> ActionsFn {
    match kind {
        Kind::Naive => exercise::naive,
        Kind::GPipe => exercise::gpipe,
    }
}

/// A learner's schedule of one kind, plugged into the pipeline's slot.
struct Yours(Kind, ActionsFn);

impl Schedule for Yours {
    fn name(&self) -> &str {
        match self.0 {
            Kind::Naive => "naive (yours)",
            Kind::GPipe => "GPipe (yours)",
        }
    }

    fn actions(
        &self,
        stage: usize,
        stages: usize,
        micro_batches: usize,
    ) -> trainers::Result<Vec<Action>> {
        (self.1)(stage, stages, micro_batches).map_err(|e| trainers::Error::Pipeline(e.to_string()))
    }
}

/// Stage `stage`'s actions under the schedule of `kind`, as a lab error: an
/// unsolved exercise gives its `TODO(lab 05)` error itself.
pub fn actions(
    variant: Variant,
    kind: Kind,
    stage: usize,
    stages: usize,
    micro_batches: usize,
) -> Result<Vec<Action>, LabError> {
    match (variant, kind) {
        (Variant::Exercise, Kind::Naive) => exercise::naive(stage, stages, micro_batches),
        (Variant::Exercise, Kind::GPipe) => exercise::gpipe(stage, stages, micro_batches),
        (Variant::Solution, kind) => schedule(variant, kind)
            .actions(stage, stages, micro_batches)
            .map_err(|e| LabError::Wrong(e.to_string())),
    }
}

/// A trainers error as the lab's "wrong result".
pub fn wrong(e: trainers::Error) -> LabError {
    LabError::Wrong(e.to_string())
}

/// Checks `kind`'s schedule on paper, before anything runs: it is complete, does not
/// deadlock, and replayed on equal stages it idles as its rule says, for 2 and 3 stages
/// and 1 to 8 micro-batches. Fast; the program runs it first.
pub fn check_on_paper(variant: Variant, kind: Kind) -> Result<(), LabError> {
    match variant {
        Variant::Exercise => check_on_paper_with(kind, exercise_fn(kind)),
        Variant::Solution => {
            let schedule = schedule(variant, kind);
            bubbles(kind, schedule.as_ref(), String::new)
        }
    }
}

/// [`check_on_paper`] for any schedule function of `kind`: a failure names the
/// mistake when [`diagnose::diagnose`] recognises it (a `hint: <key>` line).
pub fn check_on_paper_with(kind: Kind, f: ActionsFn) -> Result<(), LabError> {
    // The learner's unsolved TODO comes back as itself, not wrapped.
    f(0, 2, 1)?;
    let named = || diagnose::diagnose(kind, f).unwrap_or_default();
    bubbles(kind, &Yours(kind, f), named)
}

/// The replay of `schedule` on equal stages, each failure followed by `named()`.
fn bubbles(
    kind: Kind,
    schedule: &dyn Schedule,
    named: impl Fn() -> String,
) -> Result<(), LabError> {
    for (stages, m) in [(2, 1), (2, 2), (2, 4), (3, 3), (3, 8), (4, 5)] {
        check::bubble(schedule, stages, m, kind.bubble(stages, m), kind.rule())
            .map_err(|e| LabError::Wrong(format!("{e}{}", named())))?;
    }
    Ok(())
}

/// The MLP of trainers' own pipeline tests: small, so 10 steps take milliseconds.
pub(crate) fn mlp() -> Blueprint {
    models::mlp(&MlpConfig {
        hidden: vec![32, 16],
        ..Default::default()
    })
}

/// The self-check, for both schedules: [`check_on_paper`], then trainers' equivalence
/// check (the one its own tests use): each of 10 SGD steps through the pipeline equals
/// the unsplit model's step from the same parameters (|Δ| ≤ 1e-5) for an MLP on 2 and 3 CPU stages with 1 to 12
/// micro-batches, and for the lab's CNN cut before `conv2` on the lab's devices (CPU
/// + GPU where there is one).
pub fn check(variant: Variant) -> Result<(), LabError> {
    for kind in Kind::ALL {
        check_on_paper(variant, kind)?;
    }
    for kind in Kind::ALL {
        let schedule = schedule(variant, kind);
        let s = schedule.as_ref();
        for m in [1, 2, 5, 12] {
            check::equivalence(s, mlp, &["fc2"], &[Device::Cpu; 2], m, 12).map_err(wrong)?;
        }
        check::equivalence(s, mlp, &["fc2", "fc3"], &[Device::Cpu; 3], 4, 10).map_err(wrong)?;
        check::equivalence(s, models::cnn, &[CUT], &pipeline::devices(2), 4, 8).map_err(wrong)?;
    }
    Ok(())
}
