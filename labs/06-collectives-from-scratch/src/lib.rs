//! Lab 6: collectives from scratch. The learner's ring all-reduce and
//! binomial-tree broadcast ([`exercise`]) are plugged into the reference
//! backend ([`collectives::algorithms::plug`]), judged by the same conformance
//! suite as the backend's own algorithms, and timed beside them by the program
//! (`cargo lab 6`). The solution is the backend's own code ([`Builtin`]: the
//! ring of `algorithms/ring.rs`, the tree of `algorithms/tree.rs`).
//!
//! The optional stretch goal, a bidirectional ring, is the learner's
//! `src/stretch.rs`, compiled only by its own check `tests/stretch.rs`;
//! [`bidirectional`] judges it and [`solution`] is its reference.

pub mod bidirectional;
pub mod diagnose;
pub mod exercise;
pub mod solution;

use std::sync::Arc;
use std::time::Duration;

use collectives::algorithms::plug::{Builtin, Plug};
use collectives::plug_check;
use labkit::{LabError, Variant};

/// The algorithms of `variant`: the learner's, or the backend's own.
pub fn algorithms(variant: Variant) -> Arc<dyn Plug> {
    match variant {
        Variant::Exercise => Arc::new(exercise::YourAlgorithms),
        Variant::Solution => Arc::new(Builtin),
    }
}

/// The label the program's records and charts give the ring it times. A run
/// of the reference solution shows it as "solution's ring"
/// (`labkit::Run::finish` renames every "your" in such a run).
pub const RING_LABEL: &str = "your ring";

/// The self-check: the conformance suite's all_reduce and broadcast cases (every
/// dtype and op, sizes that never split evenly, in and out of place, every rank
/// a root somewhere) on 1 to 5 ranks, with `variant`'s algorithms inside the
/// reference backend. A wait longer than 20 s is an error, not a hang.
pub fn check(variant: Variant) -> Result<usize, LabError> {
    let failure = match plug_check::check(algorithms(variant), 1..=5, Duration::from_secs(20)) {
        Ok(Ok(cases)) => return Ok(cases),
        Ok(Err((world, report))) => {
            let shown: Vec<&str> = report.failures.iter().take(5).map(String::as_str).collect();
            format!(
                "{} of {} cases wrong on {world} ranks, e.g.:\n  {}",
                report.failures.len(),
                report.cases,
                shown.join("\n  ")
            )
        }
        // An unsolved TODO comes back as itself, with nothing to diagnose.
        Err(e) if variant == Variant::Exercise && e.to_string().contains("TODO") => {
            return Err(e.into());
        }
        Err(e) => e.to_string(),
    };
    Err(LabError::Wrong(with_diagnosis(variant, failure)))
}

/// `failure`, followed by what [`diagnose`] can name in `variant`'s pieces,
/// each with its `hint: <key>` line for `cargo lab check`.
fn with_diagnosis(variant: Variant, failure: String) -> String {
    let pieces = match variant {
        Variant::Exercise => diagnose::Pieces::yours(),
        Variant::Solution => diagnose::Pieces::builtin(),
    };
    let named = diagnose::diagnose(pieces);
    if named.is_empty() {
        failure
    } else {
        format!("{failure}\n\nEach piece on its own:\n{}", named.join("\n"))
    }
}
