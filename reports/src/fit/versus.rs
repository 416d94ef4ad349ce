//! Which of two backends (or algorithms) is faster at which message size,
//! predicted from their α–β fits: the size where the two fitted lines
//! t = α + β·S cross. [`crate::crossover`] reads a crossing off the measured
//! curves; this one extrapolates from the model, so it also says "never" when
//! one line is below the other at every size, and where the crossing lies
//! outside the sizes measured. Lab 9's stretch goal is this file.

#[cfg(test)]
mod tests;

use super::alpha_beta::{AlphaBeta, fit_alpha_beta};

/// One of the two lines compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The first line (argument) given.
    First,
    /// The second.
    Second,
}

impl Side {
    /// The other line.
    pub fn other(self) -> Side {
        match self {
            Side::First => Side::Second,
            Side::Second => Side::First,
        }
    }
}

/// Where two lines t = α + β·S cross, for message sizes S > 0.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Crossover {
    /// They cross at `bytes` (> 0, finite): `below` is faster for smaller
    /// messages, the other line for larger ones.
    At {
        /// The size where both predict the same time.
        bytes: f64,
        /// The line that is faster below it.
        below: Side,
    },
    /// They do not cross at any positive size: `faster` is at least as fast
    /// everywhere (the lines are parallel, or cross at S ≤ 0).
    Never {
        /// The line that is never slower.
        faster: Side,
    },
}

/// Slopes closer than this, relative to the larger, are parallel. Why: two
/// fits of lines with the same slope come out some 1e-15 apart (rounding),
/// and a "crossing" through that gap lies at ±1e15 bytes or so: rounding
/// noise, not a message size. Real backends' slopes differ by percents.
pub const PARALLEL_SLOPES: f64 = 1e-9;

// ANCHOR: lines_cross
/// Where the lines `a` and `b`, each `(α, β)` of t = α + β·S, cross at a
/// positive size, or which is never slower.
pub fn lines_cross(a: (f64, f64), b: (f64, f64)) -> Crossover {
    let ((a_alpha, a_beta), (b_alpha, b_beta)) = (a, b);
    let slopes = a_beta - b_beta;
    // At S → 0 the times are the α's; for large S the β's decide.
    let lower_alpha = if b_alpha < a_alpha {
        Side::Second
    } else {
        Side::First
    };
    if slopes.abs() <= PARALLEL_SLOPES * a_beta.abs().max(b_beta.abs()) {
        // Parallel: the gap is α_a − α_b at every size, division by a zero
        // slope difference would give ±inf or NaN.
        return Crossover::Never {
            faster: lower_alpha,
        };
    }
    // α_a + β_a·S = α_b + β_b·S  ⇔  S = (α_b − α_a) / (β_a − β_b).
    let bytes = (b_alpha - a_alpha) / slopes;
    if bytes.is_finite() && bytes > 0.0 {
        Crossover::At {
            bytes,
            below: lower_alpha,
        }
    } else {
        // They meet at S ≤ 0: for every real message the smaller slope wins.
        Crossover::Never {
            faster: if b_beta < a_beta {
                Side::Second
            } else {
                Side::First
            },
        }
    }
}
// ANCHOR_END: lines_cross

/// [`lines_cross`] of two α–β fits (their bus factors included: the slope
/// per byte of message is β·f).
pub fn fits_cross(a: &AlphaBeta, b: &AlphaBeta) -> Crossover {
    lines_cross(
        (a.alpha_us, a.beta_us_per_byte * a.factor),
        (b.alpha_us, b.beta_us_per_byte * b.factor),
    )
}

// ANCHOR: predict_crossover
/// Fits t = α + β·S to each backend's `(bytes, µs)` points ([`fit_alpha_beta`],
/// the report's own fit) and returns where the lines cross; `None` when
/// either backend has fewer than two distinct usable sizes (no line).
pub fn predict_crossover(a: &[(f64, f64)], b: &[(f64, f64)]) -> Option<Crossover> {
    let a = fit_alpha_beta(a, 1.0);
    let b = fit_alpha_beta(b, 1.0);
    Some(fits_cross(a.model()?, b.model()?))
}
// ANCHOR_END: predict_crossover
