//! Lab 10, the file you edit: gradient compression as a DDP communication
//! hook, as PyTorch's `fp16_compress_hook` and `bf16_compress_hook`. trainers'
//! `Ddp` calls your `all_reduce_mean` once per bucket with the bucket's f32
//! gradients; you send them as 16-bit floats (half the bytes) and leave their
//! average across the ranks in the bucket, as f32.
//!
//! What the check proves, on 2 and 3 ranks: your fp16 and bf16 averages are
//! within the 16-bit rounding of the f32 average and the all-reduce moves half
//! the f32 bytes; gradients whose *sum* would pass fp16's largest value
//! (65,504) but whose mean does not average without overflow; and a mean
//! beyond it is an `Err(Error::InvalidArgument)`, never infinities in the
//! gradients (they would ruin the weights at the next step).

// Until the TODO is done the imports and arguments below are unused; delete
// this line when you have finished, and the compiler will tell you what is left.
#![allow(unused_imports, unused_variables, unused_mut)]

use collectives::{Communicator, Input, ReduceOp};
use tch::{Kind, Tensor};
use trainers::comm::buffer_mut;
use trainers::ddp::{GradSync, Standard};
use trainers::{Error, Result};

/// Your compression hook: the gradients travel as `kind` (`Kind::Half` for
/// fp16, `Kind::BFloat16` for bf16).
pub struct YourCompression {
    /// The 16-bit kind on the wire.
    pub kind: Kind,
}

impl GradSync for YourCompression {
    // ANCHOR: hook
    /// Replace `flat` (f32) by its average over the ranks, moving 16-bit floats.
    fn all_reduce_mean(&self, comm: &dyn Communicator, flat: &mut Tensor) -> Result<()> {
        // TODO(lab 10): the compression hook. On return `flat` holds the
        // average over the ranks (f32), computed by one all-reduce of a
        // `self.kind` tensor. Where can the 16-bit sum overflow, and what
        // would keep every number the all-reduce adds within range?
        Err(labkit::todo!(10, "the compression hook"))
    }
    // ANCHOR_END: hook

    // The rest of DDP's pieces are trainers' own (lab 7 was about them).
    fn broadcast(&self, comm: &dyn Communicator, tensors: &[Tensor], root: usize) -> Result<()> {
        Standard.broadcast(comm, tensors, root)
    }
    fn flatten(&self, grads: &[Tensor], flat: &mut Tensor) -> Result<()> {
        Standard.flatten(grads, flat)
    }
    fn unflatten(&self, flat: &Tensor, grads: &[Tensor]) -> Result<()> {
        Standard.unflatten(flat, grads)
    }
    fn ready(&self, stage: usize, ready_stage: &[usize], next: usize) -> Result<usize> {
        Standard.ready(stage, ready_stage, next)
    }
}
