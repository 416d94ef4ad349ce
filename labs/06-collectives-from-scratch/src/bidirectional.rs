//! The check of lab 6's stretch goal, the bidirectional ring
//! (`cargo lab check 6 --stretch`).
//!
//! First a probe on 3 ranks (the smallest ring where the left and the right
//! neighbour differ): rank r gives 4^r + 64·i in element i of an f64 buffer,
//! so an element's sum, modulo 64 and read in base 4, says how many copies of
//! each rank's values went into it, and the rest says whether they were copies
//! of *this* element (a block reduced into the wrong place). A counting layer
//! under the transport records the bytes each rank sends to each neighbour.
//! Then the conformance suite on 2 to 4 ranks.

use labkit::named;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use collectives::algorithms::plug::Plug;
use collectives::algorithms::{TaggedTransport, sub_mod, tree};
use collectives::transport::observed::Observed;
use collectives::{DType, ReduceOp, Result, plug_check};
use labkit::LabError;

/// A bidirectional all-reduce, as `stretch::all_reduce` (so a test can hand in
/// mistaken ones).
pub type AllReduce = fn(&mut TaggedTransport<'_>, &mut [u8], DType, ReduceOp) -> Result<()>;

/// Ranks of the probe.
const RING: usize = 3;
/// Elements of the probe's buffer: two halves of 6, blocks of 2.
const COUNT: usize = 12;

/// Rank `r`'s element `i` in the probe: exact in f64, and every sum of up to
/// three copies per rank decodes (see the module docs).
fn value(r: usize, i: usize) -> f64 {
    4f64.powi(r as i32) + 64.0 * i as f64
}
/// How long the probe waits for a message before it calls the run a hang.
const WAIT: Duration = Duration::from_secs(3);

/// Bytes one rank sent to each neighbour in one all_reduce.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sent {
    /// To rank + 1.
    pub right: usize,
    /// To rank − 1.
    pub left: usize,
}

/// `f` in the reference backend's slot (broadcast: the backend's own tree),
/// remembering what each rank's last all_reduce sent.
struct Stretch {
    f: AllReduce,
    sent: Mutex<Vec<Sent>>,
}

impl Plug for Stretch {
    fn name(&self) -> &str {
        "your bidirectional ring"
    }
    fn all_reduce(
        &self,
        p: &mut TaggedTransport<'_>,
        buf: &mut [u8],
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        let (rank, n, tag) = (p.rank(), p.world(), p.tag);
        let mut sent_now = Sent::default();
        let done = {
            let mut counting = Observed::new(&mut *p.t, |to, bytes| {
                // On 2 ranks both neighbours are one rank: counted as right.
                if to == (rank + 1) % n {
                    sent_now.right += bytes;
                } else if to == sub_mod(rank, 1, n) {
                    sent_now.left += bytes;
                }
            });
            (self.f)(
                &mut TaggedTransport {
                    t: &mut counting,
                    tag,
                },
                buf,
                dtype,
                op,
            )
        };
        // A poisoned lock means another rank panicked; its panic is the verdict.
        if let Ok(mut sent) = self.sent.lock() {
            if let Some(s) = sent.get_mut(rank) {
                *s = sent_now;
            }
        }
        done
    }
    fn broadcast(&self, p: &mut TaggedTransport<'_>, buf: &mut [u8], root: usize) -> Result<()> {
        tree::broadcast(p, buf, root)
    }
}

/// What the probe saw: each rank's numbers and bytes sent.
struct Probed {
    values: Vec<Vec<f64>>,
    sent: Vec<Sent>,
}

/// Runs `f` once on [`RING`] thread ranks as an f64 sum of [`COUNT`] elements,
/// rank r giving 4^r; a panic or a hang becomes the error.
fn probe(f: AllReduce) -> std::result::Result<Probed, String> {
    let plug = Arc::new(Stretch {
        f,
        sent: Mutex::new(vec![Sent::default(); RING]),
    });
    let values = labkit::plugged::sum_through(plug.clone(), RING, WAIT, COUNT, value)?;
    let sent = plug.sent.lock().map(|s| s.clone()).unwrap_or_default();
    Ok(Probed { values, sent })
}

/// "the copies of ranks 0, 2, 2" for a probe sum of element `i`: its rank
/// digits (modulo 64, in base 4), and whether the copies were of element `i`.
fn copies(sum: f64, i: usize) -> String {
    let total = sum.round().max(0.0) as u64;
    let mut v = total % 64;
    let mut ranks = Vec::new();
    for r in 0..RING {
        for _ in 0..v % 4 {
            ranks.push(r.to_string());
        }
        v /= 4;
    }
    let who = match ranks.len() {
        0 => "no rank's copy".into(),
        1 => format!("rank {}'s copy only", ranks[0]),
        _ => format!("the copies of ranks {}", ranks.join(", ")),
    };
    // Each copy of element i adds 64·i above the rank digits.
    if total / 64 == (ranks.len() * i) as u64 {
        who
    } else {
        format!("{who}, not all of them of element {i}: some came from another block")
    }
}

/// Names what is wrong with the probe's numbers, or nothing when every
/// element is the sum.
fn judge_values(values: &[Vec<f64>]) -> Option<String> {
    let full = |i: usize| (0..RING).map(|r| value(r, i)).sum::<f64>();
    let half = COUNT / 2;
    let right = |r: usize, range: std::ops::Range<usize>| {
        range
            .into_iter()
            .all(|i| values[r].get(i) == Some(&full(i)))
    };
    let wrong = (0..RING).find_map(|r| {
        (0..COUNT)
            .find(|&i| values[r].get(i) != Some(&full(i)))
            .map(|i| (r, i))
    })?;
    let (r, i) = wrong;
    // A buffer of another length reads as NaN, which no comparison accepts.
    let got = values[r].get(i).copied().unwrap_or(f64::NAN);
    let which = if i < half { "first" } else { "second" };
    let head = format!(
        "on {RING} ranks with rank r giving 4^r + 64·i in element i of {COUNT} (halves of \
         {half}), rank {r}'s element {i} (the {which} half) is {got} = {} where every rank's \
         copy of it once makes {}",
        copies(got, i),
        full(i)
    );
    let own = |r: usize, range: std::ops::Range<usize>| {
        range
            .into_iter()
            .all(|i| values[r].get(i) == Some(&value(r, i)))
    };
    let all = |f: &dyn Fn(usize) -> bool| (0..RING).all(f);
    let (first_ok, second_ok) = (all(&|r| right(r, 0..half)), all(&|r| right(r, half..COUNT)));
    Some(
        if all(&|r| own(r, half..COUNT)) || all(&|r| own(r, 0..half)) {
            named(
                format!(
                    "{head}: one half still holds each rank's own values, untouched: only one \
                     ring ran"
                ),
                "half-not-reduced",
            )
        } else if first_ok != second_ok {
            let (ok, bad) = if first_ok {
                ("first", "second")
            } else {
                ("second", "first")
            };
            named(
                format!(
                    "{head}: the {ok} half is right, the {bad} is not: the ring that runs the \
                     other way sends or reduces the wrong blocks"
                ),
                "mirror-the-ring",
            )
        } else {
            head
        },
    )
}

/// Names what is wrong with the bytes each rank sent in the probe, or nothing.
fn judge_bytes(sent: &[Sent]) -> Option<String> {
    // A ring all-reduce of S bytes sends 2(n − 1)/n · S per rank; the probe's
    // blocks are whole (12 elements, 3 ranks, halves of 6), so exactly.
    let bytes = COUNT * 8;
    let ring = 2 * (RING - 1) * bytes / RING;
    let (r, s) = sent
        .iter()
        .enumerate()
        .find(|(_, s)| s.left == 0 || s.right == 0 || s.left + s.right > ring)?;
    Some(if s.left == 0 || s.right == 0 {
        let (to, none) = if s.left == 0 {
            ("right (rank + 1)", "left")
        } else {
            ("left (rank − 1)", "right")
        };
        named(
            format!(
                "the sums are right, but on {RING} ranks rank {r} sent all its {} bytes to its \
                 {to} neighbour and none to its {none}: both halves went round the same way",
                s.left + s.right
            ),
            "one-way",
        )
    } else {
        named(
            format!(
                "the sums are right, but on {RING} ranks rank {r} sent {} bytes ({} right, {} \
                 left) where one ring all-reduce of the {bytes}-byte buffer sends {ring}: does \
                 each ring carry only its half?",
                s.left + s.right,
                s.right,
                s.left
            ),
            "more-than-a-ring",
        )
    })
}

/// The stretch goal's check: the probe's values and bytes (each mistake
/// named), then the conformance suite on 2 to 4 ranks. Returns what passed.
pub fn check(f: AllReduce) -> std::result::Result<String, LabError> {
    let probed = probe(f).map_err(|e| {
        LabError::Wrong(if e.contains("overlap") {
            named(
                format!("your bidirectional ring on {RING} ranks stopped: {e}"),
                "mirror-the-ring",
            )
        } else {
            format!("your bidirectional ring on {RING} ranks stopped: {e}")
        })
    })?;
    if let Some(why) = judge_values(&probed.values).or_else(|| judge_bytes(&probed.sent)) {
        return Err(LabError::Wrong(why));
    }
    let plug = Arc::new(Stretch {
        f,
        sent: Mutex::new(vec![Sent::default(); 4]),
    });
    match plug_check::check(plug, 2..=4, Duration::from_secs(20)) {
        Ok(Ok(cases)) => Ok(format!(
            "every element summed on {RING} ranks, half the bytes each way; {cases} \
             conformance cases passed on 2 to 4 ranks"
        )),
        Ok(Err((world, report))) => {
            let shown: Vec<&str> = report.failures.iter().take(5).map(String::as_str).collect();
            Err(LabError::Wrong(format!(
                "the probe passed, but {} of {} conformance cases are wrong on {world} ranks, \
                 e.g.:\n  {}\n(odd element counts, other dtypes and ops: is each half a whole \
                 number of elements?)",
                report.failures.len(),
                report.cases,
                shown.join("\n  ")
            )))
        }
        Err(e) => Err(LabError::Wrong(format!(
            "the conformance suite on 2 to 4 ranks stopped: {e}"
        ))),
    }
}

#[cfg(test)]
mod tests;
