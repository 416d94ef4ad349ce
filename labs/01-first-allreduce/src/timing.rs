//! The check of lab 1's stretch goal, timing a collective as nccl-tests does
//! (`cargo lab check 1 --stretch`). A fake collective that sleeps for known
//! times stands in for a real one, so the right answer is known to within
//! the machine's sleep overshoot, and each usual mistake gives a number far
//! from it: rank r sleeps 10·(r + 1) ms per timed iteration, iteration
//! `SLOW` is 100 ms longer on every rank, and every call before the first
//! timed one sleeps `WARM_MS` ms. On 3 ranks the slowest rank's times are
//! 30, 30, 130, 30, 30 ms: median 30, mean 50.

#[cfg(test)]
mod tests;

use labkit::named;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use collectives::transport::TransportKind;
use collectives::{Communicator, thread_ranks};
use labkit::LabError;

/// A timing function, as `stretch::time_collective` (so a test can hand in
/// mistaken ones).
pub type TimeCollective = fn(
    &dyn Communicator,
    usize,
    usize,
    &mut dyn FnMut() -> collectives::Result<()>,
) -> Result<f64, LabError>;

/// Ranks of the check.
const WORLD: usize = 3;
/// Untimed calls asked for.
const WARMUP: usize = 2;
/// Timed iterations asked for.
const ITERS: usize = 5;
/// The timed iteration that is slow on every rank.
const SLOW: usize = 2;
/// How long an untimed (warm-up) call sleeps, ms.
const WARM_MS: u64 = 200;

/// How long rank `rank`'s call number `call` (from 0, warm-up included) sleeps.
fn sleep_ms(rank: usize, call: usize) -> u64 {
    if call < WARMUP {
        return WARM_MS;
    }
    let base = 10 * (rank as u64 + 1);
    if call - WARMUP == SLOW {
        base + 100
    } else {
        base
    }
}

/// The median of the slowest rank's times, ms: what a right answer reports.
const WANT_MS: f64 = 30.0;

/// Runs `f` on [`WORLD`] thread ranks with the sleeping call: each rank's
/// answer (µs) and how many times its call ran.
fn run(f: TimeCollective) -> Result<Vec<(f64, usize)>, LabError> {
    let out = thread_ranks::with_ranks(
        WORLD,
        TransportKind::Shm,
        Duration::from_secs(20),
        |rank, comm| -> Result<(f64, usize), LabError> {
            let calls = AtomicUsize::new(0);
            let mut call = || -> collectives::Result<()> {
                let k = calls.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(sleep_ms(rank, k)));
                Ok(())
            };
            let us = f(&comm, WARMUP, ITERS, &mut call)?;
            Ok((us, calls.load(Ordering::SeqCst)))
        },
    )?;
    out.into_iter().collect()
}

/// Whether `ms` is `want` ms, allowing for a sleep that wakes late: sleeps
/// never end early, and on a busy 2-core machine they overshoot by a few ms;
/// every mistake below is at least 10 ms away.
fn near(ms: f64, want: f64) -> bool {
    ms >= want - 0.5 && ms < want + 8.0
}

/// Names what is wrong with what the ranks reported, or nothing.
fn judge(results: &[(f64, usize)]) -> Option<String> {
    let head = format!(
        "on {WORLD} ranks, with rank r's call sleeping 10·(r + 1) ms, timed iteration {SLOW} \
         100 ms longer, and {WARM_MS} ms per untimed call ({WARMUP} warm-up, {ITERS} timed)"
    );
    for (rank, &(us, calls)) in results.iter().enumerate() {
        if calls != WARMUP + ITERS {
            let key = if calls == ITERS { "warm-up" } else { "" };
            let msg = format!(
                "{head}: rank {rank}'s call ran {calls} times, not {WARMUP} + {ITERS}{}",
                if calls == ITERS {
                    ": the warm-up calls never ran"
                } else {
                    ""
                }
            );
            return Some(if key.is_empty() { msg } else { named(msg, key) });
        }
        let ms = us / 1e3;
        if near(ms, WANT_MS) {
            continue;
        }
        let got = format!(
            "{head}: rank {rank} reports {ms:.1} ms where the slowest rank's median is about \
             {WANT_MS} ms"
        );
        let own = 10.0 * (rank as f64 + 1.0);
        let own_mean = own + 100.0 / ITERS as f64;
        let slowest_mean = WANT_MS + 100.0 / ITERS as f64;
        let with_warmup = (WANT_MS * (ITERS - 1) as f64 + WANT_MS + 100.0 + 2.0 * WARM_MS as f64)
            / (ITERS + WARMUP) as f64;
        return Some(
            if rank + 1 < WORLD && (near(ms, own) || near(ms, own_mean)) {
                named(
                    format!(
                        "{got}: that is rank {rank}'s own time. A collective is done when its \
                     slowest rank is"
                    ),
                    "slowest-rank",
                )
            } else if near(ms, slowest_mean) {
                named(
                    format!(
                        "{got}: {slowest_mean} ms is the mean, which the one slow iteration pulls \
                     up"
                    ),
                    "median-not-mean",
                )
            } else if ms > slowest_mean + 8.0 && near(ms, with_warmup) || ms > 100.0 {
                named(
                    format!("{got}: the {WARM_MS} ms warm-up calls were timed too"),
                    "warm-up",
                )
            } else {
                got
            },
        );
    }
    // Every rank near the answer: do they agree?
    let first = results.first().map_or(0.0, |r| r.0);
    if let Some((rank, &(us, _))) = results.iter().enumerate().find(|(_, r)| r.0 != first) {
        return Some(format!(
            "{head}: rank {rank} reports {us:.0} µs, rank 0 {first:.0} µs: every rank must \
             report the same number"
        ));
    }
    None
}

/// The stretch goal's check (see the module docs). Returns what passed.
pub fn check(f: TimeCollective) -> Result<String, LabError> {
    let results = run(f)?;
    if let Some(why) = judge(&results) {
        return Err(LabError::Wrong(why));
    }
    Ok(format!(
        "on {WORLD} ranks every rank reported {:.1} ms, the slowest rank's median (30 ms \
         slept), after {WARMUP} untimed calls",
        results.first().map_or(0.0, |r| r.0) / 1e3
    ))
}
