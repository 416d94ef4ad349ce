//! Lab 4's stretch goal, the file you edit (optional: lab 4 is done when
//! `cargo lab check 4` passes): **gradient accumulation**.
//!
//! DataParallel splits a batch over devices and sums their gradients before
//! one optimizer step. When a batch does not fit in memory at all, the same
//! sum can be made over time instead of over devices: forward and backward
//! one micro-batch after another, letting the gradients add up in `.grad`,
//! then step once. Done right, the step is the whole-batch step, up to
//! rounding; DDP's `no_sync` (labs 7 and 10) does the same across ranks,
//! all-reducing only after the last micro-batch.
//!
//! **Contract.** Zero the gradients, split `x` and `y` into `micro_batches`
//! micro-batches along dimension 0 (any split: `chunk` is fine), run each
//! through `model` in training mode with `trainers::train::cross_entropy`
//! (a mean over the micro-batch's rows) and backward, then take one
//! `opt.step()`. The parameters must end where one step on the whole batch's
//! mean loss puts them; return that mean loss. 0 micro-batches, or more than
//! there are rows, is an `Err(Error::InvalidArgument(..))`.
//!
//! **What the check proves** (`cargo lab check 4 --stretch`): on trainers'
//! smooth check model with plain SGD, two steps in a row of 32 rows in 4
//! micro-batches, and of 30 rows in 4 (8, 8, 8 and 6 rows), each within
//! 1e-6 of the whole-batch step from the same parameters, with the batch's
//! mean loss. It names unscaled micro-batch losses, a division by the
//! micro-batch count where the rows differ, gradients zeroed before every
//! micro-batch or never, and a step per micro-batch.

// Until the TODO is done the imports and arguments below are unused; delete
// this line when you have finished, and the compiler will tell you what is left.
#![allow(unused_imports, unused_variables)]

use tch::Tensor;
use tch::nn::{self, ModuleT};
use trainers::train::cross_entropy;
use trainers::{Error, Result};

/// This file, as the TODO error names it (`file!()` would name it from
/// tests/, which includes it).
const FILE: &str = "labs/04-data-parallel/src/stretch.rs";

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
    // TODO(lab 04 stretch): zero, accumulate the micro-batches, step once.
    // Stuck? `cargo lab hint 4 --stretch`.
    Err(Error::Seam(Box::new(labkit::stretch_todo(
        4,
        "gradient accumulation",
        FILE,
    ))))
}
// ANCHOR_END: accumulated_step
