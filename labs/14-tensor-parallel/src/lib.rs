//! Lab 14: tensor parallelism. A Megatron-style MLP block (`fc1` split by
//! columns, `fc2` by rows) runs across 2–4 ranks that all see the same batch:
//! one all-reduce in forward, one in backward. The learner writes the
//! row-parallel forward ([`exercise::YourRowParallel`], a [`RowForward`] that
//! trainers' [`TpModel`](trainers::tensor_parallel::TpModel) calls); the
//! solution is trainers' own [`AllReduceRow`]. The program checks the split
//! model against the unsplit one and measures it against data parallelism at
//! the same model size: parameters and activations per rank, bytes all-reduced
//! per step, step time.

pub mod exercise;

pub use labkit_torch::{fashion_mnist, lab_error};
use std::sync::Arc;

use labkit::{LabError, Variant};
use trainers::data::{self, Dataset};
use trainers::tensor_parallel::check::{self, Equivalence};
use trainers::tensor_parallel::{AllReduceRow, RowForward, TpConfig};

/// `variant`'s row-parallel forward.
pub fn row(variant: Variant) -> Arc<dyn RowForward> {
    match variant {
        Variant::Exercise => Arc::new(exercise::YourRowParallel),
        Variant::Solution => Arc::new(AllReduceRow),
    }
}

/// The check's model: hidden 160 splits unevenly over 3 ranks (54, 53, 53).
pub fn check_config() -> TpConfig {
    TpConfig {
        input: 784,
        width: 40,
        hidden: 160,
        classes: 10,
    }
}

/// The largest |Δ| the check accepts after 10 SGD steps: the split sums add
/// `world` partial sums where the unsplit model adds one, a rounding of about
/// 1e-7 per step (GELU is smooth, so it does not grow); a wrong output is off
/// by far more.
pub const TOLERANCE: f64 = 1e-5;

/// `variant`'s split model on `world` ranks against the unsplit one, 10
/// steps of 32 rows of `data`, judged: forward values, one all-reduce each
/// way, parameters after training.
pub fn judge(variant: Variant, world: usize, data: &Dataset) -> Result<Equivalence, LabError> {
    let e =
        check::equivalence(check_config(), world, 32, 10, data, row(variant)).map_err(lab_error)?;
    let fwd = e.forward_all_reduces.first().copied().unwrap_or(0);
    if e.forward_all_reduces.iter().any(|&n| n != 1) {
        return Err(LabError::Wrong(format!(
            "on {world} ranks your forward made {fwd} all-reduce call(s) per step; the row-parallel \
             layer needs exactly one (of the partial sums)"
        )));
    }
    if e.first_logits_diff.is_nan() || e.first_logits_diff > TOLERANCE {
        return Err(LabError::Wrong(format!(
            "on {world} ranks the first forward's logits differ from the unsplit MLP's by up to \
             {:.3e} (allowed {TOLERANCE:e}): is every rank's partial sum in the total, and the \
             bias added once, after the all-reduce?",
            e.first_logits_diff
        )));
    }
    if e.max_diff.is_nan() || e.max_diff > TOLERANCE || e.moved < 1e-3 {
        return Err(LabError::Wrong(format!(
            "on {world} ranks the forward is right but after 10 steps the parameters differ \
             from the unsplit MLP's by up to {:.3e} (allowed {TOLERANCE:e}): does the gradient \
             reach `input` and `weight` through your output exactly once (the all-reduce's \
             backward is the identity)?",
            e.max_diff
        )));
    }
    Ok(e)
}

/// The self-check (`cargo lab check 14`): on 2, 3 and 4 ranks the split MLP's
/// first forward and its parameters after 10 SGD steps equal the unsplit
/// MLP's within [`TOLERANCE`], with one all-reduce in each forward and one in
/// each backward.
pub fn check(variant: Variant) -> Result<String, LabError> {
    let data = data::synthetic(320, 14).map_err(lab_error)?;
    let mut said = Vec::new();
    for world in [2, 3, 4] {
        let e = judge(variant, world, &data)?;
        said.push(format!("{world} ranks: max |Δ| {:.1e}", e.max_diff));
    }
    Ok(format!(
        "the split MLP trains like the unsplit one ({}), one all-reduce in each forward and \
         one in each backward",
        said.join(", ")
    ))
}
