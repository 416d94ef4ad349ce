//! Lab 9's stretch goal, the file you edit (optional: lab 9 is done when
//! `cargo lab check 9` passes): **predict the crossover** of two backends
//! from their measurements.
//!
//! The decision table says which backend won small messages and which won
//! large ones, at the sizes you measured. A model says *where* the lead
//! changes, also between and beyond those sizes: the α–β (Hockney) model
//! t(S) = α + β·S, with α the fixed cost of a call (µs) and β the time per
//! byte (µs per byte).
//!
//! **Contract.**
//! - `fit_line(points)`: `points` are one backend's `(bytes, µs)`
//!   measurements. Return its `(α, β)`: the least-squares line of time
//!   against size. Plain least squares passes, and so does the report's own
//!   fit, weighted by relative error. Fewer than two distinct sizes is an
//!   error (no line goes through one size).
//! - `predict_crossover(a, b)`: fit each backend with your `fit_line`, and
//!   return where the two lines cross at a positive size, with the backend
//!   that is faster below it (`Crossover::At { bytes, below }`), or, when
//!   they never cross at a positive size, which one is never slower
//!   (`Crossover::Never { faster }`). Slopes that differ by less than
//!   [`PARALLEL_SLOPES`] of the larger are equal: a fit's rounding.
//!
//! **What the check proves** (`cargo lab check 9 --stretch`): on points made
//! from known α and β your fit recovers them (to 1e-6, rounding); a
//! backend measured at one size is an error; two backends that cross, in
//! both orders, one that is faster everywhere and two parallel lines each
//! give the right answer; and on noisy points the crossover lands within 25%
//! of the true one. It names slope and intercept swapped, a fit against
//! log S, a wrong crossing formula, a missed "never", and the winners
//! swapped. Once you have run the lab, it also prints your crossover of
//! reference-shm and Gloo on your run's all_reduce times (reported, not
//! judged).

// Until the TODO is done the imports and arguments below are unused; delete
// this line when you have finished, and the compiler will tell you what is left.
#![allow(unused_imports, unused_variables)]

use labkit::LabError;
use reports::{Crossover, PARALLEL_SLOPES, Side};

/// This file, as the TODO error names it (`file!()` would name it from
/// tests/, which includes it).
const FILE: &str = "labs/09-which-backend/src/stretch.rs";

// ANCHOR: stretch
/// One backend's `(α µs, β µs per byte)` from its `(bytes, µs)` points.
pub fn fit_line(points: &[(f64, f64)]) -> Result<(f64, f64), LabError> {
    // TODO(lab 09 stretch): the least-squares line. Stuck? `cargo lab hint 9 --stretch`.
    Err(labkit::stretch_todo(9, "fit_line", FILE))
}

/// Where backends `a` and `b` (their `(bytes, µs)` points) cross, or which
/// is never slower.
pub fn predict_crossover(a: &[(f64, f64)], b: &[(f64, f64)]) -> Result<Crossover, LabError> {
    // TODO(lab 09 stretch): fit both, then where do the lines meet?
    Err(labkit::stretch_todo(9, "predict_crossover", FILE))
}
// ANCHOR_END: stretch
