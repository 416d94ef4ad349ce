//! The one barrier over a [`Store`]: ranks count themselves in, and nobody
//! leaves until all have arrived. The rendezvous uses it to know the job is
//! complete (and, at the end, that everyone is done with the store), the
//! shared-memory transport to know every rank has mapped the segment before
//! rank 0 unlinks it, and NCCL to know every rank reached the store before
//! anyone enters `ncclCommInitRank`, which would wait without a bound.
//!
//! Under a barrier's `prefix` live a counter (`count`), a marker per rank
//! (`rank/{r}`, so a timeout can say who is missing) and, if some rank gave up
//! (`failed`, `failed/why`), the reason it gave, so the others fail at once
//! with that reason instead of waiting out their timeout. Each barrier needs
//! its own `prefix`: nothing under it is ever reset.
//!
//! This is not the collective `Communicator::barrier`: that one runs over a
//! connected communicator (dissemination over the transport, or the
//! library's own); this one works before any communicator exists.

use std::time::Duration;

use super::Store;
use crate::deadline::Deadline;
use crate::error::{Error, Result};

/// Returns once all `world_size` ranks have called `join` with the same
/// `prefix`, or fails with [`Error::Timeout`] naming the ranks that never
/// arrived ("waited … for ranks [2, 3] to join"), or with the reason another
/// rank passed to [`give_up`].
pub fn join(
    store: &dyn Store,
    prefix: &str,
    rank: usize,
    world_size: usize,
    timeout: Duration,
) -> Result<()> {
    if rank >= world_size {
        return Err(Error::InvalidArgument(format!(
            "rank {rank} is out of range for a world of {world_size} ranks"
        )));
    }
    let arrived = arrive(store, prefix, rank)?;
    if arrived > world_size as i64 {
        return Err(Error::Rendezvous(format!(
            "{arrived} ranks joined barrier {prefix:?} of a world of {world_size}: \
             is the store prefix shared by two communicators?"
        )));
    }
    await_arrivals(store, prefix, arrived, world_size, world_size, timeout)
}

/// Best effort: tells the ranks waiting at barrier `prefix` (and those still
/// to come) that this rank will never arrive, and why; they fail with
/// [`Error::Rendezvous`] carrying `why`.
pub fn give_up(store: &dyn Store, prefix: &str, why: &str) {
    // The reason first: a rank that sees the counter reads it at once.
    if store
        .set(&format!("{prefix}/failed/why"), why.as_bytes())
        .is_ok()
    {
        let _ = store.add(&format!("{prefix}/failed"), 1);
    }
}

/// Marks `rank` as arrived at barrier `prefix`; returns how many have arrived.
pub(crate) fn arrive(store: &dyn Store, prefix: &str, rank: usize) -> Result<i64> {
    // Per-rank markers let a timed-out barrier say who is missing.
    store.add(&format!("{prefix}/rank/{rank}"), 1)?;
    store.add(&format!("{prefix}/count"), 1)
}

/// Waits until `expected` ranks (of `world_size`) have arrived at `prefix`,
/// naming the missing ones on timeout.
pub(crate) fn await_arrivals(
    store: &dyn Store,
    prefix: &str,
    mut arrived: i64,
    expected: usize,
    world_size: usize,
    timeout: Duration,
) -> Result<()> {
    let deadline = Deadline::after(timeout);
    let count_key = format!("{prefix}/count");
    let failed_key = format!("{prefix}/failed");
    let mut pause = Duration::from_millis(1);
    while arrived < expected as i64 {
        // `add` (not `get`) reads counters and markers: `get` would wait for absent keys.
        if store.add(&failed_key, 0)? > 0 {
            let why = store.get(&format!("{failed_key}/why"))?;
            return Err(Error::Rendezvous(
                String::from_utf8_lossy(&why).into_owned(),
            ));
        }
        if deadline.expired() {
            let mut missing = Vec::new();
            for r in 0..world_size {
                if store.add(&format!("{prefix}/rank/{r}"), 0)? == 0 {
                    missing.push(r);
                }
            }
            return Err(deadline.error(format!(
                "ranks {missing:?} to join (barrier {prefix:?}: {arrived} of {expected} arrived)"
            )));
        }
        std::thread::sleep(pause.min(deadline.remaining()));
        pause = (pause * 2).min(Duration::from_millis(50));
        arrived = store.add(&count_key, 0)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::rendezvous::MemStore;
    use crate::rendezvous::store::tests::{client, server};

    #[test]
    fn join_waits_for_everyone_and_names_latecomers() {
        let s = server(4);
        let t = Duration::from_secs(5);
        std::thread::scope(|sc| {
            for r in 0..4 {
                let s = &s;
                sc.spawn(move || {
                    let c = client(s, r, 4, t).unwrap();
                    join(&c, "b1", r, 4, t).unwrap();
                });
            }
        });
        let start = Instant::now();
        let e = std::thread::scope(|sc| {
            let h: Vec<_> = (0..2)
                .map(|r| {
                    let s = &s;
                    sc.spawn(move || {
                        let c = client(s, r, 4, t).unwrap();
                        join(&c, "b2", r, 4, Duration::from_millis(300))
                    })
                })
                .collect();
            h.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
        });
        assert!(start.elapsed() < Duration::from_secs(2));
        for r in e {
            let msg = r.unwrap_err().to_string();
            assert!(msg.contains("ranks [2, 3] to join"), "{msg}");
        }
    }

    #[test]
    fn join_works_over_memstore() {
        let m = MemStore::new(Duration::from_secs(1));
        join(&m, "solo", 0, 1, Duration::from_secs(1)).unwrap();
        let e = join(&m, "pair", 0, 2, Duration::from_millis(100)).unwrap_err();
        assert!(e.to_string().contains("ranks [1] to join"), "{e}");
    }

    #[test]
    fn a_rank_that_gives_up_fails_the_others_at_once() {
        let m = MemStore::new(Duration::from_secs(5));
        let start = Instant::now();
        std::thread::scope(|s| {
            let waiter = s.spawn(|| join(&m, "gu", 0, 3, Duration::from_secs(20)));
            std::thread::sleep(Duration::from_millis(100));
            give_up(&m, "gu", "rank 2 could not map the segment");
            let e = waiter.join().unwrap().unwrap_err();
            assert!(matches!(e, Error::Rendezvous(_)), "{e}");
            assert!(e.to_string().contains("rank 2 could not map"), "{e}");
        });
        // A late rank fails too, rather than waiting for a rank that will not come.
        let e = join(&m, "gu", 1, 3, Duration::from_secs(20)).unwrap_err();
        assert!(e.to_string().contains("rank 2 could not map"), "{e}");
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn more_arrivals_than_ranks_is_an_error() {
        let m = MemStore::new(Duration::from_secs(1));
        join(&m, "twice", 0, 1, Duration::from_secs(1)).unwrap();
        let e = join(&m, "twice", 0, 1, Duration::from_secs(1)).unwrap_err();
        assert!(e.to_string().contains("shared by two communicators"), "{e}");
    }
}
