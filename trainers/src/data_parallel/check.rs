//! The one check that a data-parallel step is the single-device step: trainers'
//! tests run it on [`Standard`](super::Standard), lab 4's self-check on the
//! learner's [`Pieces`].

use tch::Device;
use tch::nn::{self, ModuleT, OptimizerConfig};

use super::{DataParallel, Pieces, Replication};
use crate::data::Dataset;
use crate::models::Blueprint;
use crate::parity::store_diff;
use crate::train::cross_entropy;

/// Why a data-parallel run is not the single-device run.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// It could not run: a piece returned an error (an unsolved exercise's TODO), a
    /// bad argument, libtorch.
    #[error(transparent)]
    Failed(#[from] crate::Error),
    /// It ran and computed something else: what, where, and by how much.
    #[error("{0}")]
    Differs(String),
}

impl From<tch::TchError> for CheckError {
    fn from(e: tch::TchError) -> Self {
        CheckError::Failed(e.into())
    }
}

/// The steps [`equivalence`] compares.
pub const STEPS: usize = 10;

/// `flatten, fc1 (784→32), tanh, fc2`: the equivalence check's model. Smooth on
/// purpose: replicas run sgemm on fewer rows than one device, and libtorch's CPU
/// sgemm picks its kernel by row count, so pre-activations differ in their last
/// bits. Through tanh that stays a rounding-level difference in the gradient; at a
/// ReLU (or max-pool) input within rounding of its kink, the gate flips and that
/// sample's gradient path switches on or off (seen in CI: a 4e-5 loss gap after 6
/// steps, where this machine had 5e-7).
pub fn smooth_mlp() -> Blueprint {
    Blueprint::new("smooth-mlp")
        .layer("flatten", |_| Box::new(nn::func(|x| x.flatten(1, -1))))
        .and_then(|b| {
            b.layer("fc1", |p| {
                Box::new(nn::linear(p, 784, 32, Default::default()))
            })
        })
        .and_then(|b| b.layer("tanh", |_| Box::new(nn::func(|x| x.tanh()))))
        .and_then(|b| {
            b.layer("fc2", |p| {
                Box::new(nn::linear(p, 32, 10, Default::default()))
            })
        })
        .expect("the smooth MLP's layer names are distinct and valid")
}

// ANCHOR: equivalence
/// [`STEPS`] SGD steps of `blueprint` over `devices` through `pieces`, each compared
/// with the same step on one CPU device *from the same parameters* (the single-device
/// copy is re-synced before every step), then one inference pass
/// ([`DataParallel::forward`]). Returns the largest |Δparam| seen.
///
/// What DataParallel promises is that one step computes the single-device step up
/// to rounding; comparing two free-running trajectories would instead test how fast
/// the model amplifies rounding, which depends on the CPU. `param_tol` bounds max
/// |Δparam| after a step: for [`smooth_mlp`], lr × gradient rounding (1e-6 is ~100×
/// what any machine here showed); a ReLU/max-pool model needs more (see trainers'
/// CNN test). Batches are consecutive rows of `data`, which needs
/// `(STEPS + 1) × batch` of them.
pub fn equivalence(
    blueprint: fn() -> Blueprint,
    pieces: Box<dyn Pieces>,
    devices: &[Device],
    replication: Replication,
    data: &Dataset,
    batch: usize,
    param_tol: f64,
) -> Result<f64, CheckError> {
    let what = format!(
        "{} replicas ({replication:?}, batch {batch})",
        devices.len()
    );
    let differs = |s: String| Err(CheckError::Differs(format!("{what}: {s}")));
    if data.len() < (STEPS + 1) * batch {
        return differs(format!(
            "needs {} examples, the data set has {}",
            (STEPS + 1) * batch,
            data.len()
        ));
    }
    tch::set_num_threads(1);
    let mut dp = DataParallel::new(blueprint, devices, replication)?.with_pieces(pieces);
    let mut single_vs = nn::VarStore::new(Device::Cpu);
    let single = blueprint().build(&single_vs.root());
    let mut before = nn::VarStore::new(Device::Cpu);
    let _ = blueprint().build(&before.root());
    before.copy(dp.var_store())?;

    // lr 0.01 (the 0.01·world): at 0.1 the CNN diverges on synthetic data.
    let mut dp_opt = nn::Sgd::default().build(dp.var_store(), 0.01)?;
    let mut opt = nn::Sgd::default().build(&single_vs, 0.01)?;
    let mut worst = 0.0f64;
    for step in 0..STEPS {
        single_vs.copy(dp.var_store())?;
        let idx: Vec<usize> = (step * batch..(step + 1) * batch).collect();
        let (x, y) = data.batch(&idx)?;
        let t = dp.step(&x, &y, cross_entropy, &mut dp_opt)?;
        if t.replicas != devices.len().min(batch) {
            return differs(format!(
                "step {step} used {} replicas, expected {}",
                t.replicas,
                devices.len().min(batch)
            ));
        }
        let l = cross_entropy(&single.forward_t(&x, true), &y)?;
        let want = l.f_double_value(&[])?;
        // The loss is a continuous function of the logits (also through ReLU and
        // max-pool), so it differs only by rounding: relative 1e-5 is ~20× the
        // largest gap seen.
        if (want - t.loss_value).abs() > 1e-5 * want.abs().max(1.0) {
            return differs(format!(
                "step {step}: loss {} over the replicas, {want} on one device",
                t.loss_value
            ));
        }
        opt.backward_step(&l);
        let diff = store_diff(dp.var_store(), &single_vs)?;
        worst = worst.max(diff);
        if diff > param_tol {
            return differs(format!(
                "step {step}: max |Δparam| = {diff:e} > {param_tol:e} after the step"
            ));
        }
    }
    // The parameters did move (so the comparison above compared training steps).
    let moved = store_diff(dp.var_store(), &before)?;
    if moved <= 1e-3 {
        return differs(format!(
            "the parameters moved only {moved:e} in {STEPS} steps"
        ));
    }

    // Inference: the gathered outputs are one device's, row for row. Replicas see
    // fewer rows and libtorch's sgemm picks its kernel by row count, so rows can
    // differ in their last bits: a tolerance relative to the logits' size.
    let idx: Vec<usize> = (STEPS * batch..(STEPS + 1) * batch).collect();
    let (x, _) = data.batch(&idx)?;
    single_vs.copy(dp.var_store())?;
    let want = tch::no_grad(|| single.forward_t(&x, false));
    let got = dp.forward(&x)?.f_to_device(Device::Cpu)?;
    if got.size() != want.size() {
        return differs(format!(
            "forward gathered shape {:?}, one device computes {:?}",
            got.size(),
            want.size()
        ));
    }
    let scale = want.f_abs()?.f_max()?.f_double_value(&[])?;
    let diff = got.f_sub(&want)?.f_abs()?.f_max()?.f_double_value(&[])?;
    if diff > 1e-5 * scale.max(1.0) {
        return differs(format!(
            "forward: max |Δlogit| = {diff:e} against one device (largest logit {scale:e})"
        ));
    }
    Ok(worst)
}
// ANCHOR_END: equivalence
