//! Lab 10, the file you edit: gradient compression as a DDP communication
//! hook, as PyTorch's `fp16_compress_hook` and `bf16_compress_hook`. trainers'
//! `Ddp` calls your `all_reduce_mean` once per bucket with the bucket's f32
//! gradients; you send them as 16-bit floats (half the bytes) and leave their
//! average across the ranks in the bucket, as f32.
//!
//! Useful: `t.f_div_scalar(x)`, `t.f_to_kind(Kind::Half)` (a converted copy),
//! `trainers::comm::buffer_mut(&mut t)` (a contiguous tensor as a buffer the
//! communicator reads and writes in place), `comm.world_size()`,
//! `comm.all_reduce(Input::InPlace, &mut buf, ReduceOp::Sum)`,
//! `t.f_isfinite()?.f_all()?.f_int64_value(&[])` (1 if every element is
//! finite), `flat.f_copy_(&src)` (copies and converts back to f32).

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
        // TODO(lab 10): the compression hook, in four steps:
        //  1. divide `flat` by the world size *before* casting (the sum of n
        //     fp16 gradients can overflow 65,504 where their mean fits), and
        //     cast the result to `self.kind`: that is the tensor you send;
        //  2. all_reduce it in place with ReduceOp::Sum;
        //  3. if any element is no longer finite, return
        //     Err(Error::InvalidArgument(..)) saying the mean overflowed (an
        //     infinity written into the gradients would ruin the weights);
        //  4. copy it back into `flat`.
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
