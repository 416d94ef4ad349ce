//! The reference solution of lab 10's stretch goal. (The main exercise's
//! solution, the compression hook, is trainers' own `Compressed`.)

use labkit::LabError;
use labkit_torch::lab_error;
use trainers::lr::{LrSchedule, Scaling};

// ANCHOR: lr_at
/// The learning rate of optimizer step `step` under the linear-scaling rule
/// with a linear warm-up: trainers' [`LrSchedule`], the schedule the lab's
/// program trains with, whose constructor refuses bad batches and rates.
pub fn lr_at(
    base_lr: f64,
    base_batch: usize,
    batch: usize,
    warmup_steps: u64,
    step: u64,
) -> Result<f64, LabError> {
    let schedule = LrSchedule::new(base_lr, base_batch, batch, Scaling::Linear, warmup_steps)
        .map_err(lab_error)?;
    Ok(schedule.lr_at(step))
}
// ANCHOR_END: lr_at
