//! Lab 1: a first all-reduce — by hand from `send`/`recv` (the learner's
//! [`exercise`]), then with the communicator's own `all_reduce`, timed side by side
//! by the program (`cargo lab 1`).

pub mod exercise;
pub mod solution;

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

/// The self-check: on 1 to 5 ranks (threads joined by the reference backend over
/// shared memory), for buffers of 1, 7 and 10,000 numbers, every rank must end with
/// exactly the sequential sum. A wait longer than 20 s is an error, not a hang.
pub fn check(variant: Variant) -> Result<(), LabError> {
    for world in 1..=5 {
        for len in [1, 7, 10_000] {
            let results = thread_ranks::with_ranks(
                world,
                TransportKind::Shm,
                Duration::from_secs(20),
                |rank, comm| {
                    let mut values = input(rank, len);
                    all_reduce_by_hand(variant, &comm, &mut values).map(|()| values)
                },
            )?;
            let want = expected(world, len);
            for (rank, got) in results.into_iter().enumerate() {
                let got = got?;
                if let Some(i) = (0..len).find(|&i| got.get(i) != want.get(i)) {
                    return Err(LabError::Wrong(format!(
                        "{world} ranks, {len} numbers: rank {rank} holds {:?} at index {i}, \
                         the sum is {}",
                        got.get(i),
                        want[i]
                    )));
                }
            }
        }
    }
    Ok(())
}
