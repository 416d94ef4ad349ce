//! The reference solution of lab 4's stretch goal. (The main exercise's
//! solution, the five pieces, is trainers' own `Standard`.) It lives in the
//! lab, not in trainers: trainers' `DataParallel::step` always takes its batch
//! whole, and its multi-rank accumulation is `Ddp::no_sync`; this loop around
//! a model is the lesson itself. The check compares it with its own
//! whole-batch step, written apart (`accumulate::step_with`).

use tch::Tensor;
use tch::nn::{self, ModuleT};
use trainers::train::cross_entropy;
use trainers::{Error, Result};

// ANCHOR: accumulated_step
/// One optimizer step of `model` on the batch `(x, y)`, its gradients summed
/// over `micro_batches` micro-batches; returns the batch's mean loss.
pub fn accumulated_step(
    model: &dyn ModuleT,
    opt: &mut nn::Optimizer,
    x: &Tensor,
    y: &Tensor,
    micro_batches: usize,
) -> Result<f64> {
    let rows = x.size().first().copied().unwrap_or(0);
    if micro_batches == 0 || micro_batches as i64 > rows {
        return Err(Error::InvalidArgument(format!(
            "cannot split a batch of {rows} rows into {micro_batches} micro-batches"
        )));
    }
    opt.zero_grad();
    let mut loss = 0.0;
    let xs = x.f_chunk(micro_batches as i64, 0)?;
    let ys = y.f_chunk(micro_batches as i64, 0)?;
    for (xi, yi) in xs.iter().zip(&ys) {
        // The batch's mean is the micro-batches' means weighted by their
        // rows: scaling each loss by its share makes the summed gradient the
        // batch's, even when the last micro-batch is smaller.
        let share = xi.size()[0] as f64 / rows as f64;
        let l = cross_entropy(&model.forward_t(xi, true), yi)?.f_mul_scalar(share)?;
        l.f_backward()?;
        loss += l.f_double_value(&[])?;
    }
    opt.step();
    Ok(loss)
}
// ANCHOR_END: accumulated_step
