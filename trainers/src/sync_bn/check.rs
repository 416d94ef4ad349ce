//! The check that SyncBatchNorm on R ranks trains like BatchNorm on one
//! process with all the rows, shared by trainers' tests and the workshop's
//! lab 12; and the per-rank running statistics of a training, to compare
//! local BN, local BN with DDP's buffer broadcast, and SyncBN.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use collectives::{Communicator, Input};
use tch::nn;
use tch::{Device, Tensor};

use super::{BnMlp, Moments, Norm};
use crate::comm::{all_reduce_mean_flat, buffer_mut};
use crate::data::Dataset;
use crate::metrics::{Metrics, StepRecord};
/// What [`equivalence`] measured: the largest difference, and how far the
/// reference moved.
pub use crate::parity::Equivalence;
use crate::parity::{LR, max_diff, reference_sgd, snapshot, worst};
use crate::thread_ranks::with_data_ranks;
use crate::train::{Tally, cross_entropy};
use crate::{Error, Result};

/// The checks' model: two hidden layers of 64, each with batch norm.
pub const SIZES: [i64; 4] = [784, 64, 64, 10];

/// A [`BnMlp`] of `sizes` in a new VarStore, drawn from `seed` (under a lock:
/// libtorch's generator is global and thread ranks draw at once).
pub fn model(sizes: &[i64], norm: Norm, seed: i64) -> Result<(nn::VarStore, BnMlp)> {
    crate::seed::seeded(seed, || {
        let vs = nn::VarStore::new(Device::Cpu);
        let m = BnMlp::new(&vs.root(), sizes, norm)?;
        Ok((vs, m))
    })
}

/// One data-parallel step: forward, backward, gradients averaged over the
/// ranks, SGD. Returns this rank's loss and hits on its rows.
fn step(
    comm: &dyn Communicator,
    m: &BnMlp,
    vs: &nn::VarStore,
    opt: &mut nn::Optimizer,
    x: &Tensor,
    y: &Tensor,
) -> Result<Tally> {
    opt.zero_grad();
    let fwd = m.forward(comm, x, true)?;
    let mut tally = Tally::new();
    tally.add_batch(&fwd.logits, y)?;
    let l = cross_entropy(&fwd.logits, y)?;
    m.backward(comm, fwd, &l)?;
    if comm.world_size() > 1 {
        let grads: Vec<Tensor> = vs.trainable_variables().iter().map(|v| v.grad()).collect();
        all_reduce_mean_flat(comm, &grads)?;
    }
    opt.step();
    Ok(tally)
}

/// SyncBN (with `moments`) on `world` ranks of `b` rows against libtorch's
/// BatchNorm on one process with the `world · b` rows, `steps` SGD steps with
/// momentum, gradients averaged over the ranks. The sums differ in order, and
/// SyncBN's variance is E\[x²\] − E\[x\]² where libtorch's is a two-pass one, so
/// they agree to rounding, not to the bit.
pub fn equivalence(
    world: usize,
    b: usize,
    steps: usize,
    data: &Dataset,
    moments: Arc<dyn Moments>,
) -> Result<Equivalence> {
    tch::set_num_threads(1);
    let want = with_data_ranks(1, data, Duration::from_secs(30), |_, comm, d| {
        let (vs, m) = model(&SIZES, Norm::Local, 12)?;
        let mut opt = reference_sgd(&vs)?;
        for s in 0..steps {
            let (x, y) = d.rows(s * world * b, world * b)?;
            step(comm.as_ref(), &m, &vs, &mut opt, &x, &y)?;
        }
        Ok(snapshot(&vs))
    })?
    .pop()
    .ok_or_else(|| Error::InvalidArgument("no ranks".into()))??;
    let (init, _) = model(&SIZES, Norm::Local, 12)?;
    let moved = max_diff(&want, &snapshot(&init))?;
    let got = with_data_ranks(world, data, Duration::from_secs(30), |rank, comm, d| {
        let (vs, m) = model(&SIZES, Norm::Sync(moments.clone()), 12)?;
        let mut opt = reference_sgd(&vs)?;
        for s in 0..steps {
            let (x, y) = d.rows(s * world * b + rank * b, b)?;
            step(comm.as_ref(), &m, &vs, &mut opt, &x, &y)?;
        }
        Ok(snapshot(&vs))
    })?;
    let mut max = 0f64;
    for g in got {
        max = worst(max, max_diff(&g?, &want)?);
    }
    Ok(Equivalence {
        max_diff: max,
        moved,
    })
}

/// How the ranks of [`running_stats`] keep their batch-norm statistics.
#[derive(Clone)]
pub struct BnMode {
    /// Local or synchronised batch statistics.
    pub norm: Norm,
    /// Whether rank 0's running statistics are broadcast before every
    /// forward (PyTorch DDP's `broadcast_buffers=True`, its default).
    pub broadcast_buffers: bool,
    /// Where rank 0 writes each step's loss and accuracy over *every* rank's
    /// rows (summed exactly with one all-reduce), as JSON lines.
    pub metrics: Option<PathBuf>,
}

/// What one rank of [`running_stats`] ended with.
pub struct Trained {
    /// Its running statistics after each step (first BN layer's means).
    pub running_means: Vec<Tensor>,
    /// Its variables at the end.
    pub variables: Vec<(String, Tensor)>,
    /// Its loss on its own rows, each step.
    pub losses: Vec<f64>,
}

/// `world` ranks train [`BnMlp`] of `sizes` for `steps` steps of `b` rows
/// each (rank r's rows of each global batch of `data`, in order) in `mode`;
/// what every rank ended with.
pub fn running_stats(
    sizes: &[i64],
    world: usize,
    b: usize,
    steps: usize,
    data: &Dataset,
    mode: BnMode,
) -> Result<Vec<Trained>> {
    let out = with_data_ranks(world, data, Duration::from_secs(60), |rank, comm, d| {
        let (vs, m) = model(sizes, mode.norm.clone(), 12)?;
        let mut opt = reference_sgd(&vs)?;
        let mut running_means = Vec::new();
        let mut losses = Vec::new();
        let n = d.labels.size()[0] as usize;
        let mut metrics = match &mode.metrics {
            Some(path) => Some(Metrics::new(rank, world, Some(path), false)?.progress(false)),
            None => None,
        };
        for s in 0..steps {
            let t0 = Instant::now();
            if mode.broadcast_buffers {
                for t in m.buffers() {
                    let mut t = t;
                    comm.broadcast(Input::InPlace, &mut buffer_mut(&mut t)?, 0)?;
                }
            }
            let start = (s * world * b + rank * b) % (n - b).max(1);
            let (x, y) = d.rows(start, b)?;
            let mut tally = step(comm.as_ref(), &m, &vs, &mut opt, &x, &y)?;
            losses.push(tally.loss());
            running_means.push(m.buffers()[0].copy());
            if let Some(metrics) = &mut metrics {
                // Every rank takes part; only rank 0's Metrics writes.
                tally.all_reduce(comm.as_ref())?;
                metrics.step(&StepRecord {
                    epoch: 0,
                    step: s as u64 + 1,
                    loss: tally.loss(),
                    accuracy: tally.accuracy(),
                    samples_per_s: tally.count() as f64 / t0.elapsed().as_secs_f64(),
                    lr: LR,
                })?;
            }
        }
        if let Some(metrics) = &mut metrics {
            metrics.flush()?;
        }
        Ok(Trained {
            running_means,
            variables: snapshot(&vs),
            losses,
        })
    })?;
    out.into_iter().collect()
}
