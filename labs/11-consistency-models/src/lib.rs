//! Lab 11: consistency models. The same MLP trains with a synchronous and an
//! asynchronous parameter server, with DDP, and stale-synchronously
//! ([`trainers::consistency`]), with and without a straggler. The learner
//! writes the staleness bound ([`exercise::YourBound`], a [`StalenessBound`]);
//! the solution is trainers' own [`Bounded`]. The program's part 2 runs a
//! sharded parameter server against ring all-reduce across simulated hosts
//! ([`trainers::consistency::sharded_ps`]).

pub mod exercise;
pub mod stale_rate;

use std::sync::Arc;

pub use labkit_torch::{fashion_mnist, lab_error};

use labkit::{LabError, Variant};
use trainers::consistency::check::{self, BoundCheck};
use trainers::consistency::{Bounded, StalenessBound};
use trainers::data;

/// `variant`'s staleness bound.
pub fn bound(variant: Variant) -> Arc<dyn StalenessBound> {
    match variant {
        Variant::Exercise => Arc::new(exercise::YourBound),
        Variant::Solution => Arc::new(Bounded),
    }
}

/// `variant`'s bound on 3 workers of which one is 3× slower, judged: the
/// log of step starts never shows a worker more than s = 2 ahead of the
/// slowest, and with s = 0 the result is the synchronous parameter server's,
/// to the bit (the same rounds, applied in the same order).
pub fn judge(variant: Variant) -> Result<BoundCheck, LabError> {
    judge_bound(bound(variant))
}

/// [`judge`] for any bound: first the probes of [`diagnose`] (instant, and a
/// bound that refuses every start would otherwise fail only after the
/// training's 10 s timeout), then the training.
pub fn judge_bound(b: Arc<dyn StalenessBound>) -> Result<BoundCheck, LabError> {
    if let Some(why) = diagnose(b.as_ref()) {
        return Err(LabError::Wrong(why));
    }
    let data = data::synthetic(3 * 16 * 30, 11).map_err(lab_error)?;
    let c = check::bound(b, &data).map_err(lab_error)?;
    if c.max_ahead > c.staleness {
        return Err(LabError::Wrong(format!(
            "with staleness {} a worker started a step {} ahead of the slowest worker: is the \
             lead measured from the slowest (the fewest completed steps)?",
            c.staleness, c.max_ahead
        )));
    }
    if c.s0_vs_sync != 0.0 {
        return Err(LabError::Wrong(format!(
            "with staleness 0 the parameters differ from the synchronous server's by {:.3e}: \
             with s = 0 a worker may start step t only when every worker has completed t steps",
            c.s0_vs_sync
        )));
    }
    Ok(c)
}

/// One probe of a bound: a worker that completed `step` steps asks to start,
/// the workers have completed `completed`, the bound is `staleness`; the
/// contract's answer is `allowed`.
struct Probe {
    step: u64,
    completed: [u64; 3],
    staleness: u64,
    allowed: bool,
}

/// The probes, chosen so that each known mistake answers one of them wrong.
const PROBES: [Probe; 4] = [
    // 3 ahead of the slowest (2), 0 ahead of the fastest: no.
    Probe {
        step: 5,
        completed: [5, 2, 5],
        staleness: 2,
        allowed: false,
    },
    // Exactly 2 ahead of the slowest: yes.
    Probe {
        step: 4,
        completed: [4, 2, 4],
        staleness: 2,
        allowed: true,
    },
    // Everyone level, staleness 0: yes (else nobody ever starts).
    Probe {
        step: 2,
        completed: [2, 2, 2],
        staleness: 0,
        allowed: true,
    },
    // 4 ahead: no.
    Probe {
        step: 6,
        completed: [6, 2, 6],
        staleness: 2,
        allowed: false,
    },
];

/// Names the mistake in bound `b`, if it answers a probe wrong: the message
/// gives the probe, the answer and a `hint: <key>` line (keys in
/// `labs/info.toml`). `None` when every probe is answered as the contract
/// says, or the bound fails (the check then reports its error).
pub fn diagnose(b: &dyn StalenessBound) -> Option<String> {
    let mut answers = Vec::new();
    for p in &PROBES {
        match b.may_start(p.step, &p.completed, p.staleness) {
            Ok(a) => answers.push(a),
            // The training reports the error (an unsolved TODO among them).
            Err(_) => return None,
        }
    }
    let first_wrong = PROBES
        .iter()
        .zip(&answers)
        .find(|(p, a)| **a != p.allowed)?;
    let (p, said) = first_wrong;
    let (why, key) = match answers.as_slice() {
        // Yes at 3 and 4 ahead of the slowest: the lead was measured from
        // someone else (the fastest, or this worker itself).
        [true, _, _, true] => (
            "it lets a worker start 3 and even 4 steps ahead of the slowest worker with \
             staleness 2: \
             is the lead measured from the slowest worker (the fewest completed steps)?",
            "lead-from-slowest",
        ),
        // Yes at 3 ahead, no at 4: one step too lenient.
        [true, _, _, false] => (
            "it lets a worker start 3 steps ahead with staleness 2, and refuses 4: \
             off by one, a lead of exactly `staleness` is the most allowed",
            "off-by-one-lenient",
        ),
        // No at exactly s ahead, or with everyone level at s = 0.
        [_, false, _, _] | [_, _, false, _] => (
            "it refuses a worker exactly `staleness` steps ahead (with staleness 0: a worker \
             level with everyone, so nobody could ever start): off by one, a lead of \
             `staleness` is allowed",
            "off-by-one-strict",
        ),
        _ => ("", ""),
    };
    let head = format!(
        "may_start(step {}, completed {:?}, staleness {}) said {said}, the contract says {}",
        p.step, p.completed, p.staleness, p.allowed
    );
    Some(if key.is_empty() {
        head
    } else {
        format!("{head}: {why}\nhint: {key}")
    })
}

/// The self-check (`cargo lab check 11`): see [`judge`].
pub fn check(variant: Variant) -> Result<String, LabError> {
    let c = judge(variant)?;
    Ok(format!(
        "beside a 3× straggler no worker ran more than {} steps ahead of the slowest (the most: \
         {}), and staleness 0 trained exactly like the synchronous parameter server",
        c.staleness, c.max_ahead
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use trainers::Result;

    /// The lead measured from the fastest worker.
    struct FromFastest;
    impl StalenessBound for FromFastest {
        fn may_start(&self, step: u64, completed: &[u64], staleness: u64) -> Result<bool> {
            let fastest = completed.iter().copied().max().unwrap_or(0);
            Ok(step.saturating_sub(fastest) <= staleness)
        }
    }

    /// `<` where `<=` belongs.
    struct Strict;
    impl StalenessBound for Strict {
        fn may_start(&self, step: u64, completed: &[u64], staleness: u64) -> Result<bool> {
            let slowest = completed.iter().copied().min().unwrap_or(0);
            Ok(step - slowest < staleness)
        }
    }

    /// One more step allowed than the bound.
    struct Lenient;
    impl StalenessBound for Lenient {
        fn may_start(&self, step: u64, completed: &[u64], staleness: u64) -> Result<bool> {
            let slowest = completed.iter().copied().min().unwrap_or(0);
            Ok(step - slowest <= staleness + 1)
        }
    }

    fn message(b: impl StalenessBound + 'static) -> String {
        judge_bound(Arc::new(b)).unwrap_err().to_string()
    }

    #[test]
    fn lead_from_the_fastest_is_named() {
        let msg = message(FromFastest);
        assert!(msg.contains("hint: lead-from-slowest"), "{msg}");
        assert!(msg.contains("said true, the contract says false"), "{msg}");
    }

    #[test]
    fn strict_bound_is_named_without_waiting_for_the_timeout() {
        let t = std::time::Instant::now();
        let msg = message(Strict);
        assert!(msg.contains("hint: off-by-one-strict"), "{msg}");
        assert!(t.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn lenient_bound_is_named() {
        let msg = message(Lenient);
        assert!(msg.contains("hint: off-by-one-lenient"), "{msg}");
    }

    #[test]
    fn the_solution_passes_every_probe() {
        assert_eq!(diagnose(&Bounded), None);
    }
}
