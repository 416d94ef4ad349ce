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
    let out = trainers::ddp::check::with_data_ranks(
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
