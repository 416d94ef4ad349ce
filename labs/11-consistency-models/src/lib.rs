//! Lab 11: consistency models. The same MLP trains with a synchronous and an
//! asynchronous parameter server, with DDP, and stale-synchronously
//! ([`trainers::consistency`]), with and without a straggler. The learner
//! writes the staleness bound ([`exercise::YourBound`], a [`StalenessBound`]);
//! the solution is trainers' own [`Bounded`]. The program's part 2 runs a
//! sharded parameter server against ring all-reduce across simulated hosts
//! ([`trainers::consistency::sharded_ps`]).

pub mod exercise;

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
    let data = data::synthetic(3 * 16 * 30, 11).map_err(lab_error)?;
    let c = check::bound(bound(variant), &data).map_err(lab_error)?;
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

/// The self-check (`cargo lab check 11`): see [`judge`].
pub fn check(variant: Variant) -> Result<String, LabError> {
    let c = judge(variant)?;
    Ok(format!(
        "beside a 3× straggler no worker ran more than {} steps ahead of the slowest (the most: \
         {}), and staleness 0 trained exactly like the synchronous parameter server",
        c.staleness, c.max_ahead
    ))
}
