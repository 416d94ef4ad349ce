//! Lab 13, the file you edit: the ZeRO-2 gradient path. After the backward
//! of one unit (a layer: its weight and bias as one flat tensor, padded to a
//! multiple of the world size) every rank holds its own gradient of the whole
//! unit. Under ZeRO each rank owns one shard of the unit (rank r: block r) and
//! only that shard's optimizer state, so it needs only the *average* gradient
//! of its own shard, and updates only its shard.
//!
//! Useful: `shard.f_zeros_like()?` (a tensor shaped like the shard),
//! `trainers::comm::{buffer, buffer_mut}` (a tensor as a read-only or writable
//! collective buffer), `comm.reduce_scatter(Input::Buffer(buffer(grad)?), &mut
//! buffer_mut(&mut out)?, ReduceOp::Avg)` (block r of the average lands on
//! rank r), `trainers::zero::sgd_update(shard, &g, momentum, sgd)` (one SGD
//! step with momentum, in place).

// Until the TODO is done the imports and arguments below are unused; delete
// this line when you have finished, and the compiler will tell you what is left.
#![allow(unused_imports, unused_variables)]

use collectives::{Communicator, Input, ReduceOp};
use tch::Tensor;
use trainers::comm::{buffer, buffer_mut};
use trainers::zero::{GradPath, SgdStep, sgd_update};
use trainers::{Error, Result};

/// Your gradient path.
pub struct YourGradPath;

impl GradPath for YourGradPath {
    // ANCHOR: grad_path
    /// `grad`: this rank's gradient of the whole unit (`world · shard.numel()`
    /// elements). Leave in `shard` its parameters after one SGD step with the
    /// gradient averaged over the ranks.
    fn step(
        &self,
        comm: &dyn Communicator,
        grad: &Tensor,
        shard: &mut Tensor,
        momentum: &mut Option<Tensor>,
        sgd: SgdStep,
    ) -> Result<()> {
        // TODO(lab 13): the ZeRO-2 gradient path, in two steps:
        //  1. reduce-scatter `grad` with ReduceOp::Avg into a new tensor
        //     shaped like `shard`: rank r receives block r of the average,
        //     the only block its update needs (an all-reduce would deliver
        //     every block to every rank: twice the bytes, and a whole
        //     gradient's memory);
        //  2. update `shard` with that block and `momentum` (sgd_update).
        Err(labkit::todo!(13, "the ZeRO-2 gradient path"))
    }
    // ANCHOR_END: grad_path
}
