//! The check of lab 7's stretch goal, the bucket assignment (`cargo lab check
//! 7 --stretch`): which parameters share a bucket, as PyTorch DDP's
//! `compute_bucket_assignment_by_size` decides it. Every answer below was
//! worked out by hand from PyTorch's rule, not by running trainers' own
//! [`trainers::bucket::assign`] (the solution), so the check would catch a
//! change in either. The models are small on purpose: each tells one mistake
//! from the right answer, and the answers a mistake gives are in the table, so
//! the check names it.

#[cfg(test)]
mod tests;

use labkit::named;
use std::panic::{AssertUnwindSafe, catch_unwind};

use labkit::LabError;
use tch::{Device, Kind};

use crate::lab_error;

/// A parameter's kind: parameters of different kinds never share a bucket
/// (one flat tensor holds one dtype on one device). trainers' `Ddp` uses the
/// same key.
pub type Key = (Kind, Device);

/// A bucket assignment, as `stretch::assign` and trainers' own
/// `bucket::assign` (so a test can hand in mistaken ones).
pub type Assign = fn(&[(usize, Key)], &[usize], &[usize]) -> trainers::Result<Vec<Vec<usize>>>;

const F32: Key = (Kind::Float, Device::Cpu);
const F16: Key = (Kind::Half, Device::Cpu);

/// The lab's CNN's parameters in registration order, in bytes (f32): conv1's
/// bias and weight (tch creates a layer's bias first), conv2's, fc1's,
/// fc2's; 0.9 MB in all (a test holds this against the model itself).
pub const CNN_BYTES: [usize; 8] = [128, 1152, 256, 73_728, 512, 819_200, 40, 5120];

/// One model the check buckets, the right answer, and the answers mistakes
/// give.
struct Case {
    /// What the model is, for messages.
    what: &'static str,
    params: Vec<(usize, Key)>,
    order: Vec<usize>,
    limits: Vec<usize>,
    want: Vec<Vec<usize>>,
    /// (what a mistake returns, its hint key, what it did).
    known: Vec<(Vec<Vec<usize>>, &'static str, &'static str)>,
}

/// `n - 1, …, 0`: ready order for a model that runs its layers in
/// registration order.
fn reversed(n: usize) -> Vec<usize> {
    (0..n).rev().collect()
}

/// The models, in the order the check runs them: the CNN first (a learner
/// who gets it right sees that the real thing works), then the small models
/// that separate the mistakes.
fn cases() -> Vec<Case> {
    let cnn: Vec<(usize, Key)> = CNN_BYTES.iter().map(|&b| (b, F32)).collect();
    let registration = "buckets filled in registration order (0, 1, 2, …), not in `order`: \
                        the first bucket would hold conv1, whose gradient is ready last, so \
                        nothing could start during backward";
    let crossing = "each bucket was closed before the parameter that would cross its \
                    limit: PyTorch adds it first, then closes (a parameter larger than the \
                    limit has a bucket of its own only when it opens one)";
    let first_limit = "the first limit belongs to the first bucket only, the last limit to \
                       every later one";
    vec![
        Case {
            what: "the lab's CNN (8 parameters, bytes 128, 1152, 256, 73728, 512, 819200, \
                   40, 5120) with step 3's 64 KiB buckets",
            params: cnn.clone(),
            order: reversed(8),
            limits: vec![64 << 10, 64 << 10],
            want: vec![vec![7, 6, 5], vec![4, 3], vec![2, 1, 0]],
            known: vec![
                (
                    vec![vec![0, 1, 2, 3], vec![4, 5], vec![6, 7]],
                    "ready-order",
                    registration,
                ),
                (
                    vec![vec![7, 6], vec![5], vec![4], vec![3], vec![2, 1, 0]],
                    "crossing-parameter-inside",
                    crossing,
                ),
            ],
        },
        Case {
            what: "the lab's CNN with PyTorch's defaults (1 MiB first, then 25 MiB)",
            params: cnn,
            order: reversed(8),
            limits: vec![1 << 20, 25 << 20],
            want: vec![vec![7, 6, 5, 4, 3, 2, 1, 0]],
            known: vec![(
                vec![vec![0, 1, 2, 3, 4, 5, 6, 7]],
                "ready-order",
                registration,
            )],
        },
        Case {
            what: "six 4-byte parameters, limits [4, 12] (met exactly)",
            params: vec![(4, F32); 6],
            order: reversed(6),
            limits: vec![4, 12],
            want: vec![vec![5], vec![4, 3, 2], vec![1, 0]],
            known: vec![
                (
                    vec![vec![5, 4], vec![3, 2, 1, 0]],
                    "at-least-the-limit",
                    "buckets that reached their limit exactly stayed open: a bucket \
                     closes once it holds at least its limit",
                ),
                (
                    vec![vec![5, 4, 3], vec![2, 1, 0]],
                    "first-limit-first-bucket",
                    first_limit,
                ),
                (
                    vec![vec![5], vec![4], vec![3], vec![2], vec![1], vec![0]],
                    "first-limit-first-bucket",
                    first_limit,
                ),
                (
                    vec![vec![0], vec![1, 2, 3], vec![4, 5]],
                    "ready-order",
                    registration,
                ),
            ],
        },
        Case {
            what: "parameters of 10, 3 and 3 bytes, limit 5 (the second crosses it)",
            params: vec![(10, F32), (3, F32), (3, F32)],
            order: reversed(3),
            limits: vec![5],
            want: vec![vec![2, 1], vec![0]],
            known: vec![
                (
                    vec![vec![2], vec![1], vec![0]],
                    "crossing-parameter-inside",
                    crossing,
                ),
                (vec![vec![0], vec![1, 2]], "ready-order", registration),
            ],
        },
        Case {
            what: "f32 and f16 parameters interleaved (8, 4, 8, 4 bytes), limit 16",
            params: vec![(8, F32), (4, F16), (8, F32), (4, F16)],
            order: reversed(4),
            limits: vec![16],
            want: vec![vec![2, 0], vec![3, 1]],
            known: vec![(
                vec![vec![3, 1], vec![2, 0]],
                "closed-before-open",
                "the f32 bucket closed (it reached 16 bytes) while the f16 one was still \
                 open at the end: closed buckets come first, in the order they closed",
            )],
        },
    ]
}

/// Names what is wrong with `got` for `case`, or nothing.
fn judge(case: &Case, got: &[Vec<usize>]) -> Option<String> {
    let head = format!(
        "on {}: your buckets are {got:?}, PyTorch's {:?}",
        case.what, case.want
    );
    if got == case.want.as_slice() {
        return None;
    }
    let n = case.params.len();
    let mut count = vec![0usize; n];
    for &i in got.iter().flatten() {
        if i >= n {
            return Some(named(
                format!("{head}: there is no parameter {i} (the model has {n})"),
                "every-parameter-once",
            ));
        }
        count[i] += 1;
    }
    if let Some(i) = (0..n).find(|&i| count[i] != 1) {
        return Some(named(
            format!(
                "{head}: parameter {i} is in {} bucket(s); every parameter belongs to \
                 exactly one",
                count[i]
            ),
            "every-parameter-once",
        ));
    }
    if let Some(b) = got.iter().position(|b| b.is_empty()) {
        return Some(named(
            format!("{head}: bucket {b} is empty (DDP cannot flatten nothing)"),
            "every-parameter-once",
        ));
    }
    for (b, bucket) in got.iter().enumerate() {
        let first = case.params[bucket[0]].1;
        if let Some(&i) = bucket.iter().find(|&&i| case.params[i].1 != first) {
            return Some(named(
                format!(
                    "{head}: bucket {b} mixes kinds (parameter {} is {:?}, parameter {i} \
                     {:?}): one flat tensor holds one kind",
                    bucket[0], first.0, case.params[i].1.0
                ),
                "one-kind-per-bucket",
            ));
        }
    }
    if let Some((_, key, why)) = case.known.iter().find(|(k, _, _)| k.as_slice() == got) {
        return Some(named(format!("{head}: {why}"), key));
    }
    Some(head)
}

/// The stretch goal's check: on every model, `f`'s buckets are PyTorch's.
/// Returns what passed.
pub fn check(f: Assign) -> Result<String, LabError> {
    let cases = cases();
    for case in &cases {
        let ran = catch_unwind(AssertUnwindSafe(|| {
            f(&case.params, &case.order, &case.limits)
        }));
        let got = match ran {
            Ok(Ok(got)) => got,
            Ok(Err(e)) => return Err(lab_error(e)),
            Err(panic) => {
                return Err(LabError::Wrong(format!(
                    "your assignment panicked on {}: {}",
                    case.what,
                    labkit::panic_message(&*panic)
                )));
            }
        };
        if let Some(why) = judge(case, &got) {
            return Err(LabError::Wrong(why));
        }
    }
    Ok(format!(
        "the buckets are PyTorch's on {} models: the CNN with 64 KiB buckets ({:?}) and \
         with the defaults (one bucket), limits met exactly, a crossing parameter, two \
         kinds interleaved",
        cases.len(),
        cases[0].want
    ))
}
