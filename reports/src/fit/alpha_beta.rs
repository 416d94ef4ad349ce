//! The α–β (Hockney) model: t(S) = α + β·S·f, one bandwidth for every size.
//!
//! α is the fixed cost of one collective call (latency, µs), β the time per
//! byte that crosses the busiest link (µs/byte), and f the collective's bus
//! factor, so that 1/β is directly comparable with the busbw column.

use super::lsq::weighted_r_squared;

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
    let (t, w): (Vec<f64>, Vec<f64>) = pts.iter().map(|p| (p.1, p.2)).unzip();
    let r_squared = weighted_r_squared(&t, &w, weighted_sse(&pts, alpha, beta));
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
