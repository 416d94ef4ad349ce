//! Lab 12's stretch goal, the file you edit (optional: lab 12 is done when
//! `cargo lab check 12` passes): **SyncBatchNorm's running statistics**.
//!
//! Your statistics normalise the training batch. At `eval()` a batch norm
//! uses its *running* statistics instead, which every training step moves
//! towards the batch's. Under SyncBatchNorm that batch is every rank's rows
//! together, so every rank moves its running statistics the same way, and the
//! model you save from rank 0 evaluates like the one that trained.
//!
//! **Contract.** `mean` and `var` are the whole batch's per-channel mean and
//! *biased* variance (what your `moments` returns), over `n` rows (every
//! rank's). Update `running_mean` and `running_var` in place, as PyTorch's
//! BatchNorm does with its default momentum 0.1, which keeps the *unbiased*
//! variance. `mean` and `var` carry autograd's graph (the loss depends on
//! them); the running statistics are buffers and must not.
//!
//! **To think through.** Which of the two does momentum 0.1 weigh by 0.1, the
//! old running value or the batch's? Why would the unbiased variance of 4
//! rows on one rank differ from that of the same rows inside SyncBN's 16?
//!
//! **What the check proves** (`cargo lab check 12 --stretch`): on numbers
//! whose answer it knows, your update is PyTorch's and leaves the buffers
//! outside autograd; then, with the statistics SyncBN gives on 2 and 3 ranks
//! of 8 rows, your running statistics after 10 steps equal those libtorch's
//! own BatchNorm keeps on the same rows (within 1e-5). It names statistics
//! left unchanged, a biased running variance, the momentum the wrong way
//! round, and buffers that joined the graph.

// Until the TODO is done the imports and arguments below are unused; delete
// this line when you have finished, and the compiler will tell you what is left.
#![allow(unused_imports, unused_variables)]

use tch::Tensor;
use trainers::{Error, Result};

/// This file, as the TODO error names it (`file!()` would name it from
/// tests/, which includes it).
const FILE: &str = "labs/12-ddp-recipes/src/stretch.rs";

// ANCHOR: update_running
/// Moves `running_mean` and `running_var` (in place) towards the batch's
/// `mean` and biased `var` over `n` rows.
pub fn update_running(
    running_mean: &Tensor,
    running_var: &Tensor,
    mean: &Tensor,
    var: &Tensor,
    n: f64,
) -> Result<()> {
    // TODO(lab 12 stretch): the running statistics. Stuck? `cargo lab hint 12 --stretch`.
    Err(Error::Seam(Box::new(labkit::stretch_todo(
        12,
        "SyncBatchNorm's running statistics",
        FILE,
    ))))
}
// ANCHOR_END: update_running
