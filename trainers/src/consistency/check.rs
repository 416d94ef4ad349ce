//! The checks of a staleness bound, shared by trainers' tests and the
//! workshop's lab 11: no worker ever starts a step more than `s` ahead of
//! the slowest (read from the log of step starts), and with `s = 0` the
//! stale-synchronous trainer is the synchronous one.

use std::sync::Arc;

use super::{Consistency, Job, StalenessBound, Start, Straggler, Trained, train};
use crate::data::Dataset;
use crate::parity::tensor_diff;
use crate::{Error, Result};

/// The furthest any start in `log` ran ahead of the slowest worker.
pub fn max_ahead(log: &[Start]) -> u64 {
    log.iter()
        .map(|s| s.step.saturating_sub(s.slowest))
        .max()
        .unwrap_or(0)
}

/// The largest |Δ| between two trainings' final parameters.
pub fn trained_diff(a: &Trained, b: &Trained) -> Result<f64> {
    tensor_diff("the parameters", &a.params, &b.params)
}

/// What [`bound`] measured.
#[derive(Debug, Clone, Copy)]
pub struct BoundCheck {
    /// The staleness allowed in the straggler run.
    pub staleness: u64,
    /// How far ahead any worker started a step in it.
    pub max_ahead: u64,
    /// |Δ| between SSP with s = 0 and the synchronous parameter server.
    pub s0_vs_sync: f64,
}

/// A small job: 3 workers of 16 rows, 30 steps, worker 2 three times slower.
pub fn job(consistency: Consistency, bound: Arc<dyn StalenessBound>) -> Job {
    Job {
        consistency,
        workers: 3,
        batch: 16,
        steps: 30,
        lr: 0.1,
        hidden: vec![32],
        straggler: Some(Straggler {
            worker: 2,
            slowdown: 3.0,
        }),
        snapshot_every: 10,
        bound,
        // Each of the 30 steps takes milliseconds here.
        timeout: std::time::Duration::from_secs(10),
        staleness_lr: None,
    }
}

/// Runs `bound` with staleness 2 beside a straggler, then with staleness 0
/// against the synchronous parameter server, on `data`.
pub fn bound(bound: Arc<dyn StalenessBound>, data: &Dataset) -> Result<BoundCheck> {
    let staleness = 2;
    let run = train(&job(Consistency::Ssp { staleness }, bound.clone()), data)?;
    if run.log.len() as u64 != 3 * 30 {
        return Err(Error::InvalidArgument(format!(
            "{} step starts logged for 90 steps",
            run.log.len()
        )));
    }
    let ssp0 = train(&job(Consistency::Ssp { staleness: 0 }, bound.clone()), data)?;
    let sync = train(&job(Consistency::SyncPs, bound), data)?;
    Ok(BoundCheck {
        staleness,
        max_ahead: max_ahead(&run.log),
        s0_vs_sync: trained_diff(&ssp0, &sync)?,
    })
}
