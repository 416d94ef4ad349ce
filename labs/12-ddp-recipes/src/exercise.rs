//! Lab 12, the file you edit: SyncBatchNorm's statistics. Under DDP each rank
//! sees only its own rows; with 4 rows per rank, a batch norm that normalises
//! with those 4 rows' mean and variance trains on noisy statistics, and every
//! rank's running statistics drift apart. SyncBatchNorm computes the mean and
//! variance of *every* rank's rows together.
//!
//! You get this rank's `[rows, channels]` activations `x` and `reduce`, which
//! sums a tensor over the ranks with one all-reduce (and, in backward, sums
//! its gradient over the ranks: trainers' `BnMlp` does that for you).
//!
//! Useful: `x.f_sum_dim_intlist(0, false, Kind::Float)` (per-channel sums of
//! the rows), `x.f_square()`, `Tensor::f_cat(&[a, b, c], 0)`,
//! `x.f_new_full([1], v, (Kind::Double, x.device()))` (a one-element tensor),
//! `t.f_narrow(0, start, len)`, `t.f_double_value(&[i])`, `t.f_div_scalar(n)`,
//! `a.f_sub(&b)`.

// Until the TODO is done the imports and arguments below are unused; delete
// this line when you have finished, and the compiler will tell you what is left.
#![allow(unused_imports, unused_variables)]

use tch::{Kind, Tensor};
use trainers::sync_bn::{Moments, Reduce};
use trainers::{Error, Result};

/// Your SyncBatchNorm statistics.
pub struct YourMoments;

impl Moments for YourMoments {
    // ANCHOR: moments
    /// The per-channel mean and biased variance of every rank's rows of `x`
    /// together, and how many rows that is.
    fn moments(&self, x: &Tensor, reduce: &mut Reduce<'_>) -> Result<(Tensor, Tensor, f64)> {
        // TODO(lab 12): SyncBatchNorm's statistics, in three steps:
        //  1. this rank's per-channel Σx and Σx², and its row count, in ONE
        //     tensor [Σx (C), Σx² (C), rows (1)]: one all-reduce instead of
        //     three. Compute it in f64 (`x.f_to_kind(Kind::Double)`): Σx²/n −
        //     mean² cancels the leading digits of two close numbers, and a
        //     channel whose rows barely differ keeps little of f32's 24 bits;
        //  2. `reduce` it: now the sums and the count are every rank's;
        //  3. mean = Σx / n and biased variance = Σx² / n − mean², per
        //     channel (not the average of each rank's variance: with unequal
        //     means that is not the variance of the whole batch); return them
        //     with n, as f32 again (`t.f_to_kind(Kind::Float)`).
        Err(labkit::todo!(12, "SyncBatchNorm's statistics"))
    }
    // ANCHOR_END: moments
}
