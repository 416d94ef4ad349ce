//! Lab 12: DDP recipes and pitfalls. Batch norm under DDP (local statistics,
//! DDP's buffer broadcast, SyncBatchNorm with the learner's statistics, a
//! [`Moments`]; the solution is trainers' [`SyncMoments`]), saving on rank 0
//! and loading on every rank, and inference of the DDP-trained model on one
//! device against the distributed evaluation.

pub mod exercise;

pub use labkit_torch::{fashion_mnist, lab_error};
use std::sync::Arc;
use std::time::Duration;

use collectives::{Communicator, Input, ReduceOp};
use labkit::{LabError, Variant};
use tch::Tensor;
use tch::nn;
use trainers::data::{self, Dataset};
use trainers::sync_bn::check::{self, Equivalence};
use trainers::sync_bn::{BnMlp, Moments, Norm, SyncMoments};
use trainers::train::Tally;

/// `variant`'s statistics.
pub fn moments(variant: Variant) -> Arc<dyn Moments> {
    match variant {
        Variant::Exercise => Arc::new(exercise::YourMoments),
        Variant::Solution => Arc::new(SyncMoments),
    }
}

/// The largest |Δ| from one-process BatchNorm the check accepts after 10
/// steps (see trainers' `sync_bn` tests: rounding is ~1e-6 here; the ReLUs
/// after each BN can grow a rounding on another CPU, hence the margin; wrong
/// statistics are off by 1e-3 and more).
pub const TOLERANCE: f64 = 1e-4;

/// SyncBN with `variant`'s statistics on `world` ranks of 8 rows against
/// BatchNorm on one process with all the rows, 10 steps of `data`, judged.
pub fn judge(variant: Variant, world: usize, data: &Dataset) -> Result<Equivalence, LabError> {
    let e = check::equivalence(world, 8, 10, data, moments(variant)).map_err(lab_error)?;
    if e.max_diff.is_nan() || e.max_diff > TOLERANCE || e.moved < 1e-3 {
        return Err(LabError::Wrong(format!(
            "on {world} ranks of 8 rows, after 10 steps the weights and running statistics \
             differ from one process's BatchNorm on all {} rows by up to {:.3e} (allowed \
             {TOLERANCE:e}): are the sums and the count reduced over the ranks, the variance \
             E[x²] − E[x]² of the whole batch (biased), and n the global row count?",
            world * 8,
            e.max_diff
        )));
    }
    Ok(e)
}

/// The self-check (`cargo lab check 12`): SyncBN with your statistics on 2
/// and 3 ranks trains like BatchNorm on one process with all the rows (weights
/// and running statistics within [`TOLERANCE`] after 10 SGD steps).
pub fn check(variant: Variant) -> Result<String, LabError> {
    let data = data::synthetic(3 * 8 * 10, 12).map_err(lab_error)?;
    let mut said = Vec::new();
    for world in [2, 3] {
        let e = judge(variant, world, &data)?;
        said.push(format!("{world} ranks: max |Δ| {:.1e}", e.max_diff));
    }
    Ok(format!(
        "SyncBN with your statistics trains like BatchNorm on all the rows ({})",
        said.join(", ")
    ))
}

/// Rows per evaluation batch, the same on one device and on every rank, so
/// that both run the same kernels on the same shapes: the logits are then the
/// same to the bit, and so are the counts.
pub const EVAL_ROWS: usize = 500;

/// A plain model (local BN, one device) holding `variables`.
pub fn plain_model(
    sizes: &[i64],
    variables: &[(String, Tensor)],
) -> trainers::Result<(nn::VarStore, BnMlp)> {
    let (vs, m) = check::model(sizes, Norm::Local, 0)?;
    tch::no_grad(|| -> trainers::Result<()> {
        for (name, t) in vs.variables() {
            let src = variables
                .iter()
                .find(|(n, _)| *n == name)
                .ok_or_else(|| trainers::Error::Model(format!("no variable {name}")))?;
            t.shallow_clone().f_copy_(&src.1)?;
        }
        Ok(())
    })?;
    Ok((vs, m))
}

/// Correct predictions and count over rows `rows` of `test`, in batches of
/// [`EVAL_ROWS`]; `train`: with batch statistics (the forgotten `model.eval()`).
pub fn tally(
    comm: &dyn Communicator,
    m: &BnMlp,
    test: &Dataset,
    rows: std::ops::Range<usize>,
    train: bool,
) -> trainers::Result<Tally> {
    let mut t = Tally::new();
    let mut from = rows.start;
    while from < rows.end {
        let n = EVAL_ROWS.min(rows.end - from);
        let idx: Vec<usize> = (from..from + n).collect();
        let (x, y) = test.batch(&idx)?;
        let logits = tch::no_grad(|| m.forward(comm, &x, train))?.logits;
        t.add_batch(&logits, &y)?;
        from += n;
    }
    Ok(t)
}

/// Distributed evaluation: `world` ranks, each with `variables`, evaluate
/// their share of `test` (whole batches of [`EVAL_ROWS`]) in eval mode and sum
/// correct predictions and counts with one all-reduce.
pub fn distributed_accuracy(
    sizes: &[i64],
    world: usize,
    variables: &[(String, Tensor)],
    test: &Dataset,
) -> trainers::Result<(u64, u64)> {
    let batches = test.len().div_ceil(EVAL_ROWS);
    let copies = std::sync::Mutex::new(
        (0..world)
            .map(|_| {
                variables
                    .iter()
                    .map(|(n, t)| (n.clone(), t.copy()))
                    .collect::<Vec<_>>()
            })
            .collect::<Vec<_>>(),
    );
    let out = trainers::thread_ranks::with_data_ranks(
        world,
        test,
        Duration::from_secs(60),
        |rank, comm, d| {
            let vars = copies
                .lock()
                .map_err(|_| trainers::Error::InvalidArgument("a rank panicked".into()))?
                .pop()
                .unwrap_or_default();
            let (_vs, m) = plain_model(sizes, &vars)?;
            let per = batches.div_ceil(world);
            let start = (rank * per * EVAL_ROWS).min(d.len());
            let end = ((rank + 1) * per * EVAL_ROWS).min(d.len());
            let t = tally(comm.as_ref(), &m, &d, start..end, false)?;
            let mut counts = Tensor::from_slice(&[t.correct() as i64, t.count() as i64]);
            comm.all_reduce(
                Input::InPlace,
                &mut trainers::comm::buffer_mut(&mut counts)?,
                ReduceOp::Sum,
            )?;
            Ok((
                counts.int64_value(&[0]) as u64,
                counts.int64_value(&[1]) as u64,
            ))
        },
    )?;
    out.into_iter()
        .next()
        .unwrap_or_else(|| Err(trainers::Error::InvalidArgument("no ranks".into())))
}

/// What [`resume`] found.
#[derive(Debug, Clone)]
pub struct Resumed {
    /// Where the interrupted run stopped: (epoch, batch in the epoch, step).
    pub stopped_at: (u64, u64, u64),
    /// Largest |Δ| of any variable between the resumed run and the
    /// uninterrupted one, on any rank.
    pub max_diff: f64,
}

/// Mid-epoch resume under DDP with SyncBN, `world` ranks of `b` rows,
/// DistributedSampler order (seed 0): one run trains `steps` steps straight;
/// another trains `stop` steps, saves (rank 0 writes, the others wait:
/// [`trainers::checkpoint::save_distributed`]), then every rank loads the file into
/// a fresh model and optimizer, skips the batches of the epoch already seen,
/// and trains to `steps`. The two must end equal to the bit (same data, same
/// operations in the same order).
pub fn resume(
    world: usize,
    b: usize,
    stop: u64,
    steps: u64,
    data: &Dataset,
    file: &std::path::Path,
) -> trainers::Result<Resumed> {
    use trainers::checkpoint::{self, TrainState};
    use trainers::optim::{Sgd, SgdConfig};
    use trainers::sampler::DistributedSampler;

    let out = trainers::thread_ranks::with_data_ranks(
        world,
        data,
        Duration::from_secs(60),
        |rank, comm, d| {
            let comm = comm.as_ref();
            let fresh = || -> trainers::Result<(nn::VarStore, BnMlp, Sgd)> {
                let (vs, m) =
                    check::model(&[784, 64, 64, 10], Norm::Sync(Arc::new(SyncMoments)), 12)?;
                let sgd = Sgd::new(&vs, SgdConfig::new(0.05).momentum(0.9))?;
                Ok((vs, m, sgd))
            };
            // Trains from `state` until `until` steps, in the sampler's order.
            let train = |vs: &nn::VarStore,
                         m: &BnMlp,
                         sgd: &mut Sgd,
                         state: &mut TrainState,
                         until: u64|
             -> trainers::Result<()> {
                let mut sampler =
                    DistributedSampler::new(d.len(), world, rank)?.with_seed(state.seed);
                while state.step < until {
                    sampler.set_epoch(state.epoch);
                    let order = sampler.indices();
                    let batches = (order.len() / b) as u64;
                    while state.batch_in_epoch < batches && state.step < until {
                        let at = state.batch_in_epoch as usize * b;
                        let (x, y) = d.batch(&order[at..at + b])?;
                        sgd.zero_grad();
                        let fwd = m.forward(comm, &x, true)?;
                        let l = trainers::train::cross_entropy(&fwd.logits, &y)?;
                        m.backward(comm, fwd, &l)?;
                        let grads: Vec<Tensor> =
                            vs.trainable_variables().iter().map(|v| v.grad()).collect();
                        trainers::comm::all_reduce_mean_flat(comm, &grads)?;
                        sgd.step()?;
                        state.batch_in_epoch += 1;
                        state.step += 1;
                    }
                    if state.batch_in_epoch == batches {
                        state.epoch += 1;
                        state.batch_in_epoch = 0;
                    }
                }
                Ok(())
            };
            // Straight through.
            let (vs, m, mut sgd) = fresh()?;
            let mut state = TrainState::default();
            train(&vs, &m, &mut sgd, &mut state, steps)?;
            let straight = trainers::parity::snapshot(&vs);
            // Interrupted at `stop`, saved, loaded into fresh objects, resumed.
            let (vs, m, mut sgd) = fresh()?;
            let mut state = TrainState::default();
            train(&vs, &m, &mut sgd, &mut state, stop)?;
            checkpoint::save_distributed(comm, file, &vs, Some(&sgd), &state)?;
            let stopped_at = (state.epoch, state.batch_in_epoch, state.step);
            let (vs, m, mut sgd) = fresh()?;
            let mut state = checkpoint::load(file, &vs, Some(&mut sgd))?;
            train(&vs, &m, &mut sgd, &mut state, steps)?;
            let resumed = trainers::parity::snapshot(&vs);
            Ok((stopped_at, trainers::parity::max_diff(&resumed, &straight)?))
        },
    )?;
    let mut max_diff = 0f64;
    let mut stopped_at = (0, 0, 0);
    for r in out {
        let (at, d) = r?;
        stopped_at = at;
        if d.is_nan() || d > max_diff {
            max_diff = d;
        }
    }
    Ok(Resumed {
        stopped_at,
        max_diff,
    })
}
