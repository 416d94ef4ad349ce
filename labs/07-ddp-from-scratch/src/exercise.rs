//! Lab 7, the file you edit: the pieces of DDP that move gradients, in three
//! steps. trainers' `Ddp` runs them: it builds the buckets, runs one backward
//! whose autograd hooks say when each stage is done, hands your all-reduce to
//! its communicator thread, and implements `no_sync`. Each step is checked on
//! its own (`cargo lab check 7`), with trainers' own pieces standing in for
//! the steps you have not reached.
//!
//! Useful: `trainers::comm::buffer_mut(&mut t)` views a contiguous CPU (or
//! CUDA) tensor as a `BufferMut` a communicator reads and writes in place;
//! `Input`, `ReduceOp` (which one?); `t.shallow_clone()` (a second handle on
//! the same memory); `t.f_narrow(0, offset, n)` (a view of n elements of a
//! flat tensor), `t.f_reshape([-1])`, `t.f_view(shape)`, `t.f_copy_(&src)`,
//! `t.numel()`, `t.size()`. When a step fails, the check calls each of your
//! pieces alone on small numbers and names the mistake it recognises. Stuck?
//! `cargo lab hint 7`.

// Until the TODOs are done the imports and arguments below are unused; delete
// this line when you have finished, and the compiler will tell you what is left.
#![allow(unused_imports, unused_variables, unused_mut)]

use collectives::{Communicator, Input, ReduceOp};
use tch::Tensor;
use trainers::comm::buffer_mut;
use trainers::ddp::GradSync;
use trainers::{Error, Result};

/// Your DDP.
pub struct YourSync;

impl GradSync for YourSync {
    // ANCHOR: step1
    /// Step 1a: every rank ends with `root`'s values of `tensors`, in place. DDP
    /// calls it once when it wraps the model (so every replica starts from rank
    /// 0's random initialisation) and before each forward for buffers.
    fn broadcast(&self, comm: &dyn Communicator, tensors: &[Tensor], root: usize) -> Result<()> {
        // TODO(lab 07): step 1a. Contract: afterwards every rank's tensors hold
        // `root`'s numbers, in the tensors' own memory (the model holds these very
        // tensors: a broadcast into a copy changes nothing it sees). The check
        // runs it from root 1 when something is wrong and says who got whose values.
        Err(labkit::todo!(7, "step 1: broadcast"))
    }

    /// Step 1b: replace `flat` by its average over the ranks. DDP calls it on
    /// its communicator thread, once per bucket (in step 1, a bucket is one
    /// parameter's gradient: one call per parameter).
    fn all_reduce_mean(&self, comm: &dyn Communicator, flat: &mut Tensor) -> Result<()> {
        // TODO(lab 07): step 1b. Contract: afterwards every rank's `flat` holds the
        // same numbers, and training on R ranks with batch B each moves the
        // parameters exactly as one process with batch R·B. Each rank's loss is
        // already a mean over its own B rows: what, then, is the gradient of the
        // mean over all R·B rows, in terms of the R ranks' gradients?
        Err(labkit::todo!(7, "step 1: all_reduce_mean"))
    }
    // ANCHOR_END: step1

    // ANCHOR: step2
    /// Step 2a: copy `grads` back to back into `flat` (a 1-D tensor exactly as
    /// long as all of them together), so one collective moves them all.
    fn flatten(&self, grads: &[Tensor], flat: &mut Tensor) -> Result<()> {
        // TODO(lab 07): step 2a. Contract: `flat` holds every element of
        // `grads[0]`, then every element of `grads[1]`, … with no gap and no
        // overlap (the check feeds it [1, 2] and [3, 4, 5]).
        Err(labkit::todo!(7, "step 2: flatten"))
    }

    /// Step 2b: copy the averaged `flat` back into `grads`, each its own shape.
    fn unflatten(&self, flat: &Tensor, grads: &[Tensor]) -> Result<()> {
        // TODO(lab 07): step 2b. Contract: the exact inverse of `flatten`, written
        // into the gradients' own memory, each keeping its shape.
        Err(labkit::todo!(7, "step 2: unflatten"))
    }
    // ANCHOR_END: step2

    // ANCHOR: step3
    /// Step 3: the overlap. Backward finishes the stages last first;
    /// when stage `stage` is done, DDP asks which buckets may start their
    /// all-reduce now, while the earlier stages' backward goes on. Buckets
    /// `next..` have not started; bucket b's gradients all exist once stage
    /// `ready_stage[b]` is done (buckets fill from the last layer, so they
    /// become ready in order). Return the new `next`: buckets `next..returned`
    /// start now. What you hold back starts after the backward, not overlapped.
    fn ready(&self, stage: usize, ready_stage: &[usize], next: usize) -> Result<usize> {
        // TODO(lab 07): step 3. Contract: return the largest `k ≥ next` such that
        // every bucket in `next..k` already has all its gradients; a bucket you
        // start too early reduces gradients that do not exist yet, one you hold
        // back does not overlap. Which stages have finished their backward when
        // stage `stage` has, given that backward runs the last stage first?
        Err(labkit::todo!(7, "step 3: ready"))
    }
    // ANCHOR_END: step3
}
