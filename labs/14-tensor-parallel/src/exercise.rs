//! Lab 14, the file you edit: the row-parallel layer's forward, Megatron's
//! second half of a tensor-parallel MLP.
//!
//! Every rank holds a slice of the hidden activation (`input`, its
//! `[batch, hidden/world]` columns, made by the column-parallel `fc1` with no
//! communication) and the matching columns of `fc2`'s weight (`weight`,
//! `[out, hidden/world]`). The layer's output `input_full · W_fullᵀ + bias` is
//! a sum over the hidden features, so each rank can compute its own part of
//! the sum; one all-reduce adds the parts.
//!
//! What the check proves: on 2 ranks with inputs it chose, your output has
//! the whole layer's values on every rank and the backward of the output
//! reaches this rank's `input` and `weight` with their true gradients (this
//! names a known mistake); then on 2, 3 and 4 ranks the split MLP's first
//! forward and its parameters after 10 SGD steps equal the unsplit MLP's
//! within 1e-5, with exactly one all-reduce in each forward.

// Until the TODO is done the imports and arguments below are unused; delete
// this line when you have finished, and the compiler will tell you what is left.
#![allow(unused_imports, unused_variables)]

use collectives::{Communicator, Input, ReduceOp};
use tch::Tensor;
use trainers::comm::buffer_mut;
use trainers::tensor_parallel::RowForward;
use trainers::{Error, Result};

/// Your row-parallel layer.
pub struct YourRowParallel;

impl RowForward for YourRowParallel {
    // ANCHOR: row_forward
    /// The full layer's `[batch, out]` output, the same on every rank, with
    /// autograd reaching `input` and `weight` through it.
    fn forward(
        &self,
        comm: &dyn Communicator,
        input: &Tensor,
        weight: &Tensor,
        bias: &Tensor,
    ) -> Result<Tensor> {
        // TODO(lab 14): the row-parallel forward. The contract: the value
        // returned is `input_full · W_fullᵀ + bias` on every rank, computed
        // with one all-reduce; and autograd, run backward from it, must give
        // `input` and `weight` exactly the gradients the unsplit layer gives
        // their slices. A collective writes plain memory, which autograd does
        // not see: how does your output keep a gradient path to `input`?
        Err(labkit::todo!(14, "the row-parallel forward"))
    }
    // ANCHOR_END: row_forward
}
