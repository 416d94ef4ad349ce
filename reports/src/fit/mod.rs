//! Cost models fitted to the median times of each series.
//!
//! Two models, both on relative error (weights 1/t²):
//! - [`alpha_beta`]: t = α + β·S·f, one bandwidth for all sizes (Hockney).
//!   Kept for the labs and as the baseline the report compares against.
//! - [`regimes`]: t = α + S·f·(β_k + γ_k) with a bandwidth regime k per size
//!   range (cache below a fitted break, memory above): what the report draws
//!   and predicts with. [`reduction`] splits γ from β where an all_gather of
//!   the same series allows it.

mod alpha_beta;
mod lsq;
mod reduction;
mod regimes;
#[cfg(test)]
mod tests;

pub use alpha_beta::{AlphaBeta, Fit, Pinned, fit_alpha_beta};
pub use regimes::{
    Join, MAX_REGIMES, MIN_SIZES_AFTER_BREAK, MIN_SIZES_FIRST, OneRegime, PLATEAU_FACTOR,
    Reduction, Regime, Regimes, fit_regimes,
};

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
    let mut out = Vec::new();
    for collective in ds.collectives() {
        for id in ds.series_for(collective) {
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
            out.push(SeriesFit {
                series: id,
                name: s.name.clone(),
                collective,
                world: s.world,
                peer: s.peer,
                fit: fit_alpha_beta(&pts, factor),
                model,
            });
        }
    }
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
