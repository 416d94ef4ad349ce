//! Tensor parallelism, Megatron style: one MLP block split across the ranks of
//! a group, every rank seeing the same batch.
//!
//! The block is `fc2(gelu(fc1(x)))` with `fc1: width → hidden` and
//! `fc2: hidden → width`. `fc1` is split by *columns* (output features): rank r
//! holds rows `shard(hidden, r, world)` of its weight and bias, so it computes
//! its own slice of the hidden activation with no communication. `fc2` is split
//! by *rows* (input features): rank r multiplies its slice of the activation by
//! the matching columns of `fc2`'s weight, a partial sum of the full output,
//! and one all-reduce adds the partial sums (Megatron's `g`). Backward mirrors
//! it: `g`'s backward is the identity, and the input `x` (replicated) gets a
//! partial gradient on each rank, which one all-reduce adds (Megatron's `f`).
//! So a step costs one all-reduce of `[batch, width]` in forward and one in
//! backward, whatever the hidden size: the bytes grow with the batch, where
//! data parallelism's grow with the parameters.
//!
//! [`TpModel`] wraps the block between a replicated embedding
//! (`input → width`, GELU) and a replicated classifier head, trains it with
//! [`TpModel::forward`] / [`TpModel::backward`], and can also be the unsplit
//! model (world 1) that [`check::equivalence`] compares it with. The row-parallel
//! forward is a seam, [`RowForward`]: [`AllReduceRow`] is trainers' own, and the
//! workshop's lab 14 plugs the learner's in.

pub mod check;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use collectives::{Communicator, Input, ReduceOp};
use tch::nn;
use tch::{Device, Kind, Tensor};

use crate::autograd::backward_with_grad;
use crate::comm::buffer_mut;
use crate::{Error, Result};

/// The rows (of `n`) that rank `rank` of `world` holds: `(start, len)`. The
/// first `n % world` ranks hold one more, as `torch.chunk`-style splits do
/// when `n` does not divide (Megatron requires it to; we need not).
pub fn shard(n: i64, rank: usize, world: usize) -> (i64, i64) {
    let (rank, world) = (rank as i64, world.max(1) as i64);
    let base = n / world;
    let extra = n % world;
    let start = rank * base + rank.min(extra);
    (start, base + i64::from(rank < extra))
}

/// The row-parallel layer's forward: the seam of lab 14.
pub trait RowForward: Send + Sync {
    /// `input` is this rank's `[batch, hidden/world]` slice of the activation,
    /// `weight` its `[out, hidden/world]` columns of the full weight, `bias`
    /// the full `[out]` bias (replicated). Returns the full layer's
    /// `[batch, out]` output, the same on every rank, through which autograd
    /// reaches `input` and `weight` (and `bias`).
    fn forward(
        &self,
        comm: &dyn Communicator,
        input: &Tensor,
        weight: &Tensor,
        bias: &Tensor,
    ) -> Result<Tensor>;
}

/// trainers' own row-parallel forward: a partial product, one all-reduce, the
/// bias once.
#[derive(Debug, Clone, Copy, Default)]
pub struct AllReduceRow;

impl RowForward for AllReduceRow {
    // ANCHOR: row_forward
    fn forward(
        &self,
        comm: &dyn Communicator,
        input: &Tensor,
        weight: &Tensor,
        bias: &Tensor,
    ) -> Result<Tensor> {
        // This rank's share of x·Wᵀ: the sum over its hidden features only.
        let partial = input.f_matmul(&weight.f_tr()?)?;
        // Sum the shares (Megatron's g). The collective works on plain memory,
        // outside autograd, so it reduces a detached copy.
        let mut total = partial.f_detach()?.f_contiguous()?.copy();
        comm.all_reduce(Input::InPlace, &mut buffer_mut(&mut total)?, ReduceOp::Sum)?;
        // `total` exactly, with `partial`'s gradient path: partial − partial
        // is exactly zero, and its gradient with respect to `partial` is the
        // identity, which is g's backward.
        let out = total.f_add(&partial.f_sub(&partial.f_detach()?)?)?;
        // The bias once, after the sum: added on every rank before it, it
        // would count world times.
        Ok(out.f_add(bias)?)
    }
    // ANCHOR_END: row_forward
}

/// The sizes of a [`TpModel`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TpConfig {
    /// Input features (784 for Fashion-MNIST).
    pub input: i64,
    /// The block's width (its input and output features).
    pub width: i64,
    /// The hidden features between `fc1` and `fc2` (Megatron: 4 × width).
    pub hidden: i64,
    /// Output classes.
    pub classes: i64,
}

impl TpConfig {
    /// A Fashion-MNIST classifier with a block of width `width` and hidden
    /// size 4 × `width`.
    pub fn fashion_mnist(width: i64) -> TpConfig {
        TpConfig {
            input: 784,
            width,
            hidden: 4 * width,
            classes: 10,
        }
    }

    /// The unsplit model's parameters, by name, drawn from `seed` (PyTorch's
    /// `nn.Linear` initialisation). Every rank draws the same ones: libtorch's
    /// generator is global, so a lock keeps thread ranks from interleaving.
    pub fn init(&self, seed: i64) -> Result<Vec<(String, Tensor)>> {
        crate::seed::seeded(seed, || self.draw())
    }

    fn draw(&self) -> Result<Vec<(String, Tensor)>> {
        let vs = nn::VarStore::new(Device::Cpu);
        let root = vs.root();
        let layers = [
            ("embed", self.input, self.width),
            ("fc1", self.width, self.hidden),
            ("fc2", self.hidden, self.width),
            ("head", self.width, self.classes),
        ];
        let mut out = Vec::new();
        for (name, i, o) in layers {
            let l = nn::linear(&root / name, i, o, Default::default());
            out.push((format!("{name}.weight"), l.ws.f_detach()?.copy()));
            if let Some(b) = l.bs {
                out.push((format!("{name}.bias"), b.f_detach()?.copy()));
            }
        }
        Ok(out)
    }

    /// Parameter elements per rank: the embedding and head whole, `fc1`'s and
    /// `fc2`'s weights and `fc1`'s bias split, `fc2`'s bias whole.
    pub fn parameters_per_rank(&self, rank: usize, world: usize) -> i64 {
        let (_, h) = shard(self.hidden, rank, world);
        let replicated = self.input * self.width
            + self.width
            + self.width
            + self.width * self.classes
            + self.classes;
        replicated + 2 * h * self.width + h
    }
}

/// Activations one forward keeps for backward, in elements, as counted by
/// [`TpModel::forward`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Activations {
    /// Tensors of `[batch, width]` or smaller (replicated on every rank).
    pub replicated: i64,
    /// This rank's slices of the hidden activation.
    pub sharded: i64,
}

impl Activations {
    /// Both together.
    pub fn total(&self) -> i64 {
        self.replicated + self.sharded
    }
}

/// One forward's result and what [`TpModel::backward`] needs.
pub struct Forward {
    /// `[batch, classes]`.
    pub logits: Tensor,
    /// What was kept for backward.
    pub activations: Activations,
    /// The embedding's output, inside its graph.
    embedded: Tensor,
    /// The same values as a leaf: the block's input, whose gradient backward
    /// all-reduces before it goes on into the embedding.
    block_input: Tensor,
}

/// The embedding, the tensor-parallel block and the head, on one rank of a
/// tensor-parallel group of `world` (world 1: the unsplit model).
pub struct TpModel {
    config: TpConfig,
    rank: usize,
    world: usize,
    vars: Vec<(String, Tensor)>,
    row: Arc<dyn RowForward>,
}

impl TpModel {
    /// Rank `rank`'s shards of the unsplit parameters `full` (from
    /// [`TpConfig::init`]), as variables of `vs` that an optimizer built on
    /// `vs` trains.
    pub fn new(
        vs: &nn::VarStore,
        config: TpConfig,
        full: &[(String, Tensor)],
        rank: usize,
        world: usize,
        row: Arc<dyn RowForward>,
    ) -> Result<TpModel> {
        if world == 0 || rank >= world {
            return Err(Error::InvalidArgument(format!(
                "rank {rank} of a tensor-parallel group of {world}"
            )));
        }
        if config.hidden < world as i64 {
            return Err(Error::InvalidArgument(format!(
                "a hidden size of {} cannot be split over {world} ranks",
                config.hidden
            )));
        }
        let (start, len) = shard(config.hidden, rank, world);
        let root = vs.root();
        let mut vars = Vec::new();
        for (name, t) in full {
            let part = match name.as_str() {
                // Column-parallel: fc1's output features are its weight's rows.
                "fc1.weight" | "fc1.bias" => t.f_narrow(0, start, len)?,
                // Row-parallel: fc2's input features are its weight's columns.
                "fc2.weight" => t.f_narrow(1, start, len)?,
                _ => t.shallow_clone(),
            };
            // A VarStore name cannot hold '.': the layer is a sub-path.
            let (layer, what) = name.split_once('.').unwrap_or(("", name));
            let v = (&root / layer).f_var_copy(what, &part.f_contiguous()?)?;
            vars.push((name.clone(), v));
        }
        let model = TpModel {
            config,
            rank,
            world,
            vars,
            row,
        };
        for name in [
            "embed.weight",
            "embed.bias",
            "fc1.weight",
            "fc1.bias",
            "fc2.weight",
            "fc2.bias",
            "head.weight",
            "head.bias",
        ] {
            model.var(name)?;
        }
        Ok(model)
    }

    fn var(&self, name: &str) -> Result<&Tensor> {
        self.vars
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t)
            .ok_or_else(|| Error::Model(format!("the tensor-parallel model has no {name}")))
    }

    /// This rank's place in the group: `(rank, world)`.
    pub fn place(&self) -> (usize, usize) {
        (self.rank, self.world)
    }

    /// The sizes.
    pub fn config(&self) -> TpConfig {
        self.config
    }

    /// Forward on `xs` (`[batch, input]`, the same on every rank of the group):
    /// one all-reduce (inside the row-parallel layer) when the group has more
    /// than one rank.
    pub fn forward(&self, comm: &dyn Communicator, xs: &Tensor) -> Result<Forward> {
        let linear = |x: &Tensor, layer: &str| -> Result<Tensor> {
            let w = self.var(&format!("{layer}.weight"))?;
            let b = self.var(&format!("{layer}.bias"))?;
            Ok(x.f_matmul(&w.f_tr()?)?.f_add(b)?)
        };
        let embedded = linear(xs, "embed")?.f_gelu("none")?;
        let block_input = embedded.f_detach()?.f_set_requires_grad(true)?;
        // Column-parallel: this rank's hidden features, no communication.
        let pre = linear(&block_input, "fc1")?;
        let hidden = pre.f_gelu("none")?;
        let (w2, b2) = (self.var("fc2.weight")?, self.var("fc2.bias")?);
        let out = if self.world == 1 {
            hidden.f_matmul(&w2.f_tr()?)?.f_add(b2)?
        } else {
            self.row.forward(comm, &hidden, w2, b2)?
        };
        let shape = out.size();
        if shape != [xs.size()[0], self.config.width] {
            return Err(Error::Seam(
                format!(
                    "the row-parallel forward returned a tensor of shape {shape:?}; \
                     the block's output is [batch, width] = [{}, {}]",
                    xs.size()[0],
                    self.config.width
                )
                .into(),
            ));
        }
        let logits = linear(&out.f_gelu("none")?, "head")?;
        let rows = xs.size()[0];
        let activations = Activations {
            // The input, the embedding's pre- and post-GELU, the block's input
            // and output (pre- and post-GELU), the logits.
            replicated: rows * (self.config.input + 5 * self.config.width + self.config.classes),
            // fc1's output before and after GELU, this rank's slice.
            sharded: 2 * pre.size()[1] * rows,
        };
        Ok(Forward {
            logits,
            activations,
            embedded,
            block_input,
        })
    }

    /// Backward from `loss` (computed from `fwd.logits`): gradients in every
    /// variable; one all-reduce (of the block input's gradient) when the group
    /// has more than one rank.
    // ANCHOR: model_backward
    pub fn backward(&self, comm: &dyn Communicator, fwd: Forward, loss: &Tensor) -> Result<()> {
        loss.f_backward()?;
        let mut grad = fwd.block_input.f_grad()?;
        if !grad.defined() {
            return Err(Error::Seam(
                "no gradient reached the block's input: the row-parallel output must stay \
                 connected to its input in autograd (a detached all-reduce result has no \
                 history)"
                    .into(),
            ));
        }
        if self.world > 1 {
            // Each rank's gradient covers its own hidden features only;
            // Megatron's f adds them, so the replicated embedding below gets the
            // whole gradient, the same on every rank.
            grad = grad.f_contiguous()?.copy();
            comm.all_reduce(Input::InPlace, &mut buffer_mut(&mut grad)?, ReduceOp::Sum)?;
        }
        backward_with_grad(&fwd.embedded, &grad)
    }
    // ANCHOR_END: model_backward

    /// Copies of this rank's variables, sorted by name.
    pub fn snapshot(&self) -> Result<Vec<(String, Tensor)>> {
        let mut v = self
            .vars
            .iter()
            .map(|(n, t)| Ok((n.clone(), t.f_detach()?.copy())))
            .collect::<Result<Vec<_>>>()?;
        v.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(v)
    }

    /// The variables' gradients, in a fixed order (for data parallelism's
    /// all-reduce, which flattens them).
    pub fn grads(&self) -> Result<Vec<Tensor>> {
        self.vars.iter().map(|(_, t)| Ok(t.f_grad()?)).collect()
    }

    /// Predicted classes of `xs` (`no_grad`).
    pub fn predict(&self, comm: &dyn Communicator, xs: &Tensor) -> Result<Tensor> {
        let fwd = tch::no_grad(|| self.forward(comm, xs))?;
        Ok(fwd.logits.f_argmax(-1, false)?.f_to_kind(Kind::Int64)?)
    }
}
