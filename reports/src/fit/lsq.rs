//! Weighted least squares with non-negative coefficients, for the few
//! (at most four) columns of the regime model.
//!
//! Why not the normal equations: a column of ones next to byte counts of
//! 1e8 makes XᵀX ill-conditioned by ~1e16, the whole of f64. Householder QR
//! on unit-norm columns keeps the error near machine precision.

/// Columns whose norm, after removing what earlier columns explain, falls
/// below this share of their own norm are taken as dependent: the solution
/// would not be determined by the data.
const RANK_TOLERANCE: f64 = 1e-10;

/// The best non-negative coefficients and what they leave over.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Solution {
    /// One coefficient per column, each ≥ 0.
    pub coef: Vec<f64>,
    /// Σ wᵢ (yᵢ − Σⱼ xᵢⱼ cⱼ)².
    pub sse: f64,
    /// Coefficients the constraint held at 0 (the unconstrained optimum
    /// wanted them negative).
    pub clamped: Vec<bool>,
}

/// Weighted residual sum of squares of `coef` on `cols` (column-major).
pub(crate) fn weighted_sse(cols: &[Vec<f64>], coef: &[f64], y: &[f64], w: &[f64]) -> f64 {
    (0..y.len())
        .map(|i| {
            let fit: f64 = cols.iter().zip(coef).map(|(c, k)| c[i] * k).sum();
            let r = y[i] - fit;
            w[i] * r * r
        })
        .sum()
}

/// The R² both fits report: 1 − SSE/SST, both weighted by `w` (1/t²), SST
/// around the weighted mean of `t`. All times equal up to rounding (SST
/// below 1e-24 per point, i.e. relative 1e-12): SST is rounding noise, and a
/// flat fit explains everything there is. Never NaN.
pub(crate) fn weighted_r_squared(t: &[f64], w: &[f64], sse: f64) -> f64 {
    let w_sum: f64 = w.iter().sum();
    let t_mean = w.iter().zip(t).map(|(w, t)| w * t).sum::<f64>() / w_sum;
    let sst: f64 = w.iter().zip(t).map(|(w, t)| w * (t - t_mean).powi(2)).sum();
    let tiny = 1e-24 * t.len() as f64;
    let r = if sst > tiny {
        1.0 - sse / sst
    } else if sse <= tiny {
        1.0
    } else {
        0.0
    };
    if r.is_finite() { r } else { 0.0 }
}

/// Unweighted least squares on `cols` (column-major), `None` when the
/// columns are dependent or not finite.
fn lstsq(cols: &[&[f64]], b: &[f64]) -> Option<Vec<f64>> {
    let (n, m) = (b.len(), cols.len());
    if m == 0 {
        return Some(Vec::new());
    }
    if n < m {
        return None;
    }
    let norms: Vec<f64> = cols
        .iter()
        .map(|c| c.iter().map(|v| v * v).sum::<f64>().sqrt())
        .collect();
    if norms.iter().any(|s| !(s.is_finite() && *s > 0.0)) {
        return None;
    }
    let mut q: Vec<Vec<f64>> = cols
        .iter()
        .zip(&norms)
        .map(|(c, s)| c.iter().map(|v| v / s).collect())
        .collect();
    let mut rhs = b.to_vec();
    for k in 0..m {
        let norm = q[k][k..].iter().map(|v| v * v).sum::<f64>().sqrt();
        // NaN fails the comparison too: not finite is not full rank.
        if norm.is_nan() || norm <= RANK_TOLERANCE {
            return None;
        }
        // Reflect onto −sign(x₀)·‖x‖·e₀: the sign avoids cancellation.
        let alpha = if q[k][k] > 0.0 { -norm } else { norm };
        let mut v: Vec<f64> = q[k][k..].to_vec();
        v[0] -= alpha;
        let v2: f64 = v.iter().map(|x| x * x).sum();
        if v2 > 0.0 {
            let reflect = |col: &mut [f64]| {
                let d: f64 = v.iter().zip(col.iter()).map(|(a, b)| a * b).sum();
                let f = 2.0 * d / v2;
                for (c, vi) in col.iter_mut().zip(&v) {
                    *c -= f * vi;
                }
            };
            for col in q.iter_mut().skip(k) {
                reflect(&mut col[k..]);
            }
            reflect(&mut rhs[k..]);
        }
    }
    let mut x = vec![0.0; m];
    for i in (0..m).rev() {
        let s = rhs[i] - ((i + 1)..m).map(|j| q[j][i] * x[j]).sum::<f64>();
        x[i] = s / q[i][i];
    }
    for (xi, s) in x.iter_mut().zip(&norms) {
        *xi /= s;
    }
    x.iter().all(|v| v.is_finite()).then_some(x)
}

/// Minimise Σ wᵢ (yᵢ − Σⱼ xᵢⱼ cⱼ)² over c ≥ 0.
///
/// Every subset of columns is solved unconstrained and the best solution
/// with no negative coefficient wins. For a convex quadratic the constrained
/// optimum is the unconstrained optimum of its own support, so this is
/// exact; with ≤ 4 columns it is 16 tiny solves. `None` only when no subset
/// (not even the empty one) gives a finite error, i.e. the inputs are not
/// finite.
pub(crate) fn nonneg_wls(cols: &[Vec<f64>], y: &[f64], w: &[f64]) -> Option<Solution> {
    let m = cols.len();
    let sw: Vec<f64> = w.iter().map(|v| v.sqrt()).collect();
    let weighted: Vec<Vec<f64>> = cols
        .iter()
        .map(|c| c.iter().zip(&sw).map(|(a, s)| a * s).collect())
        .collect();
    let b: Vec<f64> = y.iter().zip(&sw).map(|(a, s)| a * s).collect();
    // The common case first: a feasible unconstrained optimum is the
    // constrained one (convexity), no subsets needed.
    let all: Vec<&[f64]> = weighted.iter().map(Vec::as_slice).collect();
    if let Some(x) = lstsq(&all, &b) {
        if x.iter().all(|v| *v >= 0.0) {
            let sse = weighted_sse(cols, &x, y, w);
            if sse.is_finite() {
                return Some(Solution {
                    clamped: vec![false; m],
                    coef: x,
                    sse,
                });
            }
        }
    }
    let mut unconstrained_negative = vec![false; m];
    let mut best: Option<(Vec<f64>, f64)> = None;
    for mask in 0u32..(1 << m) {
        let chosen: Vec<usize> = (0..m).filter(|j| mask & (1 << j) != 0).collect();
        let sub: Vec<&[f64]> = chosen.iter().map(|&j| weighted[j].as_slice()).collect();
        let Some(x) = lstsq(&sub, &b) else {
            continue;
        };
        if mask == (1 << m) - 1 {
            for (j, v) in chosen.iter().zip(&x) {
                unconstrained_negative[*j] = *v < 0.0;
            }
        }
        if x.iter().any(|v| *v < 0.0) {
            continue;
        }
        let mut coef = vec![0.0; m];
        for (j, v) in chosen.iter().zip(x) {
            coef[*j] = v;
        }
        let sse = weighted_sse(cols, &coef, y, w);
        if sse.is_finite() && best.as_ref().is_none_or(|(_, s)| sse < *s) {
            best = Some((coef, sse));
        }
    }
    best.map(|(coef, sse)| Solution {
        clamped: coef
            .iter()
            .zip(&unconstrained_negative)
            .map(|(c, neg)| *c == 0.0 && *neg)
            .collect(),
        coef,
        sse,
    })
}
