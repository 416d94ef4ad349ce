//! The check that a tensor-parallel group trains like the unsplit model, and
//! the measurement that sets it beside data parallelism at the same model
//! size: shared by trainers' tests and the workshop's lab 14.
//!
//! Ranks are threads, each with its own reference-backend communicator over
//! shared memory (metered), its own VarStore and its own optimizer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tch::nn;
use tch::{Device, Tensor};

use super::{AllReduceRow, RowForward, TpConfig, TpModel, shard};
use crate::data::Dataset;
use crate::parity::{reference_sgd, tensor_diff, worst};
use crate::thread_ranks::with_data_ranks;
use crate::traffic::{Counted, Metered, Traffic};
use crate::train::cross_entropy;
use crate::{Error, Result};

/// Seed of the unsplit model's parameters.
const SEED: i64 = 14;

/// What [`equivalence`] measured.
#[derive(Debug, Clone)]
pub struct Equivalence {
    /// Largest |Δ| between any rank's parameters (its shards) and the matching
    /// parameters of the unsplit model after the same steps.
    pub max_diff: f64,
    /// Largest |Δ| the unsplit model's parameters moved: a check that moved
    /// nothing would prove nothing.
    pub moved: f64,
    /// Largest |Δ| between the logits of the first forward and the unsplit
    /// model's (before any update).
    pub first_logits_diff: f64,
    /// All-reduce calls of each step's forward, rank 0.
    pub forward_all_reduces: Vec<u64>,
    /// All-reduce calls of each step's backward, rank 0.
    pub backward_all_reduces: Vec<u64>,
}

/// Rows `start..start + n`, images flattened to `[n, 784]`.
fn rows(data: &Dataset, start: usize, n: usize) -> Result<(Tensor, Tensor)> {
    let (x, y) = data.rows(start, n)?;
    Ok((x.f_reshape([n as i64, -1])?, y))
}

fn need(data: &Dataset, rows: usize) -> Result<()> {
    if (data.labels.size()[0] as usize) < rows {
        return Err(Error::InvalidArgument(format!(
            "the tensor-parallel check needs {rows} rows, the data has {}",
            data.labels.size()[0]
        )));
    }
    Ok(())
}

/// `world` ranks of one tensor-parallel group (each with `row` as the
/// row-parallel forward) against the unsplit model, `steps` SGD steps of
/// `batch` rows from the same start. Each rank's `fc1`/`fc2` shard is compared
/// with the same slice of the unsplit model's, the replicated parameters
/// whole.
///
/// The sums differ in order only: fc2's output adds `world` partial sums
/// instead of one, and the block input's gradient likewise. GELU is smooth, so
/// those roundings stay of their own size instead of flipping a ReLU's branch.
pub fn equivalence(
    config: TpConfig,
    world: usize,
    batch: usize,
    steps: usize,
    data: &Dataset,
    row: Arc<dyn RowForward>,
) -> Result<Equivalence> {
    need(data, batch * steps)?;
    tch::set_num_threads(1);
    let full = config.init(SEED)?;
    // The unsplit model, in this thread (world 1: no communication).
    let (want, first_logits) = with_data_ranks(1, data, Duration::from_secs(30), |_, comm, d| {
        // Tensors are not Sync: every rank draws its own copy (the same).
        let full = config.init(SEED)?;
        let vs = nn::VarStore::new(Device::Cpu);
        let model = TpModel::new(&vs, config, &full, 0, 1, Arc::new(AllReduceRow))?;
        let mut opt = reference_sgd(&vs)?;
        let mut first = None;
        for s in 0..steps {
            let (x, y) = rows(&d, s * batch, batch)?;
            opt.zero_grad();
            let fwd = model.forward(comm.as_ref(), &x)?;
            first.get_or_insert(fwd.logits.f_detach()?.copy());
            let loss = cross_entropy(&fwd.logits, &y)?;
            model.backward(comm.as_ref(), fwd, &loss)?;
            opt.step();
        }
        Ok((model.snapshot()?, first))
    })?
    .pop()
    .ok_or_else(|| Error::InvalidArgument("no unsplit run".into()))??;
    let first_logits =
        first_logits.ok_or_else(|| Error::InvalidArgument("no steps to check".into()))?;
    let got = with_data_ranks(world, data, Duration::from_secs(30), |rank, comm, d| {
        let traffic = Traffic::new();
        let comm = Metered::new(comm, traffic.clone());
        let vs = nn::VarStore::new(Device::Cpu);
        let start = config.init(SEED)?;
        let model = TpModel::new(&vs, config, &start, rank, world, row.clone())?;
        let mut opt = reference_sgd(&vs)?;
        let (mut fwd_calls, mut bwd_calls) = (Vec::new(), Vec::new());
        let mut logits = None;
        for s in 0..steps {
            let (x, y) = rows(&d, s * batch, batch)?;
            opt.zero_grad();
            let before = traffic.calls(Counted::AllReduce);
            let fwd = model.forward(&comm, &x)?;
            let mid = traffic.calls(Counted::AllReduce);
            logits.get_or_insert(fwd.logits.f_detach()?.copy());
            let loss = cross_entropy(&fwd.logits, &y)?;
            model.backward(&comm, fwd, &loss)?;
            fwd_calls.push(mid - before);
            bwd_calls.push(traffic.calls(Counted::AllReduce) - mid);
            opt.step();
        }
        Ok((model.snapshot()?, logits, fwd_calls, bwd_calls))
    })?;
    let mut out = Equivalence {
        max_diff: 0.0,
        moved: max_abs_diff(&want, &full, config, 0, 1)?,
        first_logits_diff: 0.0,
        forward_all_reduces: Vec::new(),
        backward_all_reduces: Vec::new(),
    };
    for (rank, g) in got.into_iter().enumerate() {
        let (params, logits, fwd_calls, bwd_calls) = g?;
        out.max_diff = worst(
            out.max_diff,
            max_abs_diff(&params, &want, config, rank, world)?,
        );
        if let Some(l) = logits {
            let d = tensor_diff("the first logits", &l, &first_logits)?;
            out.first_logits_diff = worst(out.first_logits_diff, d);
        }
        if rank == 0 {
            out.forward_all_reduces = fwd_calls;
            out.backward_all_reduces = bwd_calls;
        }
    }
    Ok(out)
}

/// Largest |Δ| between rank `rank`'s shards `part` and the same slices of the
/// unsplit `whole`.
fn max_abs_diff(
    part: &[(String, Tensor)],
    whole: &[(String, Tensor)],
    config: TpConfig,
    rank: usize,
    world: usize,
) -> Result<f64> {
    let (start, len) = shard(config.hidden, rank, world);
    let mut max = 0f64;
    for (name, p) in part {
        let w = &whole
            .iter()
            .find(|(n, _)| n == name)
            .ok_or_else(|| Error::Model(format!("the unsplit model has no {name}")))?
            .1;
        let w = match name.as_str() {
            "fc1.weight" | "fc1.bias" => w.f_narrow(0, start, len)?,
            "fc2.weight" => w.f_narrow(1, start, len)?,
            _ => w.shallow_clone(),
        };
        max = worst(max, tensor_diff(name, p, &w)?);
    }
    Ok(max)
}

/// How the model is split across the ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// Every rank the whole model on its share of the batch; one all-reduce of
    /// every gradient per step (DDP with one bucket).
    Data,
    /// Every rank the whole batch on its shards of the block; two all-reduces
    /// of `[batch, width]` per step.
    Tensor,
}

impl Split {
    /// "data parallel" or "tensor parallel".
    pub fn name(self) -> &'static str {
        match self {
            Split::Data => "data parallel",
            Split::Tensor => "tensor parallel",
        }
    }
}

/// What [`footprint`] measured on rank 0.
#[derive(Debug, Clone, Copy)]
pub struct Footprint {
    /// Parameter elements this rank holds.
    pub parameters: i64,
    /// Activation elements one forward keeps for backward on this rank.
    pub activations: i64,
    /// Of which in this rank's slices of the hidden activation.
    pub sharded_activations: i64,
    /// Payload bytes this rank all-reduced per step.
    pub bytes_per_step: u64,
    /// Bytes this rank sends per step if every all-reduce runs the ring
    /// algorithm: 2(n−1)/n of the payload.
    pub ring_bytes_sent_per_step: f64,
    /// All-reduce calls per step.
    pub all_reduces_per_step: u64,
    /// The median step time (forward, backward, communication, update).
    pub step: Duration,
}

/// `world` thread ranks train `config` for `steps` steps at a global batch of
/// `batch` rows, split as `split`; rank 0's [`Footprint`]. The first two
/// steps are not timed (first-touch allocation).
pub fn footprint(
    config: TpConfig,
    split: Split,
    world: usize,
    batch: usize,
    steps: usize,
    data: &Dataset,
) -> Result<Footprint> {
    if split == Split::Data && batch % world != 0 {
        return Err(Error::InvalidArgument(format!(
            "data parallelism splits the batch: {batch} rows do not divide over {world} ranks"
        )));
    }
    need(data, batch * steps)?;
    let threads = tch::get_num_threads();
    let mut got = with_data_ranks(world, data, Duration::from_secs(60), |rank, comm, d| {
        tch::set_num_threads(threads);
        let traffic = Traffic::new();
        let comm = Metered::new(comm, traffic.clone());
        let full = config.init(SEED)?;
        let vs = nn::VarStore::new(Device::Cpu);
        let (shard_rank, shard_world) = match split {
            Split::Data => (0, 1),
            Split::Tensor => (rank, world),
        };
        let model = TpModel::new(
            &vs,
            config,
            &full,
            shard_rank,
            shard_world,
            Arc::new(AllReduceRow),
        )?;
        let mut opt = reference_sgd(&vs)?;
        let mut times = Vec::new();
        let mut activations = Default::default();
        let (mut bytes, mut calls, mut sent) = (0, 0, 0.0);
        for s in 0..steps {
            let (x, y) = match split {
                Split::Data => {
                    let local = batch / world;
                    rows(&d, s * batch + rank * local, local)?
                }
                Split::Tensor => rows(&d, s * batch, batch)?,
            };
            let (b0, c0) = (
                traffic.bytes(Counted::AllReduce),
                traffic.calls(Counted::AllReduce),
            );
            let s0 = traffic.ring_bytes_sent(world);
            let t = Instant::now();
            opt.zero_grad();
            let fwd = model.forward(&comm, &x)?;
            activations = fwd.activations;
            let loss = cross_entropy(&fwd.logits, &y)?;
            model.backward(&comm, fwd, &loss)?;
            if split == Split::Data {
                crate::comm::all_reduce_mean_flat(&comm, &model.grads()?)?;
            }
            opt.step();
            if s >= 2 {
                times.push(t.elapsed());
            }
            bytes = traffic.bytes(Counted::AllReduce) - b0;
            calls = traffic.calls(Counted::AllReduce) - c0;
            sent = traffic.ring_bytes_sent(world) - s0;
        }
        times.sort();
        Ok(Footprint {
            parameters: config.parameters_per_rank(shard_rank, shard_world),
            activations: activations.total(),
            sharded_activations: activations.sharded,
            bytes_per_step: bytes,
            ring_bytes_sent_per_step: sent,
            all_reduces_per_step: calls,
            step: times.get(times.len() / 2).copied().unwrap_or_default(),
        })
    })?;
    if got.is_empty() {
        return Err(Error::InvalidArgument("no ranks".into()));
    }
    got.swap_remove(0)
}
