//! The pieces of DDP that move gradients, behind one seam: [`GradSync`].
//!
//! [`Ddp`](super::Ddp) decides *when* (buckets, stages, the communicator
//! thread, `no_sync`); a `GradSync` does *what*: broadcast rank 0's tensors,
//! average a flat gradient, copy gradients into a bucket and back, and say which
//! buckets may start while backward goes on. [`Standard`] is trainers' own and
//! what [`Ddp::new`](super::Ddp::new) uses; the workshop's lab 7 plugs the
//! learner's version in with [`Ddp::with_sync`](super::Ddp::with_sync).

use collectives::{Communicator, Input, ReduceOp};
use tch::{Device, Tensor};

use crate::Result;
use crate::comm;

/// How DDP moves gradients. Every rank must use the same implementation.
pub trait GradSync: Send + Sync {
    /// Leaves `root`'s values of `tensors` in every rank's `tensors`, in place
    /// (parameters at start-up, buffers before every forward). Runs on the
    /// communicator thread, so it must not rely on a caller's `no_grad`.
    fn broadcast(&self, comm: &dyn Communicator, tensors: &[Tensor], root: usize) -> Result<()>;
    /// Replaces `flat` (one contiguous tensor) by its average across ranks.
    fn all_reduce_mean(&self, comm: &dyn Communicator, flat: &mut Tensor) -> Result<()>;
    /// Copies `grads` back to back into `flat` (as long as all of them together).
    fn flatten(&self, grads: &[Tensor], flat: &mut Tensor) -> Result<()>;
    /// Copies `flat`'s pieces back into `grads`, each shaped like its gradient.
    fn unflatten(&self, flat: &Tensor, grads: &[Tensor]) -> Result<()>;
    /// Called after the backward of stage `stage` (the last stage first, down to
    /// 0): buckets `next..` have not started; `ready_stage[b]` is the stage whose
    /// backward finishes bucket b's gradients. Returns the new `next`: buckets
    /// `next..returned` start now. Whatever is left starts after the backward.
    fn ready(&self, stage: usize, ready_stage: &[usize], next: usize) -> Result<usize>;
    /// Whether [`all_reduce_mean`](Self::all_reduce_mean) is one collective on
    /// `flat`, in place, with nothing after it. Then, where the backend queues that
    /// collective on a GPU, DDP copies the averages back as soon as it is queued
    /// instead of waiting for the device to finish it (see
    /// [`collectives::queued`]). An implementation that does more after its
    /// collective (a cast back from 16 bits, a check on the host) must leave the
    /// default, `false`: its work would not be queued yet when DDP copies.
    fn reduces_in_one_call(&self) -> bool {
        false
    }
}

/// trainers' own: coalesced broadcast, `ReduceOp::Avg`, view copies, and every
/// bucket as soon as its last stage is done.
#[derive(Clone, Copy, Debug, Default)]
pub struct Standard;

impl GradSync for Standard {
    // ANCHOR: broadcast
    fn broadcast(&self, comm: &dyn Communicator, tensors: &[Tensor], root: usize) -> Result<()> {
        // Like PyTorch's coalesced broadcast, tensors of one kind travel together
        // as one flat tensor (one collective instead of one per tensor: a ResNet
        // has dozens of small batch-norm buffers), on their device when the
        // backend reaches it, else on the host.
        let backend = comm.backend();
        let mut groups: Vec<((tch::Kind, Device), Vec<usize>)> = Vec::new();
        for (i, t) in tensors.iter().enumerate() {
            let dev = if t.device().is_cuda() && backend.supports(comm::location(t.device())) {
                t.device()
            } else {
                Device::Cpu
            };
            let key = (t.f_kind()?, dev);
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, members)) => members.push(i),
                None => groups.push((key, vec![i])),
            }
        }
        tch::no_grad(|| -> Result<()> {
            for ((_, dev), members) in &groups {
                let parts = members
                    .iter()
                    .map(|&i| tensors[i].f_detach()?.f_reshape([-1])?.f_to_device(*dev))
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                let mut wire = Tensor::f_cat(&parts, 0)?;
                comm.broadcast(Input::InPlace, &mut comm::buffer_mut(&mut wire)?, root)?;
                let mut offset = 0;
                for &i in members {
                    let t = &tensors[i];
                    let n = t.numel() as i64;
                    let part = wire.f_narrow(0, offset, n)?.f_view(t.size().as_slice())?;
                    t.shallow_clone().f_copy_(&part)?;
                    offset += n;
                }
            }
            Ok(())
        })
    }
    // ANCHOR_END: broadcast

    // ANCHOR: all_reduce_mean
    fn all_reduce_mean(&self, comm: &dyn Communicator, flat: &mut Tensor) -> Result<()> {
        comm.all_reduce(Input::InPlace, &mut comm::buffer_mut(flat)?, ReduceOp::Avg)?;
        Ok(())
    }
    // ANCHOR_END: all_reduce_mean

    // ANCHOR: flatten
    fn flatten(&self, grads: &[Tensor], flat: &mut Tensor) -> Result<()> {
        // One concatenation into `flat`: a single copy kernel on a GPU, where a
        // copy per gradient would launch one kernel each.
        let parts = grads
            .iter()
            .map(|g| g.f_reshape([-1]))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let _ = Tensor::f_cat_out(flat, &parts, 0)?;
        Ok(())
    }

    fn unflatten(&self, flat: &Tensor, grads: &[Tensor]) -> Result<()> {
        // The inverse in one op: `flat` split at the gradients' lengths, each
        // piece copied into a flat view of its gradient (a gradient that is not
        // contiguous has no such view: then one copy each).
        if grads.iter().all(Tensor::is_contiguous) {
            let sizes: Vec<i64> = grads.iter().map(|g| g.numel() as i64).collect();
            let views = grads
                .iter()
                .map(|g| g.f_view([-1]))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            flat.f_split_with_sizes_copy_out(&views, sizes.as_slice(), 0)?;
            return Ok(());
        }
        let mut offset = 0;
        for g in grads {
            let n = g.numel() as i64;
            let part = flat.f_narrow(0, offset, n)?.f_view(g.size().as_slice())?;
            g.shallow_clone().f_copy_(&part)?;
            offset += n;
        }
        Ok(())
    }
    // ANCHOR_END: flatten

    // ANCHOR: ready
    fn ready(&self, stage: usize, ready_stage: &[usize], mut next: usize) -> Result<usize> {
        // Buckets fill in reverse registration order, so they finish in order:
        // start each one whose gradients all exist now, stop at the first that
        // still waits for an earlier stage.
        while next < ready_stage.len() && ready_stage[next] >= stage {
            next += 1;
        }
        Ok(next)
    }
    // ANCHOR_END: ready

    fn reduces_in_one_call(&self) -> bool {
        true
    }
}
