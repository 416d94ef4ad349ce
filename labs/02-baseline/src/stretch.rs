//! Lab 2's stretch goal, the file you edit (optional: lab 2 is done when
//! `cargo lab check 2` passes): **evaluating a model**, as the baseline does
//! after its last step.
//!
//! A test set is too big for one forward, so it goes through the model in
//! batches; and a model with dropout or BatchNorm computes something else in
//! training mode (dropout zeroes activations at random, BatchNorm normalises
//! by the batch and moves its running statistics). Evaluation must be the
//! model's eval-mode function, summed over every example once.
//!
//! **Contract.** Run `model` over the rows of `x` in batches of `batch_size`
//! rows (the last may be smaller), in eval mode (`forward_t(.., false)`) and
//! without recording gradients (`tch::no_grad`), and return the mean
//! cross-entropy over all the examples and the fraction whose arg-max logit
//! is their label in `y`. A `batch_size` of 0, an empty set, or `x` and `y`
//! with different numbers of rows is an `Err(Error::InvalidArgument(..))`.
//!
//! **What the check proves** (`cargo lab check 2 --stretch`): on a model with
//! BatchNorm and dropout and 50 examples in batches of 16 (16, 16, 16 and 2),
//! your loss is within 1e-5 of the whole set's mean loss in eval mode and your
//! accuracy is exactly its accuracy; the model's running statistics did not
//! move; bad input is an error. It names training mode, the mean of the
//! batches' means, and a last batch left out.

// Until the TODO is done the imports and arguments below are unused; delete
// this line when you have finished, and the compiler will tell you what is left.
#![allow(unused_imports, unused_variables)]

use tch::Tensor;
use tch::nn::ModuleT;
use trainers::train::Tally;
use trainers::{Error, Result};

/// This file, as the TODO error names it (`file!()` would name it from
/// tests/, which includes it).
const FILE: &str = "labs/02-baseline/src/stretch.rs";

// ANCHOR: evaluate
/// `model`'s mean cross-entropy and accuracy over `(x, y)`, run in eval mode
/// in batches of `batch_size` rows.
pub fn evaluate(
    model: &dyn ModuleT,
    x: &Tensor,
    y: &Tensor,
    batch_size: usize,
) -> Result<(f64, f64)> {
    // TODO(lab 02 stretch): batches, eval mode, no gradients, every example
    // counted once. Stuck? `cargo lab hint 2 --stretch`.
    Err(Error::Seam(Box::new(labkit::stretch_todo(
        2,
        "the evaluation",
        FILE,
    ))))
}
// ANCHOR_END: evaluate
