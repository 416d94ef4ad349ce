//! Batch normalisation under data parallelism: local BatchNorm (each rank
//! normalises with its own rows' statistics, what a plain DDP model does) and
//! SyncBatchNorm (PyTorch's `nn.SyncBatchNorm`: the statistics of every rank's
//! rows together).
//!
//! SyncBatchNorm's forward all-reduces, per channel, the sum and the sum of
//! squares of the rows, with the row count: one collective gives the global
//! mean and variance. Its backward must all-reduce too: every rank's loss
//! depends on the global statistics, so the gradient with respect to them is a
//! sum over ranks before it reaches any rank's rows. [`BnMlp`] does that by
//! running backward stage by stage: each batch-norm input is a leaf, the
//! statistics are a leaf, and after a stage's backward the statistics'
//! gradient is all-reduced and pushed through this rank's sums before the
//! stage below starts.
//!
//! The statistics are a seam, [`Moments`]: [`SyncMoments`] is trainers' own,
//! and the workshop's lab 12 plugs the learner's in.

pub mod check;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use collectives::{Communicator, Input, ReduceOp};
use tch::nn::{self, Module};
use tch::{Kind, Tensor};

use crate::autograd::backward_with_grad;
use crate::comm::buffer_mut;
use crate::{Error, Result};

/// PyTorch's defaults.
const MOMENTUM: f64 = 0.1;
const EPS: f64 = 1e-5;

// ANCHOR: update_running
/// Moves the running statistics (`running_mean`, `running_var`, updated in
/// place) towards a batch's `mean` and biased `var` over `n` rows (the whole
/// batch: every rank's rows), as PyTorch's BatchNorm does:
/// `running ← (1 − momentum)·running + momentum·batch`, momentum 0.1, with the
/// batch's *unbiased* variance `var · n/(n − 1)`. Outside autograd: `mean` and
/// `var` carry the graph, and a buffer must not.
pub fn update_running(
    running_mean: &Tensor,
    running_var: &Tensor,
    mean: &Tensor,
    var: &Tensor,
    n: f64,
) -> Result<()> {
    if n < 2.0 {
        return Err(Error::InvalidArgument(format!(
            "an unbiased variance needs more than one row (got {n})"
        )));
    }
    tch::no_grad(|| -> Result<()> {
        let m = mean.f_detach()?;
        let v = var.f_detach()?.f_mul_scalar(n / (n - 1.0))?;
        running_mean
            .f_mul_scalar(1.0 - MOMENTUM)?
            .f_add(&m.f_mul_scalar(MOMENTUM)?)?
            .f_copy_into(running_mean)?;
        running_var
            .f_mul_scalar(1.0 - MOMENTUM)?
            .f_add(&v.f_mul_scalar(MOMENTUM)?)?
            .f_copy_into(running_var)?;
        Ok(())
    })
}
// ANCHOR_END: update_running

/// Sums a tensor over the ranks inside autograd: the forward is an
/// all-reduce, and the backward of the result is an all-reduce of its
/// gradient (done by [`BnMlp::backward`]).
pub type Reduce<'a> = dyn FnMut(&Tensor) -> Result<Tensor> + 'a;

/// Batch statistics: the seam of lab 12.
pub trait Moments: Send + Sync {
    /// The per-channel mean and *biased* variance of the rows of `x`
    /// (`[rows, channels]`) of every rank together, and their count.
    /// `reduce(t)` returns `t` summed over the ranks (one all-reduce per call)
    /// and keeps autograd's path to `t`.
    fn moments(&self, x: &Tensor, reduce: &mut Reduce<'_>) -> Result<(Tensor, Tensor, f64)>;
}

/// trainers' own: one all-reduce of `[Σx, Σx², n]` in f64, then `E[x]` and
/// `E[x²] − E[x]²`. (PyTorch's `nn.SyncBatchNorm` all-gathers each rank's
/// mean, inverse deviation and count instead and combines them; the same
/// statistics.)
#[derive(Debug, Clone, Copy, Default)]
pub struct SyncMoments;

impl Moments for SyncMoments {
    // ANCHOR: moments
    fn moments(&self, x: &Tensor, reduce: &mut Reduce<'_>) -> Result<(Tensor, Tensor, f64)> {
        let c = x.size()[1];
        // In f64: E[x²] − E[x]² loses as many digits as E[x]² is larger than
        // the variance, and a channel whose rows barely differ loses most of
        // f32's 24 bits. libtorch's own BatchNorm avoids it with a two-pass
        // (Welford) variance; f64 sums keep this one-pass form as accurate.
        let x64 = x.f_to_kind(Kind::Double)?;
        let rows = x64.f_new_full([1], x.size()[0] as f64, (Kind::Double, x.device()))?;
        // One tensor, one all-reduce: the sums and the count travel together.
        let local = Tensor::f_cat(
            &[
                x64.f_sum_dim_intlist(0, false, Kind::Double)?,
                x64.f_square()?.f_sum_dim_intlist(0, false, Kind::Double)?,
                rows,
            ],
            0,
        )?;
        let total = reduce(&local)?;
        let n = total.f_double_value(&[2 * c])?;
        let mean = total.f_narrow(0, 0, c)?.f_div_scalar(n)?;
        let var = total
            .f_narrow(0, c, c)?
            .f_div_scalar(n)?
            .f_sub(&mean.f_square()?)?;
        Ok((mean.f_to_kind(Kind::Float)?, var.f_to_kind(Kind::Float)?, n))
    }
    // ANCHOR_END: moments
}

/// How a [`BnMlp`] normalises.
#[derive(Clone)]
pub enum Norm {
    /// libtorch's own `batch_norm` on this rank's rows only.
    Local,
    /// Statistics over every rank's rows, from these [`Moments`].
    Sync(Arc<dyn Moments>),
}

impl Norm {
    /// "local BN" or "SyncBN".
    pub fn name(&self) -> &'static str {
        match self {
            Norm::Local => "local BN",
            Norm::Sync(_) => "SyncBN",
        }
    }
}

/// One batch-norm layer's tensors.
struct Bn {
    weight: Tensor,
    bias: Tensor,
    running_mean: Tensor,
    running_var: Tensor,
}

/// An MLP with batch norm after every hidden linear layer:
/// `Linear → BN → ReLU` repeated, then a linear head.
pub struct BnMlp {
    linears: Vec<nn::Linear>,
    bns: Vec<Bn>,
    norm: Norm,
}

/// One stage of a forward: a batch-norm input as a leaf, the graph that made
/// it, and the all-reduces of its statistics (this rank's sums, the sum over
/// ranks as a leaf).
struct Stage {
    made: Tensor,
    leaf: Tensor,
    reductions: Vec<(Tensor, Tensor)>,
}

/// A forward's logits and what [`BnMlp::backward`] needs.
pub struct Forward {
    /// `[rows, classes]`.
    pub logits: Tensor,
    stages: Vec<Stage>,
}

impl BnMlp {
    /// Widths `sizes` (input first, classes last), its variables in `vs`
    /// (`l{i}.weight`, `bn{i}.running_mean`, …).
    pub fn new(vs: &nn::Path, sizes: &[i64], norm: Norm) -> Result<BnMlp> {
        if sizes.len() < 2 || sizes.iter().any(|&s| s < 1) {
            return Err(Error::InvalidArgument(format!(
                "an MLP needs at least two positive widths, not {sizes:?}"
            )));
        }
        let mut linears = Vec::new();
        let mut bns = Vec::new();
        for i in 0..sizes.len() - 1 {
            linears.push(nn::linear(
                vs / format!("l{i}"),
                sizes[i],
                sizes[i + 1],
                Default::default(),
            ));
            if i + 2 < sizes.len() {
                let p = vs / format!("bn{i}");
                let c = sizes[i + 1];
                bns.push(Bn {
                    weight: p.f_ones("weight", &[c])?,
                    bias: p.f_zeros("bias", &[c])?,
                    running_mean: p.f_zeros_no_train("running_mean", &[c])?,
                    running_var: p.f_ones_no_train("running_var", &[c])?,
                });
            }
        }
        Ok(BnMlp { linears, bns, norm })
    }

    /// The running statistics, every layer's mean then variance: what DDP
    /// broadcasts from rank 0 before each forward (`broadcast_buffers`).
    pub fn buffers(&self) -> Vec<Tensor> {
        self.bns
            .iter()
            .flat_map(|b| {
                [
                    b.running_mean.shallow_clone(),
                    b.running_var.shallow_clone(),
                ]
            })
            .collect()
    }

    /// Forward on this rank's rows. `train`: batch statistics (local or
    /// synchronised, updating the running ones); else the running statistics.
    pub fn forward(&self, comm: &dyn Communicator, xs: &Tensor, train: bool) -> Result<Forward> {
        let mut stages = Vec::new();
        let mut h = xs.f_flatten(1, -1)?;
        for (i, lin) in self.linears.iter().enumerate() {
            let z = lin.forward(&h);
            let Some(bn) = self.bns.get(i) else {
                h = z;
                break;
            };
            let y = if !train {
                z.f_batch_norm(
                    Some(&bn.weight),
                    Some(&bn.bias),
                    Some(&bn.running_mean),
                    Some(&bn.running_var),
                    false,
                    MOMENTUM,
                    EPS,
                    false,
                )?
            } else {
                match &self.norm {
                    Norm::Local => z.f_batch_norm(
                        Some(&bn.weight),
                        Some(&bn.bias),
                        Some(&bn.running_mean),
                        Some(&bn.running_var),
                        true,
                        MOMENTUM,
                        EPS,
                        false,
                    )?,
                    Norm::Sync(moments) => {
                        let leaf = z.f_detach()?.f_set_requires_grad(true)?;
                        let mut reductions = Vec::new();
                        let mut reduce = |local: &Tensor| -> Result<Tensor> {
                            let mut total = local.f_detach()?.f_contiguous()?.copy();
                            comm.all_reduce(
                                Input::InPlace,
                                &mut buffer_mut(&mut total)?,
                                ReduceOp::Sum,
                            )?;
                            let total = total.f_set_requires_grad(true)?;
                            reductions.push((local.shallow_clone(), total.shallow_clone()));
                            Ok(total)
                        };
                        let (mean, var, n) = moments.moments(&leaf, &mut reduce)?;
                        let c = leaf.size()[1];
                        if mean.size() != [c] || var.size() != [c] {
                            return Err(Error::Seam(
                                format!(
                                    "the moments of {c} channels must be two tensors of [{c}], \
                                     not {:?} and {:?}",
                                    mean.size(),
                                    var.size()
                                )
                                .into(),
                            ));
                        }
                        if n < 2.0 {
                            return Err(Error::InvalidArgument(format!(
                                "batch norm needs more than one row in all (got {n})"
                            )));
                        }
                        update_running(&bn.running_mean, &bn.running_var, &mean, &var, n)?;
                        let y = leaf
                            .f_sub(&mean)?
                            .f_div(&var.f_add_scalar(EPS)?.f_sqrt()?)?
                            .f_mul(&bn.weight)?
                            .f_add(&bn.bias)?;
                        stages.push(Stage {
                            made: z,
                            leaf,
                            reductions,
                        });
                        y
                    }
                }
            };
            h = y.f_relu()?;
        }
        Ok(Forward { logits: h, stages })
    }

    /// Backward from `loss` (made from `fwd.logits`): gradients in every
    /// parameter, with each SyncBN layer's statistics gradient all-reduced.
    // ANCHOR: bn_backward
    pub fn backward(&self, comm: &dyn Communicator, fwd: Forward, loss: &Tensor) -> Result<()> {
        loss.f_backward()?;
        for stage in fwd.stages.into_iter().rev() {
            // The statistics' gradient on this rank covers this rank's loss
            // only; every rank's rows shaped them, so sum it over the ranks.
            for (local, total) in stage.reductions.iter().rev() {
                let g = total.f_grad()?;
                if !g.defined() || !local.requires_grad() {
                    // Without it the rows get no gradient through the mean and
                    // the variance: training goes on, silently wrong.
                    return Err(Error::Seam(
                        "the batch statistics are cut off from autograd: compute the tensor you \
                         reduce from `x`, and the mean and variance from what `reduce` returns \
                         (no detach on either)"
                            .into(),
                    ));
                }
                let mut g = g.f_contiguous()?.copy();
                comm.all_reduce(Input::InPlace, &mut buffer_mut(&mut g)?, ReduceOp::Sum)?;
                backward_with_grad(local, &g)?;
            }
            let g = stage.leaf.f_grad()?;
            if !g.defined() {
                return Err(Error::Seam(
                    "no gradient reached a batch-norm input: the moments must be computed from \
                     `x` and the result of `reduce` (not a detached copy)"
                        .into(),
                ));
            }
            backward_with_grad(&stage.made, &g)?;
        }
        Ok(())
    }
    // ANCHOR_END: bn_backward
}

/// `src` copied into `dst` in place (tch's `copy_` wants `&mut`).
trait CopyInto {
    fn f_copy_into(&self, dst: &Tensor) -> Result<()>;
}

impl CopyInto for Tensor {
    fn f_copy_into(&self, dst: &Tensor) -> Result<()> {
        dst.shallow_clone().f_copy_(self)?;
        Ok(())
    }
}
