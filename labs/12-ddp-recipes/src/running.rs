//! The check of lab 12's stretch goal, SyncBatchNorm's running statistics
//! (`cargo lab check 12 --stretch`). First a probe on numbers whose answer is
//! worked out by hand, which names the mistakes; then the statistics SyncBN
//! gives on 2 and 3 ranks of 8 rows (the whole batch's mean and biased
//! variance, n = 16 and 24), 10 steps of them, against the running statistics
//! libtorch's own BatchNorm keeps on the same rows: an independent reference
//! (PyTorch's kernel), not trainers' code, which is the solution.

#[cfg(test)]
mod tests;

use labkit::named;
use std::panic::{AssertUnwindSafe, catch_unwind};

use labkit::LabError;
use tch::{Kind, Tensor};

use crate::lab_error;

/// A running-statistics update, as `stretch::update_running` and trainers'
/// own `sync_bn::update_running` (so a test can hand in mistaken ones).
pub type Update = fn(&Tensor, &Tensor, &Tensor, &Tensor, f64) -> trainers::Result<()>;

/// PyTorch's default momentum and epsilon.
const MOMENTUM: f64 = 0.1;
const EPS: f64 = 1e-5;
/// Channels and rows per rank of the comparison with libtorch.
const CHANNELS: i64 = 5;
const ROWS: i64 = 8;
/// Float rounding of two orders of the same few operations on numbers below
/// 10 is ~1e-6; a biased variance is off by 1/(n − 1) of it, > 1e-2 here.
const TOLERANCE: f32 = 1e-5;

fn values(t: &Tensor) -> Result<Vec<f32>, LabError> {
    Vec::<f32>::try_from(&t.f_detach().map_err(|e| lab_error(e.into()))?)
        .map_err(|e| lab_error(e.into()))
}

fn tensor(v: &[f32]) -> Tensor {
    Tensor::from_slice(v)
}

/// Calls `f`; a panic becomes an error naming `when`.
fn call(
    f: Update,
    when: &str,
    args: (&Tensor, &Tensor, &Tensor, &Tensor, f64),
) -> Result<(), LabError> {
    match catch_unwind(AssertUnwindSafe(|| {
        f(args.0, args.1, args.2, args.3, args.4)
    })) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(lab_error(e)),
        Err(panic) => Err(LabError::Wrong(format!(
            "your update panicked {when}: {}",
            labkit::panic_message(&*panic)
        ))),
    }
}

fn close(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            let d = (x - y).abs();
            !d.is_nan() && d <= TOLERANCE
        })
}

/// The probe: running mean [0, 1] and variance [1, 2], a batch of n = 4 rows
/// with mean [2, −1] and biased variance [3, 0.5] (both carrying a graph, as
/// in SyncBN's forward). PyTorch gives mean 0.9·[0, 1] + 0.1·[2, −1] =
/// [0.2, 0.8] and variance 0.9·[1, 2] + 0.1·(4/3)·[3, 0.5] = [1.3, 1.8667].
fn probe(f: Update) -> Result<(), LabError> {
    let rm = tensor(&[0.0, 1.0]);
    let rv = tensor(&[1.0, 2.0]);
    let leaf = tensor(&[2.0, -1.0, 3.0, 0.5]).set_requires_grad(true);
    // Not leaves: computed from one, as SyncBN's statistics are.
    let graph = |start: i64| -> Result<Tensor, LabError> {
        leaf.f_narrow(0, start, 2)
            .and_then(|t| t.f_mul_scalar(1.0))
            .map_err(|e| lab_error(e.into()))
    };
    let (mean, var) = (graph(0)?, graph(2)?);
    call(f, "on the probe", (&rm, &rv, &mean, &var, 4.0))?;
    let (gm, gv) = (values(&rm)?, values(&rv)?);
    let head = format!(
        "running mean [0, 1] and variance [1, 2], a batch of 4 rows with mean [2, -1] and \
         biased variance [3, 0.5]: PyTorch's BatchNorm makes them [0.2, 0.8] and [1.3, \
         1.8667], yours {gm:?} and {gv:?}"
    );
    let want_m = [0.2, 0.8];
    let want_v = [1.3, 1.8 + 0.2 / 3.0];
    if gm == [0.0, 1.0] && gv == [1.0, 2.0] {
        return Err(LabError::Wrong(named(
            format!("{head}: unchanged; the buffers must change in their own memory"),
            "in-place",
        )));
    }
    if close(&gm, &[1.8, -0.8]) {
        return Err(LabError::Wrong(named(
            format!("{head}: the momentum weighs the batch, not the running value"),
            "momentum-weight",
        )));
    }
    if !close(&gm, &want_m) {
        return Err(LabError::Wrong(format!("{head}: the mean is off")));
    }
    if close(&gv, &[1.2, 1.85]) {
        return Err(LabError::Wrong(named(
            format!("{head}: that is the biased variance; the running one is unbiased"),
            "unbiased-variance",
        )));
    }
    if !close(&gv, &want_v) {
        return Err(LabError::Wrong(format!("{head}: the variance is off")));
    }
    if rm.requires_grad() || rv.requires_grad() {
        return Err(LabError::Wrong(named(
            format!(
                "the values are right, but after your update the running {} requires a \
                 gradient: it joined the graph of the batch's statistics, and every step \
                 would chain one more",
                if rm.requires_grad() {
                    "mean"
                } else {
                    "variance"
                }
            ),
            "outside-autograd",
        )));
    }
    Ok(())
}

/// `count` numbers in [−3, 5) from a fixed linear congruential sequence (no
/// global RNG, so the check is the same on every machine and thread).
fn numbers(count: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..count)
        .map(|_| {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 8.0 - 3.0
        })
        .collect()
}

/// 10 steps of SyncBN's whole-batch statistics on `world` ranks of 8 rows
/// through `f`, against libtorch's BatchNorm on the same rows; the largest
/// difference.
fn against_libtorch(f: Update, world: usize) -> Result<f32, LabError> {
    let t = |r: Result<Tensor, tch::TchError>| r.map_err(|e| lab_error(e.into()));
    let (rm, rv) = (
        Tensor::zeros([CHANNELS], (Kind::Float, tch::Device::Cpu)),
        Tensor::ones([CHANNELS], (Kind::Float, tch::Device::Cpu)),
    );
    let (lm, lv) = (rm.copy(), rv.copy());
    let n = ROWS * world as i64;
    for step in 0..10u64 {
        let rows = t(Tensor::from_slice(&numbers(
            (n * CHANNELS) as usize,
            step * 31 + world as u64,
        ))
        .f_reshape([n, CHANNELS]))?;
        // What SyncBN's statistics are: the whole batch's mean and biased
        // variance, over every rank's rows.
        let mean = t(rows.f_mean_dim(0, false, Kind::Float))?;
        let var = t(rows.f_var_correction(0, 0.0, false))?;
        call(
            f,
            &format!("at step {step} on {world} ranks"),
            (&rm, &rv, &mean, &var, n as f64),
        )?;
        // libtorch's own BatchNorm updates its running statistics in place.
        let _ = t(rows.f_batch_norm(
            None::<&Tensor>,
            None,
            Some(&lm),
            Some(&lv),
            true,
            MOMENTUM,
            EPS,
            false,
        ))?;
    }
    let mut worst = 0f32;
    for (what, got, want) in [("mean", &rm, &lm), ("variance", &rv, &lv)] {
        let (g, w) = (values(got)?, values(want)?);
        for c in 0..g.len() {
            let d = (g[c] - w[c]).abs();
            if d.is_nan() || d > TOLERANCE {
                return Err(LabError::Wrong(format!(
                    "on {world} ranks of {ROWS} rows (n = {n}), after 10 steps channel {c}'s \
                     running {what} is {} where libtorch's BatchNorm on the same rows keeps {} \
                     (allowed {TOLERANCE:e}): is n every rank's rows, and the variance \
                     unbiased over them?",
                    g[c], w[c]
                )));
            }
            worst = worst.max(d);
        }
    }
    Ok(worst)
}

/// The stretch goal's check: the probe, then 10 steps on 2 and 3 ranks
/// against libtorch's BatchNorm. Returns what passed.
pub fn check(f: Update) -> Result<String, LabError> {
    probe(f)?;
    let mut said = Vec::new();
    for world in [2, 3] {
        let worst = against_libtorch(f, world)?;
        said.push(format!("{world} ranks: max |Δ| {worst:.1e}"));
    }
    Ok(format!(
        "the running statistics are PyTorch's on the probe and match libtorch's BatchNorm after \
         10 steps of SyncBN's statistics ({}); the buffers stay outside autograd",
        said.join(", ")
    ))
}
