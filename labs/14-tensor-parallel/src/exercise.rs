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
//! Useful: `a.f_matmul(&b.f_tr()?)`, `t.f_detach()?.copy()` (a copy outside
//! autograd, which a collective may write), `trainers::comm::buffer_mut(&mut t)`,
//! `comm.all_reduce(Input::InPlace, &mut buf, ReduceOp::Sum)`, `a.f_add(&b)`,
//! `a.f_sub(&b)`.

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
        // TODO(lab 14): the row-parallel forward, in four steps:
        //  1. `partial` = input · weightᵀ: this rank's part of the sum over
        //     the hidden features (autograd records it);
        //  2. all-reduce a detached copy of `partial` with ReduceOp::Sum: the
        //     collective writes plain memory, which autograd does not see;
        //  3. the all-reduced tensor has no gradient history, so backward
        //     would stop at it. Return a tensor with its values *and*
        //     `partial`'s history: `total + (partial − partial.detach())`
        //     (the bracket is exactly zero; its gradient passes straight to
        //     `partial`, which is what the all-reduce's backward must do);
        //  4. add the bias, once, after the sum.
        Err(labkit::todo!(14, "the row-parallel forward"))
    }
    // ANCHOR_END: row_forward
}
