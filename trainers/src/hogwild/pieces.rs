//! The seam of Hogwild: the pieces that put the parameters into the shared region
//! and update them there without a lock. Everything around them (the region, the
//! worker processes, the data, the model, the loop, the evaluation) is fixed;
//! [`run_with`] and [`worker_from_env_with`] take any [`Pieces`], [`run`] and
//! [`worker_from_env`] use trainers' own, [`Reference`]. Lab 3's learner writes
//! the three methods and plugs them in here.
//!
//! After each piece the parent or worker checks what it can (the region holds the
//! model's numbers; every parameter's data lies in the region), so a wrong piece
//! fails at once with a sentence saying what is wrong, not as a loss that does not
//! fall.

use super::*;

/// The pieces of Hogwild that a learner can replace (lab 3).
///
/// `params` are the model's trainable parameters and `shared` tensors over the
/// shared region, both in the same (name) order, with the same shapes, `f32` on the
/// CPU. `Sync`: one value serves every call of a run.
pub trait Pieces: Sync {
    /// In the parent, before any worker starts: write the model's initial numbers
    /// into the shared region (PyTorch's `model.share_memory()` moves them there).
    fn fill(&self, params: &[Tensor], shared: &[Tensor]) -> Result<()>;

    /// In each worker, once the region is mapped: make every parameter *use* the
    /// shared numbers (not a copy of them), so that the update writes into the
    /// region and every other worker sees it.
    fn attach(&self, params: &[Tensor], shared: &[Tensor]) -> Result<()>;

    /// In each worker, after `backward`: one SGD step `p ← p − lr·∇p` on every
    /// parameter, in place, with no lock; then clear the gradients for the next step.
    fn update(&self, params: &[Tensor], lr: f64) -> Result<()>;
}

/// trainers' own pieces: what [`run`] and [`worker_from_env`] use.
#[derive(Debug, Clone, Copy, Default)]
pub struct Reference;

impl Pieces for Reference {
    // ANCHOR: fill
    fn fill(&self, params: &[Tensor], shared: &[Tensor]) -> Result<()> {
        // A copy of the numbers: the parent's own parameters stay where they are.
        tch::no_grad(|| {
            for (region, p) in shared.iter().zip(params) {
                region.shallow_clone().f_copy_(p)?;
            }
            Ok(())
        })
    }
    // ANCHOR_END: fill

    // ANCHOR: attach
    fn attach(&self, params: &[Tensor], shared: &[Tensor]) -> Result<()> {
        for (p, region) in params.iter().zip(shared) {
            // The parameter keeps its identity (autograd still fills its `.grad`),
            // but its storage is now the shared one: no copy, the same bytes.
            p.shallow_clone().f_set_data(region)?;
        }
        Ok(())
    }
    // ANCHOR_END: attach

    // ANCHOR: update
    fn update(&self, params: &[Tensor], lr: f64) -> Result<()> {
        tch::no_grad(|| {
            for p in params {
                let mut grad = p.f_grad()?;
                if !grad.defined() {
                    continue; // not used by this batch's graph
                }
                // Straight into the shared pages. Other workers read and write the
                // same numbers meanwhile; Hogwild! accepts those races because each
                // step touches every number only a little.
                let _ = p.shallow_clone().f_sub_(&grad.f_mul_scalar(lr)?)?;
                let _ = grad.f_zero_()?;
            }
            Ok(())
        })
    }
    // ANCHOR_END: update
}

/// After [`Pieces::fill`]: the region must hold exactly the model's numbers (a
/// copy is exact).
pub(super) fn check_filled(names: &[String], params: &[Tensor], shared: &[Tensor]) -> Result<()> {
    for ((name, p), region) in names.iter().zip(params).zip(shared) {
        if !tch::no_grad(|| region.f_equal(p))? {
            return Err(Error::Seam(
                format!(
                    "after fill, the shared region does not hold the model's {name}: \
                 copy every parameter's numbers into its shared tensor"
                )
                .into(),
            ));
        }
    }
    Ok(())
}

/// After [`Pieces::attach`]: every parameter's numbers must lie in the region
/// (the same address as its shared tensor), else the updates stay private.
pub(super) fn check_attached(names: &[String], params: &[Tensor], shared: &[Tensor]) -> Result<()> {
    for ((name, p), region) in names.iter().zip(params).zip(shared) {
        if p.data_ptr() != region.data_ptr() {
            return Err(Error::Seam(
                format!(
                    "after attach, {name} does not use the shared memory (its numbers are at \
                 {:?}, the region's at {:?}): a copy would train this worker's private \
                 numbers; make the parameter's data the shared tensor itself",
                    p.data_ptr(),
                    region.data_ptr()
                )
                .into(),
            ));
        }
    }
    Ok(())
}
