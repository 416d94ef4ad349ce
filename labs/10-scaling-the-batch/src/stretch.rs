//! Lab 10's stretch goal, the file you edit (optional: lab 10 is done when
//! `cargo lab check 10` passes): **the linear-scaling rule with its warm-up**,
//! the learning-rate schedule every run of this lab trains with.
//!
//! A rate `base_lr` was tuned at batch `base_batch`; training runs at the
//! effective batch `batch`, k = batch / base_batch times larger (k need not be
//! a whole number). The linear rule's rate is `base_lr · k`. Reached at once
//! it can diverge, so it is reached by a warm-up: the rate rises in equal
//! steps from `base_lr` at step 0 to `base_lr · k` at step `warmup_steps`, and
//! stays there.
//!
//! **Contract.** Return the rate of optimizer step `step` (0-based). With
//! `warmup_steps == 0` every step, step 0 included, has the scaled rate. A
//! batch or base batch of 0, or a base rate that is not a positive number, is
//! an `Err(LabError::Wrong(..))` saying why, never an infinity or a NaN (the
//! optimizer would write it into every weight).
//!
//! **What the check proves** (`cargo lab check 10 --stretch`): at base rate
//! 0.1 tuned for batch 64, your rates for steps 0 to 12 at batch 512 with a
//! 10-step warm-up are 0.1, 0.17, …, 0.73, then 0.8; at batch 96 with no
//! warm-up, 0.15 from step 0; and bad batches are errors. It names a warm-up
//! that starts at 0, one that is a step early or late, no warm-up at all, the
//! square-root rule, an upside-down ratio, an integer ratio, and 0/0.

// Until the TODO is done the arguments below are unused; delete this line
// when you have finished, and the compiler will tell you what is left.
#![allow(unused_variables)]

use labkit::LabError;

/// This file, as the TODO error names it (`file!()` would name it from
/// tests/, which includes it).
const FILE: &str = "labs/10-scaling-the-batch/src/stretch.rs";

// ANCHOR: lr_at
/// The learning rate of optimizer step `step` under the linear-scaling rule
/// with a linear warm-up over `warmup_steps` steps.
pub fn lr_at(
    base_lr: f64,
    base_batch: usize,
    batch: usize,
    warmup_steps: u64,
    step: u64,
) -> Result<f64, LabError> {
    // TODO(lab 10 stretch): check the inputs, scale the rate, warm up to it.
    // Stuck? `cargo lab hint 10 --stretch`.
    Err(labkit::stretch_todo(
        10,
        "the linear-scaling schedule",
        FILE,
    ))
}
// ANCHOR_END: lr_at
