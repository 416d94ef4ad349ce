//! The α–β (Hockney) model: t(S) = α + β·S·f.
//!
//! α is the fixed cost of one collective call (latency, µs), β the time per
//! byte that crosses the busiest link (µs/byte), and f the collective's bus
//! factor, so that 1/β is directly comparable with the busbw column.

use crate::dataset::Dataset;
use crate::results::Collective;

/// A fitted model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AlphaBeta {
    /// Latency term (µs).
    pub alpha_us: f64,
    /// Time per bus byte (µs per byte).
    pub beta_us_per_byte: f64,
    /// The bus factor f the sizes were multiplied by.
    pub factor: f64,
    /// Weighted coefficient of determination (on relative error, the scale
    /// the fit minimises); 1 is a perfect fit.
    pub r_squared: f64,
    /// Points used.
    pub points: usize,
    /// Distinct sizes among them.
    pub sizes: usize,
    /// Set when the unconstrained optimum had a negative α or β and the fit
    /// was redone with that parameter pinned at 0.
    pub pinned: Option<Pinned>,
}

/// Which parameter a constrained fit pinned at zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pinned {
    /// α = 0: the data show no measurable fixed cost.
    Alpha,
    /// β = 0: the data show no measurable size dependence.
    Beta,
}

impl AlphaBeta {
    /// Predicted time (µs) for `bytes`.
    pub fn predict_us(&self, bytes: f64) -> f64 {
        self.alpha_us + self.beta_us_per_byte * bytes * self.factor
    }

    /// 1/β in GB/s (1e9 bytes per second); `None` when β = 0.
    pub fn bandwidth_gbps(&self) -> Option<f64> {
        // β µs/byte → 1/β bytes/µs = 1e6/β bytes/s = 1e-3/β GB/s.
        (self.beta_us_per_byte > 0.0).then(|| 1e-3 / self.beta_us_per_byte)
    }

    /// The size S (bytes) where the bandwidth term β·S·f equals α: below it
    /// the call is latency bound, above it bandwidth bound. `None` when β = 0
    /// (the terms never meet).
    pub fn crossover_bytes(&self) -> Option<f64> {
        (self.beta_us_per_byte > 0.0).then(|| self.alpha_us / (self.beta_us_per_byte * self.factor))
    }
}

/// The outcome of fitting one series.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fit {
    /// The model.
    Fitted(AlphaBeta),
    /// Fewer than two distinct sizes with a positive time: a line through one
    /// x is undetermined, so no numbers are made up.
    TooFewSizes {
        /// Distinct usable sizes found.
        sizes: usize,
    },
}

impl Fit {
    /// The model, if there is one.
    pub fn model(&self) -> Option<&AlphaBeta> {
        match self {
            Fit::Fitted(m) => Some(m),
            Fit::TooFewSizes { .. } => None,
        }
    }
}

/// Weighted sums for one candidate line, kept together to compare objectives.
fn weighted_sse(points: &[(f64, f64, f64)], alpha: f64, beta: f64) -> f64 {
    points
        .iter()
        .map(|&(x, t, w)| {
            let r = t - alpha - beta * x;
            w * r * r
        })
        .sum()
}

/// Fit t = α + β·S·f to `(bytes, time_us)` points.
///
/// Weighted least squares with weights 1/t², i.e. minimising the *relative*
/// error of each point. Why: sizes span six or more decades and timing noise
/// grows roughly in proportion to the time. Ordinary least squares minimises
/// absolute residuals, so the few large-message points (milliseconds) would
/// decide everything and α — a few microseconds — would be whatever their
/// noise leaves over, often negative. With relative weights a 2 µs point
/// missed by 1 µs costs as much as a 2 ms point missed by 1 ms, so the small
/// sizes set α and the large ones set β.
///
/// Both parameters are physical costs, so the fit is constrained to α, β ≥ 0:
/// if the unconstrained optimum violates that, the best fit on the boundary
/// (α = 0 or β = 0) is taken — for a convex quadratic in two variables that is
/// the constrained optimum — and [`AlphaBeta::pinned`] says so.
///
/// Points with a non-positive or non-finite time or size are ignored (log
/// charts and relative weights cannot use them).
pub fn fit_alpha_beta(points: &[(f64, f64)], factor: f64) -> Fit {
    let factor = if factor > 0.0 && factor.is_finite() {
        factor
    } else {
        1.0
    };
    let pts: Vec<(f64, f64, f64)> = points
        .iter()
        .filter(|(s, t)| s.is_finite() && t.is_finite() && *s > 0.0 && *t > 0.0)
        .map(|&(s, t)| (s * factor, t, 1.0 / (t * t)))
        .collect();
    let mut xs: Vec<f64> = pts.iter().map(|p| p.0).collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    let sizes = xs.len();
    if sizes < 2 {
        return Fit::TooFewSizes { sizes };
    }

    // Centred weighted sums: W·Σwx² − (Σwx)² cancels catastrophically when
    // x reaches 1e8 bytes, the centred form does not.
    let w_sum: f64 = pts.iter().map(|p| p.2).sum();
    let x_mean = pts.iter().map(|p| p.2 * p.0).sum::<f64>() / w_sum;
    let t_mean = pts.iter().map(|p| p.2 * p.1).sum::<f64>() / w_sum;
    let sxx: f64 = pts.iter().map(|p| p.2 * (p.0 - x_mean).powi(2)).sum();
    let sxt: f64 = pts
        .iter()
        .map(|p| p.2 * (p.0 - x_mean) * (p.1 - t_mean))
        .sum();
    let sst: f64 = pts.iter().map(|p| p.2 * (p.1 - t_mean).powi(2)).sum();

    let mut beta = sxt / sxx;
    let mut alpha = t_mean - beta * x_mean;
    let mut pinned = None;
    if !(alpha >= 0.0 && beta >= 0.0) {
        // α = 0: minimise Σw(t − βx)² → β = Σwxt / Σwx² (> 0: all terms are).
        let b0 = pts.iter().map(|p| p.2 * p.0 * p.1).sum::<f64>()
            / pts.iter().map(|p| p.2 * p.0 * p.0).sum::<f64>();
        // β = 0: α is the weighted mean time.
        let a0 = t_mean;
        if weighted_sse(&pts, 0.0, b0) <= weighted_sse(&pts, a0, 0.0) {
            (alpha, beta, pinned) = (0.0, b0, Some(Pinned::Alpha));
        } else {
            (alpha, beta, pinned) = (a0, 0.0, Some(Pinned::Beta));
        }
    }
    let sse = weighted_sse(&pts, alpha, beta);
    // All times equal (sst = 0): a perfect flat fit explains everything.
    let r_squared = if sst > 0.0 {
        1.0 - sse / sst
    } else if sse <= f64::EPSILON {
        1.0
    } else {
        0.0
    };
    Fit::Fitted(AlphaBeta {
        alpha_us: alpha,
        beta_us_per_byte: beta,
        factor,
        r_squared,
        points: pts.len(),
        sizes,
        pinned,
    })
}

/// The fit of one series for one collective.
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
    /// The outcome.
    pub fit: Fit,
}

/// Fit every series of every collective (median times, one point per size).
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
            out.push(SeriesFit {
                series: id,
                name: s.name.clone(),
                collective,
                world: s.world,
                peer: s.peer,
                fit: fit_alpha_beta(&pts, collective.model_factor(s.world)),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes() -> Vec<f64> {
        (3..=26).map(|k| f64::from(1u32 << k)).collect()
    }

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * b.abs().max(1e-300)
    }

    #[test]
    fn recovers_alpha_beta_exactly_from_synthetic_data() {
        let (alpha, beta) = (12.5, 1.0 / 8000.0); // 12.5 µs, 8 GB/s
        let pts: Vec<(f64, f64)> = sizes().iter().map(|&s| (s, alpha + beta * s)).collect();
        let m = *fit_alpha_beta(&pts, 1.0).model().unwrap();
        assert!(close(m.alpha_us, alpha, 1e-9), "{m:?}");
        assert!(close(m.beta_us_per_byte, beta, 1e-9), "{m:?}");
        assert!(close(m.bandwidth_gbps().unwrap(), 8.0, 1e-9), "{m:?}");
        assert!(m.r_squared > 1.0 - 1e-12, "{m:?}");
        assert_eq!(m.pinned, None);
        assert_eq!((m.points, m.sizes), (24, 24));
    }

    #[test]
    fn factor_scales_beta_not_alpha() {
        // all_reduce on 4 ranks: f = 1.5; the data carry β·S·1.5.
        let (alpha, beta, f) = (3.0, 2e-4, Collective::AllReduce.bus_factor(4));
        let pts: Vec<(f64, f64)> = sizes().iter().map(|&s| (s, alpha + beta * s * f)).collect();
        let m = *fit_alpha_beta(&pts, f).model().unwrap();
        assert!(close(m.alpha_us, alpha, 1e-9) && close(m.beta_us_per_byte, beta, 1e-9));
        assert!(close(m.predict_us(1e6), alpha + beta * 1e6 * f, 1e-12));
    }

    #[test]
    fn crossover_is_where_the_terms_are_equal() {
        let m = AlphaBeta {
            alpha_us: 10.0,
            beta_us_per_byte: 1e-3,
            factor: 2.0,
            r_squared: 1.0,
            points: 2,
            sizes: 2,
            pinned: None,
        };
        let s = m.crossover_bytes().unwrap();
        assert!(close(s, 5000.0, 1e-12));
        assert!(close(m.beta_us_per_byte * s * m.factor, m.alpha_us, 1e-12));
        let flat = AlphaBeta {
            beta_us_per_byte: 0.0,
            ..m
        };
        assert_eq!(flat.crossover_bytes(), None);
        assert_eq!(flat.bandwidth_gbps(), None);
    }

    #[test]
    fn fewer_than_two_sizes_is_no_fit_not_nan() {
        assert_eq!(fit_alpha_beta(&[], 1.0), Fit::TooFewSizes { sizes: 0 });
        assert_eq!(
            fit_alpha_beta(&[(1024.0, 3.0), (1024.0, 3.5)], 1.0),
            Fit::TooFewSizes { sizes: 1 }
        );
        // A zero time cannot be weighted by 1/t²: it does not count.
        assert_eq!(
            fit_alpha_beta(&[(8.0, 0.0), (1024.0, 3.5)], 1.0),
            Fit::TooFewSizes { sizes: 1 }
        );
    }

    #[test]
    fn relative_weighting_keeps_small_sizes_in_charge_of_alpha() {
        // α = 5 µs, 1 GB/s, with +3 % noise on the largest size only. An
        // unweighted fit would move α by tens of µs; relative weights barely
        // notice.
        let beta = 1e-3;
        let mut pts: Vec<(f64, f64)> = sizes().iter().map(|&s| (s, 5.0 + beta * s)).collect();
        if let Some(last) = pts.last_mut() {
            last.1 *= 1.03;
        }
        let m = *fit_alpha_beta(&pts, 1.0).model().unwrap();
        assert!((m.alpha_us - 5.0).abs() < 0.5, "{m:?}");
    }

    #[test]
    fn negative_alpha_is_pinned_at_zero() {
        // Pure bandwidth data with the small sizes slightly *faster* than
        // proportional: the unconstrained intercept goes negative.
        let pts: Vec<(f64, f64)> = sizes()
            .iter()
            .map(|&s| (s, 1e-3 * s * if s < 100.0 { 0.8 } else { 1.0 }))
            .collect();
        let m = *fit_alpha_beta(&pts, 1.0).model().unwrap();
        assert_eq!(m.pinned, Some(Pinned::Alpha), "{m:?}");
        assert_eq!(m.alpha_us, 0.0);
        assert!(m.beta_us_per_byte > 0.0);
        assert_eq!(m.crossover_bytes(), Some(0.0));
    }

    #[test]
    fn shrinking_times_pin_beta_and_report_no_bandwidth() {
        // Times that fall slightly with size (noise on a latency-bound
        // series): the unconstrained slope is negative.
        let pts: Vec<(f64, f64)> = sizes().iter().map(|&s| (s, 10.0 - 1e-8 * s)).collect();
        let m = *fit_alpha_beta(&pts, 1.0).model().unwrap();
        assert_eq!(m.pinned, Some(Pinned::Beta), "{m:?}");
        assert_eq!(m.beta_us_per_byte, 0.0);
        assert!(m.alpha_us > 9.0 && m.alpha_us < 10.0, "{m:?}");
        assert_eq!(m.bandwidth_gbps(), None);
        assert_eq!(m.crossover_bytes(), None);
        assert!(m.r_squared.is_finite());
    }
}
