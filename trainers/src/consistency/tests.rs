use std::sync::Arc;

use super::check::{self, job};
use super::*;
use crate::data::synthetic;

#[test]
fn the_bound_holds_beside_a_straggler_and_staleness_zero_is_synchronous_to_the_bit() {
    let data = synthetic(3 * 16 * 30, 5).unwrap();
    let c = check::bound(Arc::new(Bounded), &data).unwrap();
    assert!(c.max_ahead <= c.staleness, "{c:?}");
    // The straggler is 3× slower over 30 steps: the others do run ahead.
    assert_eq!(c.max_ahead, c.staleness, "{c:?}");
    // Same rounds, applied in the same order by the same function.
    assert_eq!(c.s0_vs_sync, 0.0, "{c:?}");
}

/// Measures the lead from the fastest worker: lets everyone run freely.
struct FromTheFastest;

impl StalenessBound for FromTheFastest {
    fn may_start(&self, step: u64, completed: &[u64], staleness: u64) -> Result<bool> {
        Ok(step <= completed.iter().copied().max().unwrap_or(0) + staleness)
    }
}

#[test]
fn a_bound_measured_from_the_fastest_worker_is_caught() {
    let data = synthetic(3 * 16 * 30, 5).unwrap();
    let c = check::bound(Arc::new(FromTheFastest), &data).unwrap();
    assert!(c.max_ahead > c.staleness, "{c:?}");
}

#[test]
fn every_model_trains_and_async_never_waits() {
    let data = synthetic(3 * 16 * 30, 5).unwrap();
    let test = synthetic(500, 6).unwrap();
    for consistency in [
        Consistency::SyncPs,
        Consistency::AsyncPs,
        Consistency::Ddp,
        Consistency::Ssp { staleness: 3 },
    ] {
        let mut j = job(consistency, Arc::new(Bounded));
        j.straggler = None;
        let t = train(&j, &data).unwrap();
        let acc = accuracy(&j.hidden, &t.params, &test).unwrap();
        // Ten classes: chance is 10%; the synthetic set is easy.
        assert!(acc > 0.5, "{}: {acc}", consistency.name());
        assert_eq!(t.snapshots.len(), 3, "{}", consistency.name());
    }
    // With a straggler, the asynchronous workers run as far ahead as they like.
    let t = train(&job(Consistency::AsyncPs, Arc::new(Bounded)), &data).unwrap();
    assert!(check::max_ahead(&t.log) > 3, "{}", check::max_ahead(&t.log));
}

/// One worker's gradients are never stale (τ = 0): the staleness-aware rate
/// divides by 1, and the training is the plain one to the bit.
#[test]
fn staleness_aware_lr_with_one_worker_is_plain_async_sgd_to_the_bit() {
    let data = synthetic(16 * 30, 5).unwrap();
    let mut j = job(Consistency::AsyncPs, Arc::new(Bounded));
    (j.workers, j.straggler) = (1, None);
    let plain = train(&j, &data).unwrap();
    j.staleness_lr = Some(staleness_aware_lr);
    let aware = train(&j, &data).unwrap();
    assert_eq!(check::trained_diff(&plain, &aware).unwrap(), 0.0);
    assert_eq!(aware.pushes.len(), 30);
    assert!(
        aware
            .pushes
            .iter()
            .all(|p| p.current == p.read && p.lr == 0.1)
    );
}

#[test]
fn the_async_server_logs_each_push_with_the_rate_it_applied() {
    let data = synthetic(3 * 16 * 30, 5).unwrap();
    let mut j = job(Consistency::AsyncPs, Arc::new(Bounded));
    j.staleness_lr = Some(staleness_aware_lr);
    let t = train(&j, &data).unwrap();
    assert_eq!(t.pushes.len(), 90);
    // Versions count the pushes, in order.
    for (i, p) in t.pushes.iter().enumerate() {
        assert_eq!(p.current, i as u64, "{p:?}");
        assert!(p.read <= p.current, "{p:?}");
        let want = staleness_aware_lr(0.1 / 3.0, p.current, p.read).unwrap();
        assert_eq!(p.lr, want, "{p:?}");
    }
    // Off, every push has the plain rate whatever its staleness.
    j.staleness_lr = None;
    let t = train(&j, &data).unwrap();
    assert!(t.pushes.iter().all(|p| p.lr == 0.1 / 3.0));
}
