//! Lab 1: a first all-reduce — by hand from `send`/`recv` (the learner's
//! [`exercise`]), then with the communicator's own `all_reduce`, timed side by side
//! by the program (`cargo lab 1`).
//!
//! The optional stretch goal, timing a collective as nccl-tests does, is the
//! learner's `src/stretch.rs`, compiled only by its own check
//! `tests/stretch.rs`; [`timing`] judges it, and its solution
//! ([`solution::time_collective`]) is `collectives::bench::time`.

pub mod exercise;
pub mod solution;
pub mod timing;

use std::time::Duration;

use collectives::transport::TransportKind;
use collectives::{Communicator, thread_ranks};
use labkit::{LabError, Variant};

/// The by-hand all-reduce of `variant`: the learner's or the reference solution.
pub fn all_reduce_by_hand(
    variant: Variant,
    comm: &dyn Communicator,
    values: &mut [f64],
) -> Result<(), LabError> {
    match variant {
        Variant::Exercise => exercise::all_reduce_by_hand(comm, values),
        Variant::Solution => solution::all_reduce_by_hand(comm, values),
    }
}

/// Rank `rank`'s starting buffer: small integers, so every float sum is exact and
/// results compare bit for bit whatever order they were added in.
pub fn input(rank: usize, len: usize) -> Vec<f64> {
    (0..len)
        .map(|i| ((rank + 1) * (i % 97 + 1)) as f64)
        .collect()
}

/// The element-wise sum of every rank's [`input`], computed sequentially.
pub fn expected(world: usize, len: usize) -> Vec<f64> {
    let mut sum = vec![0.0; len];
    for rank in 0..world {
        for (s, x) in sum.iter_mut().zip(input(rank, len)) {
            *s += x;
        }
    }
    sum
}

/// A by-hand all-reduce, as the check calls it (so a test can feed it a
/// mistaken one).
pub type AllReduce = fn(&dyn Communicator, &mut [f64]) -> Result<(), LabError>;

/// How long a rank of the check waits for a message before the check calls it
/// a hang: 10,000 numbers take milliseconds, so 10 s is only ever a hang.
pub const WAIT: Duration = Duration::from_secs(10);

/// The self-check: on 1 to 5 ranks (threads joined by the reference backend over
/// shared memory), for buffers of 1, 7 and 10,000 numbers, every rank must end with
/// exactly the sequential sum. A wait longer than [`WAIT`] is an error, not a hang.
pub fn check(variant: Variant) -> Result<(), LabError> {
    match variant {
        Variant::Exercise => check_with(exercise::all_reduce_by_hand),
        Variant::Solution => check_with(solution::all_reduce_by_hand),
    }
}

/// [`check`] for any by-hand all-reduce: the first wrong element, named, with
/// the mistake when [`diagnose`] recognises it (a `hint: <key>` line).
pub fn check_with(all_reduce: AllReduce) -> Result<(), LabError> {
    for world in 1..=5 {
        for len in [1, 7, 10_000] {
            let results =
                thread_ranks::with_ranks(world, TransportKind::Shm, WAIT, |rank, comm| {
                    let mut values = input(rank, len);
                    all_reduce(&comm, &mut values).map(|()| values)
                });
            let results = match results {
                Ok(r) => r,
                Err(e) => return Err(LabError::Wrong(hang(world, len, &e.to_string()))),
            };
            let want = expected(world, len);
            let mut got_all = Vec::with_capacity(world);
            for (rank, got) in results.into_iter().enumerate() {
                let got = match got {
                    Ok(got) => got,
                    Err(LabError::Collective(e)) if is_wait(&e.to_string()) => {
                        return Err(LabError::Wrong(hang(world, len, &e.to_string())));
                    }
                    Err(e) => return Err(e),
                };
                got_all.push(got);
                let got = &got_all[rank];
                if let Some(i) = (0..len).find(|&i| got.get(i) != want.get(i)) {
                    let shown = got.get(i).map_or("nothing".into(), |v| v.to_string());
                    return Err(LabError::Wrong(format!(
                        "{world} ranks, {len} numbers: rank {rank} element {i}: got {shown}, \
                         expected {} (the sum over the ranks){}",
                        want[i],
                        diagnose(world, len, rank, got).unwrap_or_default()
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Whether a collective error is a wait that ran out.
fn is_wait(e: &str) -> bool {
    e.contains("timed out") || e.contains("hang")
}

/// The message for a run that did not finish.
fn hang(world: usize, len: usize, e: &str) -> String {
    format!(
        "{world} ranks, {len} numbers: a rank waited {WAIT:?} for a message that never came \
         ({e}): a recv without a matching send on the peer, or two ranks both receiving \
         first\nhint: unmatched-send-recv"
    )
}

/// Names the mistake when rank `rank`'s result `got` (on `world` ranks of
/// `len` numbers) is one we recognise: a line of explanation and `hint: <key>`.
pub fn diagnose(world: usize, len: usize, rank: usize, got: &[f64]) -> Option<String> {
    if got.len() != len {
        return None;
    }
    let (mine, sum) = (input(rank, len), expected(world, len));
    let is = |f: &dyn Fn(usize) -> f64| (0..len).all(|i| got[i] == f(i));
    if world > 1 && is(&|i| mine[i]) {
        return Some(format!(
            "\nRank {rank} still holds its own numbers: the sum was never sent back to it \
             (or it never received it into `values`).\nhint: total-not-sent-back"
        ));
    }
    if is(&|i| sum[i] + mine[i]) {
        return Some(format!(
            "\nRank {rank} holds the sum plus its own numbers once more: its own buffer was \
             counted twice (the total was added to `values` instead of replacing it, or \
             rank {rank} added itself).\nhint: own-counted-twice"
        ));
    }
    None
}

#[cfg(test)]
mod tests;
