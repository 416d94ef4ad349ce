//! Lab 12: DDP recipes and pitfalls. Batch norm under DDP (local statistics,
//! DDP's buffer broadcast, SyncBatchNorm with the learner's statistics, a
//! [`Moments`]; the solution is trainers' [`SyncMoments`]), saving on rank 0
//! and loading on every rank, and inference of the DDP-trained model on one
//! device against the distributed evaluation.
//!
//! The optional stretch goal, SyncBatchNorm's running statistics, is the
//! learner's `src/stretch.rs`, compiled only by its own check
//! `tests/stretch.rs`; [`running`] judges it against libtorch's own
//! BatchNorm, and its solution is trainers' own
//! [`trainers::sync_bn::update_running`], which [`BnMlp`] calls.

pub mod exercise;
pub mod running;

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
    judge_moments(moments(variant), world, data)
}

/// [`judge`] for any statistics.
pub fn judge_moments(
    m: Arc<dyn Moments>,
    world: usize,
    data: &Dataset,
) -> Result<Equivalence, LabError> {
    let e = match check::equivalence(world, 8, 10, data, m.clone()) {
        Ok(e) => e,
        // Diverged: NaN weights can be compared with nothing; say why if we can.
        Err(trainers::Error::NonFinite(what)) => {
            return Err(LabError::Wrong(format!(
                "on {world} ranks of 8 rows the training diverged: {what}.{}",
                diagnose(m.as_ref()).unwrap_or_default()
            )));
        }
        Err(other) => return Err(lab_error(other)),
    };
    if e.max_diff.is_nan() || e.max_diff > TOLERANCE || e.moved < 1e-3 {
        return Err(LabError::Wrong(format!(
            "on {world} ranks of 8 rows, after 10 steps the weights and running statistics \
             differ from one process's BatchNorm on all {} rows by up to {:.3e} (allowed \
             {TOLERANCE:e}): are the sums and the count reduced over the ranks, the variance \
             E[x²] − E[x]² of the whole batch (biased), and n the global row count?{}",
            world * 8,
            e.max_diff,
            diagnose(m.as_ref()).unwrap_or_default()
        )));
    }
    Ok(e)
}

/// Names the mistake in statistics `m`, if it is one we know, by
/// calling them on two rows `[1, 3]` of one channel where the other rank holds
/// the same two rows (so `reduce` doubles what it is given): the whole batch is
/// 4 rows, mean 2, biased variance 1.
pub fn diagnose(m: &dyn Moments) -> Option<String> {
    let x = Tensor::from_slice(&[1f32, 3.0]).f_reshape([2, 1]).ok()?;
    let mut reduced = false;
    let mut reduce = |t: &Tensor| -> trainers::Result<Tensor> {
        reduced = true;
        Ok(t.f_mul_scalar(2.0)?)
    };
    let (mean, var, n) = m.moments(&x, &mut reduce).ok()?;
    let (mean, var) = (
        mean.f_double_value(&[0]).ok()?,
        var.f_double_value(&[0]).ok()?,
    );
    let close = |a: f64, b: f64| (a - b).abs() < 1e-6;
    let (why, key) = if !reduced {
        (
            "your statistics never call `reduce`: each rank normalises with its own rows only",
            "never-reduced",
        )
    } else if close(n, 2.0) && close(mean, 4.0) {
        (
            "n is this rank's row count (2), not every rank's (4): the sums were reduced but \
         divided by the local count, so the mean doubles and Σx²/n − mean² goes negative \
         (here −6), and the square root of a negative variance is NaN",
            "local-row-count",
        )
    } else if close(n, 2.0) {
        (
            "n is this rank's row count (2), not the count over all ranks (4): reduce the row \
         count with the sums",
            "local-row-count",
        )
    } else if close(mean, 2.0) && close(n, 4.0) && !close(var, 1.0) {
        (
            "the mean and n are right, the variance is not: it must be Σx²/n − mean² of the \
         whole batch (biased), not an average of each rank's variance",
            "variance-of-whole-batch",
        )
    } else {
        return None;
    };
    Some(format!(
        "\nOn rows [1, 3] on each of 2 ranks (whole batch: mean 2, variance 1, n 4) yours \
         gave mean {mean}, variance {var}, n {n}: {why}.\nhint: {key}"
    ))
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

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Kind;

    /// Statistics from reduced sums, with one of two mistakes: the count is
    /// this rank's (`local_count`), or the variance is the unbiased one
    /// (`unbiased`, as `Tensor::var` gives by default).
    struct Sums {
        local_count: bool,
        unbiased: bool,
    }
    impl Moments for Sums {
        fn moments(
            &self,
            x: &Tensor,
            reduce: &mut trainers::sync_bn::Reduce<'_>,
        ) -> trainers::Result<(Tensor, Tensor, f64)> {
            let rows = x.size()[0] as f64;
            let x = x.f_to_kind(Kind::Double)?;
            let sums = Tensor::f_cat(
                &[
                    x.f_sum_dim_intlist(0, false, Kind::Double)?,
                    x.f_square()?.f_sum_dim_intlist(0, false, Kind::Double)?,
                    Tensor::from_slice(&[rows]),
                ],
                0,
            )?;
            let sums = reduce(&sums)?;
            let c = x.size()[1];
            let n = if self.local_count {
                rows
            } else {
                sums.f_double_value(&[2 * c])?
            };
            let mean = sums.f_narrow(0, 0, c)?.f_div_scalar(n)?;
            let mut var = sums
                .f_narrow(0, c, c)?
                .f_div_scalar(n)?
                .f_sub(&mean.f_square()?)?;
            if self.unbiased {
                var = var.f_mul_scalar(n / (n - 1.0))?;
            }
            Ok((mean.f_to_kind(Kind::Float)?, var.f_to_kind(Kind::Float)?, n))
        }
    }

    /// The typical mistake: the sums are reduced, the count is this rank's.
    #[allow(non_upper_case_globals)]
    const LocalCount: Sums = Sums {
        local_count: true,
        unbiased: false,
    };

    /// Named after what broke: lab 12's check passed `n = rows` ("max |Δ|
    /// 0.0e0"), because all-NaN weights read as Δ = 0.
    #[test]
    fn local_row_count_fails_and_is_named() {
        let data = data::synthetic(3 * 8 * 10, 12).unwrap();
        let e = judge_moments(Arc::new(LocalCount), 2, &data).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("n is this rank's row count (2)"), "{msg}");
        assert!(msg.contains("hint: local-row-count"), "{msg}");
        assert!(diagnose(&SyncMoments).is_none());
    }

    /// The other typical mistake: each rank's own statistics, `reduce` never
    /// called (plain BatchNorm under another name).
    struct NeverReduced;
    impl Moments for NeverReduced {
        fn moments(
            &self,
            x: &Tensor,
            _reduce: &mut trainers::sync_bn::Reduce<'_>,
        ) -> trainers::Result<(Tensor, Tensor, f64)> {
            let mean = x.f_mean_dim(0, false, Kind::Float)?;
            let var = x.f_var_dim(0, false, false)?;
            Ok((mean, var, x.size()[0] as f64))
        }
    }

    #[test]
    fn statistics_that_never_reduce_are_named() {
        let data = data::synthetic(3 * 8 * 10, 12).unwrap();
        let msg = judge_moments(Arc::new(NeverReduced), 2, &data)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("never call `reduce`"), "{msg}");
        assert!(msg.contains("hint: never-reduced"), "{msg}");
    }

    #[test]
    fn unbiased_variance_is_named() {
        let data = data::synthetic(3 * 8 * 10, 12).unwrap();
        let unbiased = Sums {
            local_count: false,
            unbiased: true,
        };
        let msg = judge_moments(Arc::new(unbiased), 2, &data)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("the variance is not"), "{msg}");
        assert!(msg.contains("hint: variance-of-whole-batch"), "{msg}");
        // The same sums with the biased variance are right.
        let right = Sums {
            local_count: false,
            unbiased: false,
        };
        assert!(diagnose(&right).is_none());
        assert!(judge_moments(Arc::new(right), 2, &data).is_ok());
    }
}
