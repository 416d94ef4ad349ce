//! Cost models fitted to the median times of each series.
//!
//! Two models, both on relative error (weights 1/t²):
//! - [`alpha_beta`]: t = α + β·S·f, one bandwidth for all sizes (Hockney).
//!   Kept for the labs and as the baseline the report compares against.
//! - [`regimes`]: t = α + S·f·(β_k + γ_k) with a bandwidth regime k per size
//!   range (cache below a fitted break, memory above): what the report draws
//!   and predicts with. [`reduction`] splits γ from β where an all_gather of
//!   the same series allows it.
//!
//! [`versus`] says where two fitted α–β lines cross: which of two backends
//! wins small messages and which large ones (lab 9's stretch goal).

mod alpha_beta;
mod lsq;
mod reduction;
mod regimes;
#[cfg(test)]
mod tests;
mod versus;

pub use alpha_beta::{AlphaBeta, Fit, Pinned, fit_alpha_beta};
pub use regimes::{
    Join, LatencyStep, MAX_REGIMES, MIN_SIZES_AFTER_BREAK, MIN_SIZES_FIRST, OneRegime,
    PLATEAU_FACTOR, Reduction, Regime, Regimes, fit_regimes,
};
pub use versus::{Crossover, PARALLEL_SLOPES, Side, fits_cross, lines_cross, predict_crossover};

use crate::dataset::Dataset;
use crate::results::Collective;

/// The fits of one series for one collective.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesFit {
    /// Index into [`Dataset::series`].
    pub series: usize,
    /// Display name of the series.
    pub name: String,
    /// Which collective.
    pub collective: Collective,
    /// Ranks.
    pub world: usize,
    /// Peer (torch) series.
    pub peer: bool,
    /// The α–β fit (the baseline).
    pub fit: Fit,
    /// The regime model; `None` exactly when `fit` is
    /// [`Fit::TooFewSizes`].
    pub model: Option<Regimes>,
}

/// Whether a collective's time includes reducing data.
fn reduces(c: Collective) -> bool {
    matches!(
        c,
        Collective::AllReduce | Collective::Reduce | Collective::ReduceScatter
    )
}

/// Fit every series of every collective (median times, one point per size),
/// then split γ from β in each all_reduce whose series also measured
/// all_gather.
pub fn fit_dataset(ds: &Dataset) -> Vec<SeriesFit> {
    let jobs: Vec<(Collective, usize)> = ds
        .collectives()
        .into_iter()
        .flat_map(|c| ds.series_for(c).into_iter().map(move |id| (c, id)))
        .collect();
    let fit_one = |&(collective, id): &(Collective, usize)| {
        let s = &ds.series[id];
        let pts: Vec<(f64, f64)> = ds
            .points(id, collective)
            .iter()
            .map(|r| (r.bytes as f64, r.median_us))
            .collect();
        let factor = collective.model_factor(s.world);
        let mut model = fit_regimes(&pts, factor);
        if reduces(collective) {
            if let Some(m) = model.as_mut() {
                m.reduction = Reduction::Combined;
            }
        }
        SeriesFit {
            series: id,
            name: s.name.clone(),
            collective,
            world: s.world,
            peer: s.peer,
            fit: fit_alpha_beta(&pts, factor),
            model,
        }
    };
    // The fits are independent and the regime search dominates a report of
    // thousands of series (6,250 took 11 s on one core): one chunk per core,
    // results in job order whatever the thread count.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = jobs.len().div_ceil(threads).max(64);
    let mut out: Vec<SeriesFit> = if jobs.len() <= chunk {
        jobs.iter().map(fit_one).collect()
    } else {
        std::thread::scope(|scope| {
            let handles: Vec<_> = jobs
                .chunks(chunk)
                .map(|part| scope.spawn(move || part.iter().map(fit_one).collect::<Vec<_>>()))
                .collect();
            // A fit that panicked is a bug: re-raised here, as it would be
            // without threads.
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                .collect()
        })
    };
    for i in 0..out.len() {
        if out[i].collective != Collective::AllReduce {
            continue;
        }
        let series = out[i].series;
        let Some(gather) = out
            .iter()
            .find(|f| f.series == series && f.collective == Collective::AllGather)
            .and_then(|f| f.model.clone())
        else {
            continue;
        };
        let sizes = |c: Collective| -> Vec<u64> {
            ds.points(series, c)
                .iter()
                .filter(|r| r.median_us > 0.0)
                .map(|r| r.bytes)
                .collect()
        };
        let gathered = sizes(Collective::AllGather);
        let shared: Vec<f64> = sizes(Collective::AllReduce)
            .into_iter()
            .filter(|s| *s > 0 && gathered.contains(s))
            .map(|s| s as f64)
            .collect();
        if let Some(m) = out[i].model.as_mut() {
            reduction::separate(m, &gather, &shared);
        }
    }
    out
}
