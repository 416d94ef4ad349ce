//! Sharded data parallelism: ZeRO stages 1–3 (Rajbhandari et al. 2020, "ZeRO:
//! Memory Optimizations Toward Training Trillion Parameter Models"), the
//! design PyTorch's FSDP and DeepSpeed build on.
//!
//! Data parallelism keeps the whole model state on every rank: parameters,
//! gradients and optimizer state (here SGD's momentum), three copies of
//! everything. ZeRO keeps each *unit* (a layer: weight and bias as one flat
//! tensor, padded to a multiple of the world size) split in `world` equal
//! shards, rank r owning shard r, and shards more of the state at each stage:
//!
//! | stage | each rank holds | per step it moves |
//! |---|---|---|
//! | [`Stage::Ddp`] | parameters, gradients, momentum | all-reduce of the gradients (2ψ) |
//! | [`Stage::One`] | parameters, gradients, its momentum shard | reduce-scatter of the gradients after backward, all-gather of the parameters (2ψ) |
//! | [`Stage::Two`] | parameters, one unit's gradient at a time, its momentum shard | the same, each unit's gradient reduce-scattered (and freed) as soon as its backward is done |
//! | [`Stage::Three`] | its parameter and momentum shards, one unit's parameters and gradient at a time | each unit's parameters all-gathered before its forward and again before its backward, freed after; gradients reduce-scattered (3ψ) |
//!
//! (ψ: the model's size; each term times (n − 1)/n for the ring algorithms.)
//!
//! After the reduce-scatter each rank updates only its shard, with only its
//! shard of the momentum: the seam [`GradPath`], which the workshop's lab 13
//! has the learner write; [`ReduceScatterStep`] is trainers' own.
//!
//! Backward runs unit by unit (each unit's input is a leaf), so a unit's
//! gradient exists on its own and can be reduced and freed before the next
//! unit's backward. ZeRO-3 keeps no unit's parameters between its forward and
//! its backward: it keeps the unit's input and recomputes the unit's forward
//! after the second all-gather. FSDP instead keeps autograd's saved tensors and
//! frees the parameters' *storage* (`resize_(0)`), which tch cannot do to a
//! tensor autograd holds; the recompute costs one forward per unit and moves the
//! same bytes.

pub mod check;
mod ledger;
#[cfg(test)]
mod tests;

pub use ledger::{Ledger, Memory};

use std::sync::Arc;

use collectives::{Communicator, Input, ReduceOp};
use tch::Tensor;

use crate::autograd::backward_with_grad;
use crate::comm::{buffer, buffer_mut};
use crate::{Error, Result};

/// How much of the model state is sharded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    /// Nothing: plain data parallelism (the baseline).
    Ddp,
    /// ZeRO-1: optimizer state.
    One,
    /// ZeRO-2: optimizer state and gradients.
    Two,
    /// ZeRO-3 / FSDP: optimizer state, gradients and parameters.
    Three,
}

impl Stage {
    /// Every stage, the baseline first.
    pub const ALL: [Stage; 4] = [Stage::Ddp, Stage::One, Stage::Two, Stage::Three];

    /// "DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3".
    pub fn name(self) -> &'static str {
        match self {
            Stage::Ddp => "DDP",
            Stage::One => "ZeRO-1",
            Stage::Two => "ZeRO-2",
            Stage::Three => "ZeRO-3",
        }
    }
}

/// SGD with momentum, PyTorch's rule (no dampening, no weight decay).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SgdStep {
    /// The learning rate.
    pub lr: f64,
    /// The momentum factor.
    pub momentum: f64,
}

// ANCHOR: sgd_update
/// One SGD step on `param` (in place) with gradient `grad` and momentum
/// buffer `buf` (created on the first step, as PyTorch does: `buf = grad`;
/// later `buf = momentum · buf + grad`; then `param −= lr · buf`). Element by
/// element, so a shard of the update is the update of the shard, to the bit.
pub fn sgd_update(
    param: &mut Tensor,
    grad: &Tensor,
    buf: &mut Option<Tensor>,
    sgd: SgdStep,
) -> Result<()> {
    if param.size() != grad.size() {
        return Err(Error::InvalidArgument(format!(
            "a parameter of shape {:?} cannot take a gradient of shape {:?}",
            param.size(),
            grad.size()
        )));
    }
    tch::no_grad(|| -> Result<()> {
        // In place where PyTorch is too: a model-sized temporary per step
        // would show in every stage's memory.
        let b = match buf.take() {
            None => grad.f_detach()?.copy(),
            Some(mut b) => {
                let _ = b.f_mul_scalar_(sgd.momentum)?;
                let _ = b.f_add_(grad)?;
                b
            }
        };
        let _ = param.f_sub_(&b.f_mul_scalar(sgd.lr)?)?;
        *buf = Some(b);
        Ok(())
    })
}
// ANCHOR_END: sgd_update

/// What a rank does with one unit's gradient: the seam of lab 13.
pub trait GradPath: Send + Sync {
    /// `grad` is this rank's gradient of one unit, flat and padded:
    /// `world · shard.numel()` elements. Leave in `shard` (this rank's shard of
    /// the unit's parameters) the result of one [`sgd_update`] with the
    /// gradient *averaged over the ranks*, restricted to this shard, and with
    /// `momentum` (this rank's shard of the momentum buffer).
    fn step(
        &self,
        comm: &dyn Communicator,
        grad: &Tensor,
        shard: &mut Tensor,
        momentum: &mut Option<Tensor>,
        sgd: SgdStep,
    ) -> Result<()>;
}

/// trainers' own: reduce-scatter with `ReduceOp::Avg`, then the shard's update.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReduceScatterStep;

impl GradPath for ReduceScatterStep {
    // ANCHOR: grad_path
    fn step(
        &self,
        comm: &dyn Communicator,
        grad: &Tensor,
        shard: &mut Tensor,
        momentum: &mut Option<Tensor>,
        sgd: SgdStep,
    ) -> Result<()> {
        // Block r of the average over ranks lands on rank r: the only part of
        // the gradient this rank's update needs.
        let mut mine = shard.f_zeros_like()?;
        comm.reduce_scatter(
            Input::Buffer(buffer(grad)?),
            &mut buffer_mut(&mut mine)?,
            ReduceOp::Avg,
        )?;
        sgd_update(shard, &mine, momentum, sgd)
    }
    // ANCHOR_END: grad_path
}

// ANCHOR: gather_unit
/// ZeRO-3's parameter gather: one unit's whole flat parameters (padded,
/// `world · shard.numel()` elements, rank r's shard at `r · shard.numel()`),
/// from every rank's `shard`, on every rank. [`Zero`] calls it before each
/// unit's forward and again before its backward; lab 13's stretch goal has
/// the learner write it.
pub fn gather_unit(comm: &dyn Communicator, shard: &Tensor) -> Result<Tensor> {
    let len = shard.numel() as i64 * comm.world_size() as i64;
    let mut full = Tensor::f_zeros([len], (shard.kind(), shard.device()))?;
    // Each rank contributes its shard and receives everyone's, in rank order.
    comm.all_gather(Input::Buffer(buffer(shard)?), &mut buffer_mut(&mut full)?)?;
    Ok(full)
}
// ANCHOR_END: gather_unit

/// The layer widths of the MLP a [`Zero`] trains, input first: `[784, 1024,
/// 1024, 10]` is three units. GELU between units.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZeroConfig {
    /// Widths, input first, classes last.
    pub sizes: Vec<i64>,
}

impl ZeroConfig {
    /// Unit i's (outputs, inputs).
    fn shape(&self, i: usize) -> (i64, i64) {
        (self.sizes[i + 1], self.sizes[i])
    }

    /// Units (layers).
    pub fn units(&self) -> usize {
        self.sizes.len().saturating_sub(1)
    }

    /// Parameters in all (ψ, unpadded).
    pub fn parameters(&self) -> i64 {
        (0..self.units())
            .map(|i| {
                let (o, n) = self.shape(i);
                o * n + o
            })
            .sum()
    }

    /// Each unit's parameters as one flat tensor (weight row-major, then
    /// bias), PyTorch's `nn.Linear` initialisation, drawn from `seed` under a
    /// lock (libtorch's generator is global, and thread ranks draw at once).
    pub fn init(&self, seed: i64) -> Result<Vec<Tensor>> {
        if self.sizes.len() < 2 || self.sizes.iter().any(|&s| s < 1) {
            return Err(Error::InvalidArgument(format!(
                "an MLP needs at least two positive widths, not {:?}",
                self.sizes
            )));
        }
        crate::seed::seeded(seed, || {
            let vs = tch::nn::VarStore::new(tch::Device::Cpu);
            (0..self.units())
                .map(|i| {
                    let (o, n) = self.shape(i);
                    let l = tch::nn::linear(vs.root() / format!("u{i}"), n, o, Default::default());
                    let b =
                        l.bs.ok_or_else(|| Error::Model("a linear layer without bias".into()))?;
                    Ok(Tensor::f_cat(&[l.ws.f_reshape([-1])?, b], 0)?
                        .f_detach()?
                        .copy())
                })
                .collect()
        })
    }
}

/// One unit's state on one rank.
struct Unit {
    /// (outputs, inputs).
    shape: (i64, i64),
    /// Unpadded elements.
    numel: i64,
    /// Elements of one shard: `padded / world`.
    shard_len: i64,
    /// The whole flat parameters (padded), where this stage keeps them.
    full: Option<Tensor>,
    /// This rank's shard of the parameters (ZeRO), or none (DDP).
    shard: Option<Tensor>,
    /// The momentum buffer: of the shard (ZeRO) or of `full` (DDP).
    momentum: Option<Tensor>,
}

/// One rank of a sharded (or plain) data-parallel MLP.
pub struct Zero {
    stage: Stage,
    world: usize,
    units: Vec<Unit>,
    path: Arc<dyn GradPath>,
    sgd: SgdStep,
    ledger: Ledger,
}

impl Zero {
    /// Rank `rank` of `world`, from the unsplit parameters `init` (one flat
    /// tensor per unit, from [`ZeroConfig::init`]).
    pub fn new(
        stage: Stage,
        config: &ZeroConfig,
        init: &[Tensor],
        rank: usize,
        world: usize,
        path: Arc<dyn GradPath>,
        sgd: SgdStep,
    ) -> Result<Zero> {
        if world == 0 || rank >= world {
            return Err(Error::InvalidArgument(format!("rank {rank} of {world}")));
        }
        if init.len() != config.units() {
            return Err(Error::InvalidArgument(format!(
                "{} initial tensors for {} units",
                init.len(),
                config.units()
            )));
        }
        let mut ledger = Ledger::default();
        let mut units = Vec::new();
        for (i, p) in init.iter().enumerate() {
            let shape = config.shape(i);
            let numel = shape.0 * shape.1 + shape.0;
            if p.numel() as i64 != numel {
                return Err(Error::InvalidArgument(format!(
                    "unit {i}: {} initial values for {numel} parameters",
                    p.numel()
                )));
            }
            let shard_len = (numel + world as i64 - 1) / world as i64;
            let padded = p.f_constant_pad_nd([0, shard_len * world as i64 - numel])?;
            let (full, shard) = match stage {
                Stage::Ddp => {
                    ledger.params(padded.numel() as i64);
                    (Some(padded), None)
                }
                Stage::One | Stage::Two => {
                    // The shard is a view into the whole parameters: updated
                    // in place, then all-gathered in place (as ZeRO's flat
                    // parameter partitions are).
                    ledger.params(padded.numel() as i64);
                    let shard = padded.f_narrow(0, rank as i64 * shard_len, shard_len)?;
                    (Some(padded), Some(shard))
                }
                Stage::Three => {
                    ledger.params(shard_len);
                    let shard = padded
                        .f_narrow(0, rank as i64 * shard_len, shard_len)?
                        .copy();
                    (None, Some(shard))
                }
            };
            units.push(Unit {
                shape,
                numel,
                shard_len,
                full,
                shard,
                momentum: None,
            });
        }
        // The momentum buffers appear at the first step; count them from the
        // start, as the peak after one step includes them anyway.
        let state = match stage {
            Stage::Ddp => units.iter().map(|u| u.shard_len * world as i64).sum(),
            _ => units.iter().map(|u| u.shard_len).sum(),
        };
        ledger.state(state);
        Ok(Zero {
            stage,
            world,
            units,
            path,
            sgd,
            ledger,
        })
    }

    /// The stage.
    pub fn stage(&self) -> Stage {
        self.stage
    }

    /// The counted model state: the most held at once so far.
    pub fn peak_memory(&self) -> Memory {
        self.ledger.peak()
    }

    /// Unit `i`'s whole parameters: the kept copy, or (ZeRO-3) an all-gather
    /// of the shards into a new tensor, counted as held until `release`.
    fn gather(&mut self, comm: &dyn Communicator, i: usize) -> Result<Tensor> {
        let u = &self.units[i];
        if let Some(full) = &u.full {
            return Ok(full.shallow_clone());
        }
        let shard = u
            .shard
            .as_ref()
            .ok_or_else(|| Error::Model("no shard".into()))?;
        let full = gather_unit(comm, shard)?;
        self.ledger.params(full.numel() as i64);
        Ok(full)
    }

    /// Gives back what [`Self::gather`] counted (ZeRO-3's temporary copy).
    fn release(&mut self, full: Tensor) {
        if self.stage == Stage::Three {
            self.ledger.params(-(full.numel() as i64));
        }
    }

    fn unit_forward(&self, i: usize, x: &Tensor, flat: &Tensor) -> Result<Tensor> {
        let (o, n) = self.units[i].shape;
        let w = flat.f_narrow(0, 0, o * n)?.f_view([o, n])?;
        let b = flat.f_narrow(0, o * n, o)?;
        let y = x.f_matmul(&w.f_tr()?)?.f_add(&b)?;
        Ok(if i + 1 < self.units.len() {
            y.f_gelu("none")?
        } else {
            y
        })
    }

    /// One training step on this rank's rows `xs` (`[rows, input]`) with
    /// labels `ys`: forward, backward unit by unit, the stage's communication
    /// and the SGD update. Returns this rank's loss.
    pub fn step(&mut self, comm: &dyn Communicator, xs: &Tensor, ys: &Tensor) -> Result<f64> {
        let n = self.units.len();
        // Forward. What each unit keeps for its backward: its input (a leaf),
        // and unless ZeRO-3, its parameters' leaf and its output in the graph.
        let mut kept: Vec<(Tensor, Option<(Tensor, Tensor)>)> = Vec::with_capacity(n);
        let mut h = xs.f_detach()?;
        for i in 0..n {
            let x = h.f_detach()?.f_set_requires_grad(i > 0)?;
            let full = self.gather(comm, i)?;
            if self.stage == Stage::Three {
                h = tch::no_grad(|| self.unit_forward(i, &x, &full))?;
                self.release(full);
                kept.push((x, None));
            } else {
                let leaf = full.f_detach()?.f_set_requires_grad(true)?;
                let out = self.unit_forward(i, &x, &leaf)?;
                h = out.shallow_clone();
                kept.push((x, Some((leaf, out))));
            }
        }
        let logits = h.f_detach()?.f_set_requires_grad(true)?;
        let loss =
            logits.f_cross_entropy_loss::<Tensor>(ys, None, tch::Reduction::Mean, -100, 0.0)?;
        let value = loss.f_double_value(&[])?;
        loss.f_backward()?;
        let mut g = logits.f_grad()?;

        // Backward, last unit first.
        let mut grads: Vec<Option<Tensor>> = (0..n).map(|_| None).collect();
        for i in (0..n).rev() {
            let (x, graph) = kept
                .pop()
                .ok_or_else(|| Error::Model("no unit kept".into()))?;
            let (leaf, out, gathered) = match graph {
                Some((leaf, out)) => (leaf, out, None),
                None => {
                    // ZeRO-3: gather again and recompute the unit's forward.
                    let full = self.gather(comm, i)?;
                    let leaf = full.f_detach()?.f_set_requires_grad(true)?;
                    let out = self.unit_forward(i, &x, &leaf)?;
                    (leaf, out, Some(full))
                }
            };
            backward_with_grad(&out, &g)?;
            if i > 0 {
                g = x.f_grad()?;
            }
            let grad = leaf.f_grad()?;
            self.ledger.grads(grad.numel() as i64);
            match self.stage {
                Stage::Ddp | Stage::One => grads[i] = Some(grad),
                Stage::Two | Stage::Three => {
                    self.shard_step(comm, i, &grad)?;
                    self.ledger.grads(-(grad.numel() as i64));
                }
            }
            if let Some(full) = gathered {
                self.release(full);
            }
        }

        // After backward.
        match self.stage {
            Stage::Ddp => self.all_reduce_and_update(comm, &grads)?,
            Stage::One => {
                for (i, g) in grads.iter().enumerate() {
                    let g = g
                        .as_ref()
                        .ok_or_else(|| Error::Model("no gradient".into()))?;
                    self.shard_step(comm, i, g)?;
                }
            }
            Stage::Two | Stage::Three => {}
        }
        for g in grads.iter().flatten() {
            self.ledger.grads(-(g.numel() as i64));
        }
        if matches!(self.stage, Stage::One | Stage::Two) {
            // Every rank needs every updated parameter for the next forward.
            for u in &mut self.units {
                // This rank's block of `full` is its (updated) shard already.
                if let Some(full) = &mut u.full {
                    comm.all_gather(Input::InPlace, &mut buffer_mut(full)?)?;
                }
            }
        }
        Ok(value)
    }

    /// Unit `i`'s gradient (unpadded, as autograd made it) through the
    /// [`GradPath`], counting the shard-sized tensor it allocates.
    fn shard_step(&mut self, comm: &dyn Communicator, i: usize, grad: &Tensor) -> Result<()> {
        let u = &mut self.units[i];
        // Autograd made it the shape of the (padded) parameters it came from.
        let padded = grad.f_reshape([-1])?;
        if padded.numel() as i64 != u.shard_len * self.world as i64 {
            return Err(Error::Model(format!(
                "unit {i}: a gradient of {} elements for {} padded parameters",
                padded.numel(),
                u.shard_len * self.world as i64
            )));
        }
        let shard = u
            .shard
            .as_mut()
            .ok_or_else(|| Error::Model("no shard".into()))?;
        let before = shard.size();
        self.ledger.grads(u.shard_len);
        self.path
            .step(comm, &padded, shard, &mut u.momentum, self.sgd)?;
        self.ledger.grads(-u.shard_len);
        if shard.size() != before {
            return Err(Error::Seam(
                format!(
                    "the gradient path changed the shard's shape from {before:?} to {:?}",
                    shard.size()
                )
                .into(),
            ));
        }
        Ok(())
    }

    /// Plain data parallelism: every gradient averaged in one all-reduce, and
    /// every parameter updated on every rank.
    fn all_reduce_and_update(
        &mut self,
        comm: &dyn Communicator,
        grads: &[Option<Tensor>],
    ) -> Result<()> {
        let parts = grads
            .iter()
            .map(|g| {
                g.as_ref()
                    .ok_or_else(|| Error::Model("no gradient".into()))
                    .and_then(|g| Ok(g.f_reshape([-1])?))
            })
            .collect::<Result<Vec<_>>>()?;
        let mut flat = Tensor::f_cat(&parts, 0)?;
        comm.all_reduce(Input::InPlace, &mut buffer_mut(&mut flat)?, ReduceOp::Avg)?;
        let mut offset = 0;
        for u in &mut self.units {
            let len = u.shard_len * self.world as i64;
            let g = flat.f_narrow(0, offset, len)?;
            offset += len;
            let full = u
                .full
                .as_mut()
                .ok_or_else(|| Error::Model("no parameters".into()))?;
            sgd_update(full, &g, &mut u.momentum, self.sgd)?;
        }
        Ok(())
    }

    /// Every unit's whole parameters (unpadded), gathered where sharded: for
    /// checks and evaluation (a collective: every rank must call it).
    pub fn parameters(&mut self, comm: &dyn Communicator) -> Result<Vec<Tensor>> {
        (0..self.units.len())
            .map(|i| {
                let full = self.gather(comm, i)?;
                let out = full.f_narrow(0, 0, self.units[i].numel)?.copy();
                self.release(full);
                Ok(out)
            })
            .collect()
    }

    /// Logits of `xs` with the current parameters (a collective under
    /// ZeRO-3, which gathers each unit).
    pub fn logits(&mut self, comm: &dyn Communicator, xs: &Tensor) -> Result<Tensor> {
        let mut h = xs.shallow_clone();
        for i in 0..self.units.len() {
            let full = self.gather(comm, i)?;
            h = tch::no_grad(|| self.unit_forward(i, &h, &full))?;
            self.release(full);
        }
        Ok(h)
    }
}
