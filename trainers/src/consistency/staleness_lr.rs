//! The asynchronous parameter server's staleness-aware learning rate (Zhang,
//! Gupta, Lian and Liu 2016, "Staleness-aware Async-SGD for Distributed Deep
//! Learning", IJCAI): a gradient computed on parameters τ versions old is
//! applied with the learning rate divided by max(1, τ). A gradient with at
//! most one other push in between (τ ≤ 1) keeps the whole rate; an older
//! one, computed on parameters that τ pushes have moved since, moves them
//! less. τ counts versions (pushes applied), not
//! seconds: a slow step on parameters nobody touched is not stale. The rule
//! is off by default ([`Job::staleness_lr`](super::Job::staleness_lr)), so
//! the trainer's results stay what they were; lab 11's stretch goal writes
//! it.

use crate::{Error, Result};

/// A learning rate for a gradient: `lr` the server's rate, `current` the
/// server's version when the push arrives, `read` the version the worker
/// read before computing it. An error stops the training (an unsolved
/// exercise says so).
pub type StalenessLr = fn(lr: f64, current: u64, read: u64) -> Result<f64>;

// ANCHOR: staleness_aware_lr
/// `lr / max(1, τ)` with τ = `current − read`, the versions the parameters
/// moved between the worker's pull and its push; an error when `read` is
/// newer than `current` (no worker can read a version not yet made).
pub fn staleness_aware_lr(lr: f64, current: u64, read: u64) -> Result<f64> {
    let tau = current.checked_sub(read).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "a worker read version {read} of parameters the server has only up to version \
             {current}"
        ))
    })?;
    // max(1, τ): τ = 0 (nobody pushed in between) is as fresh as τ = 1, and
    // keeps the rate exact: lr / 1.0 is lr to the bit.
    Ok(lr / tau.max(1) as f64)
}
// ANCHOR_END: staleness_aware_lr

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_divided_by_the_versions_between_pull_and_push() {
        let lr = 0.1;
        assert_eq!(staleness_aware_lr(lr, 0, 0).unwrap(), lr);
        assert_eq!(staleness_aware_lr(lr, 6, 5).unwrap(), lr);
        assert_eq!(staleness_aware_lr(lr, 7, 5).unwrap(), lr / 2.0);
        assert_eq!(staleness_aware_lr(lr, 12, 4).unwrap(), lr / 8.0);
        // τ = 0 leaves the rate bit for bit (the one-worker trainer's): it is
        // divided by max(1, τ) = 1.0, which IEEE 754 division leaves exact on
        // any CPU. The halvings above are exact for the same reason.
        assert_eq!(
            staleness_aware_lr(0.3, 9, 9).unwrap().to_bits(),
            0.3f64.to_bits()
        );
    }

    #[test]
    fn a_version_read_from_the_future_is_an_error() {
        let e = staleness_aware_lr(0.1, 3, 5).unwrap_err().to_string();
        assert!(
            e.contains("read version 5") && e.contains("up to version 3"),
            "{e}"
        );
    }
}
