//! The seam of [`DataParallel`](super::DataParallel): the five pieces of a step that
//! move data between devices or threads, as one small trait.
//!
//! [`DataParallel`](super::DataParallel) calls these and only these for the parts
//! PyTorch's `nn.DataParallel` takes from `torch.nn.parallel` (`replicate`, `scatter`,
//! `parallel_apply`, `gather`, and the reduce-add of the gradients that
//! `Broadcast`'s backward does); everything around them (the timing, the loss on the
//! gathered outputs, the autograd plumbing and backward threads, the optimizer) is
//! its own. [`Standard`] is trainers' implementation and the default; lab 4's
//! exercise implements the same trait and runs inside the real step and the real
//! equivalence check ([`super::check`]).

use std::fmt;
use std::time::Duration;

use tch::nn::ModuleT;
use tch::{Device, Tensor};

use super::parallel;
use crate::Result;
use crate::models::Stage;

/// The five pieces of a data-parallel step, in the order a step calls them.
///
/// Replica 0 is the master: its module owns the parameters the optimizer updates,
/// and its device is the first device. The lists a step passes hold the replicas
/// actually used, in device order.
pub trait Pieces: Send + Sync + fmt::Debug {
    /// **replicate**: makes every replica's tensors equal to the master's, in place
    /// and without recording gradients: `replicas[k][i]` becomes a copy of
    /// `master[i]` (same name, same shape, maybe another device). `replicas` holds
    /// replicas 1, 2, ... (the master needs no copy).
    fn replicate(&self, master: &[Tensor], replicas: &[Vec<Tensor>]) -> Result<()>;

    /// **scatter**: cuts `x` along dimension 0 into pieces of `ceil(B/N)` rows (the
    /// last smaller, fewer pieces when `B < N`, as `Tensor::chunk` does) for the
    /// `N = devices.len()` replicas, and moves piece `k` to `devices[k]`. `x` has at
    /// least one row.
    fn scatter(&self, x: &Tensor, devices: &[Device]) -> Result<Vec<Tensor>>;

    /// **parallel_apply**: runs `modules[k]` on `inputs[k]`, each pair on its own
    /// thread, and returns each output with the time its thread spent, in order.
    /// `train`: training mode with autograd recording; otherwise evaluation mode
    /// without gradients (autograd's grad mode is per thread, so that has to be set
    /// inside each thread).
    fn parallel_apply(
        &self,
        modules: Vec<&mut Stage>,
        inputs: Vec<Tensor>,
        train: bool,
    ) -> Result<Vec<(Tensor, Duration)>>;

    /// **gather**: moves `outputs` to `device` and concatenates them along dimension
    /// 0, differentiably: the gradient of the result must flow back to each output on
    /// its own device (gather's backward is a scatter).
    fn gather(&self, outputs: &[Tensor], device: Device) -> Result<Tensor>;

    /// **reduce**: adds each replica's parameter gradients into the master's:
    /// `master[i].grad() += replicas[k][i].grad()` on the master's device, without
    /// recording gradients. A replica's parameter with no gradient adds nothing.
    fn reduce(&self, master: &[Tensor], replicas: &[Vec<Tensor>]) -> Result<()>;
}

/// trainers' own pieces: what PyTorch's `nn.DataParallel` does, on threads.
#[derive(Debug, Clone, Copy, Default)]
pub struct Standard;

// ANCHOR: standard
impl Pieces for Standard {
    fn replicate(&self, master: &[Tensor], replicas: &[Vec<Tensor>]) -> Result<()> {
        tch::no_grad(|| {
            for replica in replicas {
                for (m, r) in master.iter().zip(replica) {
                    // `copy_` writes into the replica's own storage, so its module,
                    // which holds the same tensor, sees the new values.
                    r.shallow_clone().f_copy_(m)?;
                }
            }
            Ok(())
        })
    }

    fn scatter(&self, x: &Tensor, devices: &[Device]) -> Result<Vec<Tensor>> {
        let chunks = x.f_chunk(devices.len() as i64, 0)?;
        chunks
            .into_iter()
            .zip(devices)
            .map(|(c, &d)| Ok(c.f_to_device(d)?))
            .collect()
    }

    fn parallel_apply(
        &self,
        modules: Vec<&mut Stage>,
        inputs: Vec<Tensor>,
        train: bool,
    ) -> Result<Vec<(Tensor, Duration)>> {
        let jobs = modules.into_iter().zip(inputs).collect();
        parallel(jobs, "forward", |(module, x)| {
            Ok(if train {
                module.forward_t(&x, true)
            } else {
                tch::no_grad(|| module.forward_t(&x, false))
            })
        })
    }

    fn gather(&self, outputs: &[Tensor], device: Device) -> Result<Tensor> {
        let moved = outputs
            .iter()
            .map(|o| Ok(o.f_to_device(device)?))
            .collect::<Result<Vec<_>>>()?;
        Ok(Tensor::f_cat(&moved, 0)?)
    }

    fn reduce(&self, master: &[Tensor], replicas: &[Vec<Tensor>]) -> Result<()> {
        tch::no_grad(|| {
            for (k, replica) in replicas.iter().enumerate() {
                for (i, (m, r)) in master.iter().zip(replica).enumerate() {
                    let g = r.f_grad()?;
                    if !g.defined() {
                        continue;
                    }
                    let mut total = m.f_grad()?;
                    if !total.defined() {
                        return Err(crate::Error::Model(format!(
                            "parameter {i} has a gradient on replica {} but none on the \
                             master: the model must use the same parameters for every input",
                            k + 1
                        )));
                    }
                    let _ = total.f_add_(&g.f_to_device(m.device())?)?;
                }
            }
            Ok(())
        })
    }
}
// ANCHOR_END: standard
