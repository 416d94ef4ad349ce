//! Lab 14's stretch goal, the file you edit (optional: lab 14 is done when
//! `cargo lab check 14` passes): the **column-parallel layer with its output
//! gathered**, the partner of the row-parallel one.
//!
//! The block's `fc1` is column-parallel and keeps its output split: the
//! row-parallel `fc2` wants exactly that slice. A column-parallel layer that
//! *ends* a block (Megatron's `gather_output=True`, the output layer of a
//! language model) must hand every rank the whole output instead.
//!
//! **Contract.** `input` is the whole `[batch, in]` input (the same on every
//! rank). This rank r holds rows `shard(out, r, world)` of the full `[out,
//! in]` weight (`weight`, `[len_r, in]`) and the same rows of the bias
//! (`bias`, `[len_r]`): `trainers::tensor_parallel::shard` says which, and
//! when `out` does not divide by the world the first ranks hold one more.
//! Return, on every rank, the whole layer's `[batch, out]` output
//! `input · W_fullᵀ + b_full`, its columns in rank order, with no
//! all-reduce; and autograd, run backward from it, must give this rank's
//! `weight` and `bias` the unsplit layer's gradients of their rows, and
//! `input` this rank's part of its gradient (the caller adds the parts, as
//! lab 14's backward does).
//!
//! **To think through.** A collective concatenates flat memory, rank after
//! rank: is that the layout of a `[batch, out]` tensor's columns? What does
//! a collective need when the ranks' slices differ in length? And, as in the
//! row-parallel layer, a collective writes plain memory that autograd does
//! not see: which part of the gathered output may carry this rank's gradient?
//!
//! **What the check proves** (`cargo lab check 14 --stretch`): on 2, 3 and 4
//! ranks (10 output features: shards of 5, then 4-3-3, then 3-3-2-2), with
//! values chosen so that every sum is exact, every rank's output equals the
//! unsplit layer's, each rank's weight and bias gradients equal the unsplit
//! layer's rows and the ranks' input gradients add up to its input gradient,
//! and no rank called an all-reduce. It names blocks laid out as rows, an
//! output that is only this rank's columns, an output with no autograd
//! history, and an all-reduce that moves twice the bytes.

// Until the TODO is done the imports and arguments below are unused; delete
// this line when you have finished, and the compiler will tell you what is left.
#![allow(unused_imports, unused_variables)]

use collectives::{Communicator, Input};
use tch::Tensor;
use trainers::comm::{buffer, buffer_mut};
use trainers::tensor_parallel::shard;
use trainers::{Error, Result};

/// This file, as the TODO error names it (`file!()` would name it from
/// tests/, which includes it).
const FILE: &str = "labs/14-tensor-parallel/src/stretch.rs";

// ANCHOR: column_forward
/// The whole `[batch, out]` output of a layer whose `out` output features
/// are split over the ranks by [`shard`], on every rank.
pub fn column_forward(
    comm: &dyn Communicator,
    input: &Tensor,
    weight: &Tensor,
    bias: &Tensor,
    out: i64,
) -> Result<Tensor> {
    // TODO(lab 14 stretch): the gathered column-parallel forward. Stuck? `cargo lab hint 14 --stretch`.
    Err(Error::Seam(Box::new(labkit::stretch_todo(
        14,
        "the gathered column-parallel forward",
        FILE,
    ))))
}
// ANCHOR_END: column_forward
