//! Names the mistake in a failing [`GradSync`], by calling each piece alone on
//! numbers chosen so that a wrong result says what went wrong: two thread
//! ranks for the collectives, plain tensors for the rest. The equivalence
//! check says *that* the parameters drifted; this says *why*.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use collectives::thread_ranks;
use collectives::transport::TransportKind;
use tch::Tensor;
use trainers::ddp::GradSync;

/// How long a probe rank waits before the probe gives up (it says nothing then).
const WAIT: Duration = Duration::from_secs(5);

/// `f` on 2 thread ranks, each rank's numbers as f64; `None` if any rank failed,
/// panicked or hung (the check's own message covers those).
fn on_two_ranks(
    f: impl Fn(usize, &dyn collectives::Communicator) -> trainers::Result<Vec<f64>> + Sync,
) -> Option<Vec<Vec<f64>>> {
    let ran = catch_unwind(AssertUnwindSafe(|| {
        thread_ranks::with_ranks(2, TransportKind::Shm, WAIT, |rank, comm| f(rank, &comm))
    }));
    let outcomes = ran.ok()?.ok()?;
    outcomes.into_iter().map(Result::ok).collect()
}

/// A tensor's numbers.
fn values(t: &Tensor) -> trainers::Result<Vec<f64>> {
    Ok(Vec::<f64>::try_from(
        t.f_to_kind(tch::Kind::Double)?.f_reshape([-1])?,
    )?)
}

/// An explanation and its `hint: <key>` line.
fn named(what: String, key: &str) -> Option<String> {
    Some(format!("\n{}", labkit::named(what, key)))
}

/// The all-reduce: rank r averages [r + 1; 3]; the mean is 1.5, the sum 3.
pub fn all_reduce_mean(sync: &dyn GradSync) -> Option<String> {
    let got = on_two_ranks(|rank, comm| {
        let mut flat = Tensor::from_slice(&[(rank + 1) as f32; 3]);
        sync.all_reduce_mean(comm, &mut flat)?;
        values(&flat)
    })?;
    for (rank, got) in got.iter().enumerate() {
        let g = *got.first()?;
        if (g - 1.5).abs() < 1e-6 {
            continue;
        }
        let what = format!(
            "Your all_reduce_mean on 2 ranks holding [1, 1, 1] and [2, 2, 2]: rank {rank} \
             element 0: got {g}, expected 1.5 (the mean)"
        );
        if (g - 3.0).abs() < 1e-6 {
            return named(
                format!(
                    "{what}: that is the sum. With R ranks the parameters then move R times \
                     as far as one process with the whole batch would move them."
                ),
                "avg-not-sum",
            );
        }
        if (g - (rank + 1) as f64).abs() < 1e-6 {
            return named(
                format!("{what}: its own value, unchanged: `flat` was never reduced in place."),
                "not-in-place",
            );
        }
        return None;
    }
    None
}

/// The broadcast from root 1: rank r holds [10 r + 1, 10 r + 2] and [10 r + 3].
pub fn broadcast(sync: &dyn GradSync) -> Option<String> {
    let got = on_two_ranks(|rank, comm| {
        let base = (10 * rank) as f32;
        let ts = [
            Tensor::from_slice(&[base + 1.0, base + 2.0]),
            Tensor::from_slice(&[base + 3.0]),
        ];
        sync.broadcast(comm, &ts, 1)?;
        let mut all = values(&ts[0])?;
        all.extend(values(&ts[1])?);
        Ok(all)
    })?;
    let want = [11.0, 12.0, 13.0];
    let own = |rank: usize| -> Vec<f64> { (1..=3).map(|j| (10 * rank + j) as f64).collect() };
    let (rank, got) = got.iter().enumerate().find(|(_, g)| g[..] != want[..])?;
    let i = (0..3).find(|&i| got.get(i) != Some(&want[i]))?;
    let what = format!(
        "Your broadcast from root 1 on 2 ranks (rank r holds 10 r + 1, 10 r + 2, 10 r + 3): \
         rank {rank} element {i}: got {}, expected {}",
        got[i], want[i]
    );
    if got[..] == own(0)[..] && rank == 1 {
        return named(
            format!("{what}: rank 0's values reached rank 1, so the root was not `root`."),
            "broadcast-root",
        );
    }
    if got[..] == own(rank)[..] {
        return named(
            format!(
                "{what}: rank {rank} kept its own values: nothing was written into the \
                 tensors themselves (was a copy broadcast, or the root not `root`?)."
            ),
            "broadcast-root",
        );
    }
    None
}

/// Flatten: gradients [1, 2] and [3, 4, 5] into 5 elements.
pub fn flatten(sync: &dyn GradSync) -> Option<String> {
    let grads = [
        Tensor::from_slice(&[1f32, 2.0]),
        Tensor::from_slice(&[3f32, 4.0, 5.0]),
    ];
    let mut flat = Tensor::zeros([5], (tch::Kind::Float, tch::Device::Cpu));
    sync.flatten(&grads, &mut flat).ok()?;
    let got = values(&flat).ok()?;
    let want = [1.0, 2.0, 3.0, 4.0, 5.0];
    let i = (0..5).find(|&i| got[i] != want[i])?;
    let what = format!(
        "Your flatten of gradients [1, 2] and [3, 4, 5]: element {i}: got {}, expected {} \
         (flat {got:?})",
        got[i], want[i]
    );
    if got[..3] == [3.0, 4.0, 5.0] || got[..2] == [3.0, 4.0] {
        return named(
            format!("{what}: the second gradient overwrote the first: the offset never moved."),
            "flatten-offset",
        );
    }
    named(what, "flatten-offset")
}

/// `ready` on 5 buckets whose gradients exist after stages [3, 2, 2, 1, 0]
/// (backward runs stage 3 first), asked after stage 2 with bucket 1 next.
pub fn ready(sync: &dyn GradSync) -> Option<String> {
    let stages = [3, 2, 2, 1, 0];
    let got = sync.ready(2, &stages, 1).ok()?;
    if got == 3 {
        return None;
    }
    let what = format!(
        "Your ready(stage 2, ready stages {stages:?}, next 1) returned {got}, expected 3 \
         (buckets 1 and 2 became ready with stage 2)"
    );
    if got > 3 {
        named(
            format!(
                "{what}: bucket {} would start before stage {}'s backward has written its \
                 gradients.",
                3, stages[3]
            ),
            "bucket-too-early",
        )
    } else {
        named(
            format!("{what}: ready buckets are held back, so they cannot overlap backward."),
            "no-overlap",
        )
    }
}

/// What the probes can name in `sync`, joined (empty when nothing is recognised).
pub fn diagnose(sync: &dyn GradSync) -> String {
    [
        all_reduce_mean(sync),
        broadcast(sync),
        flatten(sync),
        ready(sync),
    ]
    .into_iter()
    .flatten()
    .collect()
}

#[cfg(test)]
mod tests;
