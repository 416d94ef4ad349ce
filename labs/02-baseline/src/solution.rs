//! The reference solution of lab 2's stretch goal. (The main exercise's
//! solution, the training step, is trainers' own `SgdStep`.) trainers'
//! `evaluate` takes a `Dataset` and a sampler, for DDP's ranks; this is its
//! loop for one process over tensors, with the same `Tally`, which sums each
//! example's loss rather than each batch's mean.

use tch::Tensor;
use tch::nn::ModuleT;
use trainers::train::Tally;
use trainers::{Error, Result};

// ANCHOR: evaluate
/// `model`'s mean cross-entropy and accuracy over `(x, y)`, run in eval mode
/// in batches of `batch_size` rows.
pub fn evaluate(
    model: &dyn ModuleT,
    x: &Tensor,
    y: &Tensor,
    batch_size: usize,
) -> Result<(f64, f64)> {
    let rows = x.size().first().copied().unwrap_or(0);
    let labels = y.size().first().copied().unwrap_or(0);
    if batch_size == 0 || rows == 0 || rows != labels {
        return Err(Error::InvalidArgument(format!(
            "cannot evaluate {rows} inputs against {labels} labels in batches of {batch_size}"
        )));
    }
    let mut tally = Tally::new();
    for from in (0..rows).step_by(batch_size) {
        let len = (batch_size as i64).min(rows - from);
        let (xb, yb) = (x.f_narrow(0, from, len)?, y.f_narrow(0, from, len)?);
        // Eval mode: dropout off, BatchNorm by its running statistics (which
        // stay put). no_grad: nothing here will be backpropagated, so the
        // activations need not be kept.
        let logits = tch::no_grad(|| model.forward_t(&xb, false));
        // Tally adds every example's loss, so a small last batch counts for
        // its rows, not as much as a full one.
        tally.add_batch(&logits, &yb)?;
    }
    Ok((tally.loss(), tally.accuracy()))
}
// ANCHOR_END: evaluate
