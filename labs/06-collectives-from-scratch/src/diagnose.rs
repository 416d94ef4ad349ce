//! Names the mistake in a failing ring or tree, by running each piece on its own
//! on a few ranks with numbers chosen so that a wrong result says where it came
//! from. The conformance suite says *that* a case is wrong; this says *why*.
//!
//! The reduce-scatter probe gives rank r the value 4^r in every element: a sum
//! then reads, in base 4, how many copies of each rank's block went into it
//! (digit r = copies from rank r), so "rank 1's copy was added twice" and
//! "rank 2's copy is missing" can be told apart. The all-gather probe puts
//! 1 + j in block j of its owner and [`UNSET`] elsewhere; the broadcast probe
//! gives rank r the value r + 1.

use labkit::named;
use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;

use collectives::algorithms::plug::Plug;
use collectives::algorithms::{TaggedTransport, partition, ring, tree};
use collectives::transport::TransportKind;
use collectives::{BufferMut, DType, Input, ReduceOp, Result, thread_ranks};

/// A ring reduce-scatter, as `exercise::reduce_scatter`.
pub type ReduceScatter =
    fn(&mut TaggedTransport<'_>, &mut [u8], &[Range<usize>], DType, ReduceOp) -> Result<()>;
/// A ring all-gather, as `exercise::all_gather`.
pub type AllGather = fn(&mut TaggedTransport<'_>, &mut [u8], &[Range<usize>]) -> Result<()>;
/// A broadcast, as `exercise::broadcast`.
pub type Broadcast = fn(&mut TaggedTransport<'_>, &mut [u8], usize) -> Result<()>;

/// The three pieces of lab 6, as functions, so a test can hand in mistaken ones.
#[derive(Clone, Copy)]
pub struct Pieces {
    /// The reduce-scatter.
    pub reduce_scatter: ReduceScatter,
    /// The all-gather.
    pub all_gather: AllGather,
    /// The broadcast.
    pub broadcast: Broadcast,
}

impl Pieces {
    /// The learner's.
    pub fn yours() -> Pieces {
        Pieces {
            reduce_scatter: crate::exercise::reduce_scatter,
            all_gather: crate::exercise::all_gather,
            broadcast: crate::exercise::broadcast,
        }
    }

    /// The backend's own (the solution).
    pub fn builtin() -> Pieces {
        Pieces {
            reduce_scatter: ring::reduce_scatter_blocks,
            all_gather: ring::all_gather_blocks,
            broadcast: tree::broadcast,
        }
    }
}

/// Which piece a probe runs as the backend's all_reduce.
#[derive(Clone, Copy)]
enum Only {
    ReduceScatter,
    AllGather,
    Both,
}

/// `pieces` in the backend's plug slot, running only `only` as all_reduce.
struct Probe {
    pieces: Pieces,
    only: Only,
}

impl Plug for Probe {
    fn name(&self) -> &str {
        "lab 6 probe"
    }

    fn all_reduce(
        &self,
        p: &mut TaggedTransport<'_>,
        buf: &mut [u8],
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        let blocks = partition(buf.len() / dtype.size(), p.world(), dtype.size());
        match self.only {
            Only::ReduceScatter => (self.pieces.reduce_scatter)(p, buf, &blocks, dtype, op),
            Only::AllGather => (self.pieces.all_gather)(p, buf, &blocks),
            Only::Both => {
                (self.pieces.reduce_scatter)(p, buf, &blocks, dtype, op)?;
                (self.pieces.all_gather)(p, buf, &blocks)
            }
        }
    }

    fn broadcast(&self, p: &mut TaggedTransport<'_>, buf: &mut [u8], root: usize) -> Result<()> {
        (self.pieces.broadcast)(p, buf, root)
    }
}

/// Ranks of the ring probes: 3, the smallest ring where "the block before" and
/// "the block after" differ.
const RING: usize = 3;
/// Elements per block in the probes.
const PER_BLOCK: usize = 2;
/// What the all-gather probe puts in the blocks a rank does not own.
pub const UNSET: f64 = 100.0;
/// How long a probe waits for a message before it calls the run a hang.
const WAIT: Duration = Duration::from_secs(3);

/// What one probe rank ended with: its numbers, or the error (a panic's message
/// included) it stopped with.
type Outcome = std::result::Result<Vec<f64>, String>;

/// Runs `body` on `world` thread ranks with `probe` plugged in; a panic
/// anywhere becomes an error, as a hang does after [`WAIT`].
fn run(
    world: usize,
    probe: Probe,
    body: impl Fn(usize, &dyn collectives::Communicator) -> Outcome + Sync,
) -> std::result::Result<Vec<Outcome>, String> {
    let plug: Arc<dyn Plug> = Arc::new(probe);
    let ran = catch_unwind(AssertUnwindSafe(|| {
        thread_ranks::with_ranks(world, TransportKind::Shm, WAIT, |rank, comm| {
            comm.plug(Some(plug.clone()));
            body(rank, &comm)
        })
    }));
    match ran {
        Ok(Ok(outcomes)) => Ok(outcomes),
        Ok(Err(e)) => Err(e.to_string()),
        Err(panic) => Err(labkit::panic_message(&*panic)),
    }
}

/// The first error among the ranks' outcomes, if any.
fn first_error(outcomes: &[Outcome]) -> Option<&str> {
    outcomes
        .iter()
        .find_map(|o| o.as_ref().err().map(String::as_str))
}

/// Runs one piece of `pieces` (`only`) alone on the [`RING`] ranks as an
/// in-place f64 sum from each rank's `start` numbers: every rank's result, or,
/// when a rank failed or the run did, that failure named for `piece`.
fn ring_probe(
    pieces: Pieces,
    only: Only,
    piece: &str,
    start: impl Fn(usize) -> Vec<f64> + Sync,
) -> std::result::Result<Vec<Vec<f64>>, Option<String>> {
    let outcomes = run(RING, Probe { pieces, only }, |rank, comm| {
        let mut v = start(rank);
        comm.all_reduce(
            Input::InPlace,
            &mut BufferMut::from_slice(&mut v),
            ReduceOp::Sum,
        )
        .map_err(|e| e.to_string())?;
        Ok(v)
    })
    .map_err(|e| named_error(piece, &e))?;
    if let Some(e) = first_error(&outcomes) {
        return Err(named_error(piece, e));
    }
    // No rank failed: every outcome is its numbers.
    Ok(outcomes.into_iter().filter_map(|o| o.ok()).collect())
}

/// Copies per rank in a probe sum (base-4 digits, see the module docs).
fn copies(value: f64) -> Vec<u64> {
    let mut v = value.round().max(0.0) as u64;
    (0..RING)
        .map(|_| {
            let d = v % 4;
            v /= 4;
            d
        })
        .collect()
}

/// "ranks 0, 1, 1 and 2" for digits [1, 2, 1].
fn describe(copies: &[u64]) -> String {
    let ranks: Vec<String> = copies
        .iter()
        .enumerate()
        .flat_map(|(r, &c)| std::iter::repeat_n(r.to_string(), c as usize))
        .collect();
    if ranks.is_empty() {
        "no rank's copy".into()
    } else {
        format!("the copies of rank(s) {}", ranks.join(", "))
    }
}

/// A probe error, named: an overlap from `split_pair`, a wait that never ended.
fn named_error(piece: &str, e: &str) -> Option<String> {
    if e.contains("overlap") {
        Some(named(
            format!("your {piece} on {RING} ranks stopped: {e}"),
            "same-block",
        ))
    } else if e.contains("timed out") || e.contains("hang") {
        Some(named(
            format!(
                "your {piece} on {RING} ranks did not finish within {WAIT:?}: a rank waits for \
                 a message no rank sends ({e})"
            ),
            "ring-unmatched",
        ))
    } else {
        None
    }
}

/// Names the mistake in the reduce-scatter of `pieces`, if it is one we know.
pub fn reduce_scatter(pieces: Pieces) -> Option<String> {
    let n = RING * PER_BLOCK;
    let full: f64 = (0..RING).map(|r| 4f64.powi(r as i32)).sum();
    let start = |rank: usize| vec![4f64.powi(rank as i32); n];
    let outcomes = match ring_probe(pieces, Only::ReduceScatter, "reduce-scatter", start) {
        Ok(o) => o,
        Err(named) => return named,
    };
    for (rank, got) in outcomes.iter().enumerate() {
        let i = rank * PER_BLOCK;
        if got[i] == full {
            continue;
        }
        let have = copies(got[i]);
        let element = format!(
            "after your reduce-scatter on {RING} ranks (rank r starts with 4^r everywhere), \
             rank {rank} block {rank} element 0: got {}, expected {full} (one copy from each \
             rank): it holds {}",
            got[i],
            describe(&have)
        );
        if let Some(twice) = have.iter().position(|&c| c > 1) {
            return Some(named(
                format!("{element}: rank {twice}'s copy of the block was added twice."),
                "block-twice",
            ));
        }
        // Shifted indices finish some other block: say which.
        let finished = (0..RING).find(|&b| got[b * PER_BLOCK] == full);
        let where_ = match finished {
            Some(b) => format!("; block {b} is the one it finished"),
            None => String::new(),
        };
        return Some(named(
            format!("{element}{where_}: rank r must finish block r."),
            "ring-wrong-block",
        ));
    }
    None
}

/// Names the mistake in the all-gather of `pieces`, if it is one we know.
pub fn all_gather(pieces: Pieces) -> Option<String> {
    let start = |rank: usize| -> Vec<f64> {
        (0..RING * PER_BLOCK)
            .map(|i| {
                if i / PER_BLOCK == rank {
                    (rank + 1) as f64
                } else {
                    UNSET
                }
            })
            .collect()
    };
    let outcomes = match ring_probe(pieces, Only::AllGather, "all-gather", start) {
        Ok(o) => o,
        Err(named) => return named,
    };
    for (rank, got) in outcomes.iter().enumerate() {
        for block in 0..RING {
            let (i, want) = (block * PER_BLOCK, (block + 1) as f64);
            if got[i] == want {
                continue;
            }
            let element = format!(
                "after your all-gather on {RING} ranks (rank r starts with only block r, \
                 filled with r + 1; the others hold {UNSET}), rank {rank} block {block} element \
                 0: got {}, expected {want}",
                got[i]
            );
            if got[i] > UNSET {
                return Some(named(
                    format!(
                        "{element}: what arrived was added to what was there; the all-gather \
                         copies finished blocks, it does not reduce them again."
                    ),
                    "gather-reduces",
                ));
            }
            return Some(named(
                format!("{element}: each rank must start by passing on the block it finished."),
                "ring-wrong-block",
            ));
        }
    }
    None
}

/// Names the mistake in the broadcast of `pieces`, if it is one we know: from
/// roots 0 and 2 on 5 ranks (not a power of two).
pub fn broadcast(pieces: Pieces) -> Option<String> {
    const WORLD: usize = 5;
    for root in [0, 2] {
        let probe = Probe {
            pieces,
            only: Only::Both,
        };
        let outcomes = run(WORLD, probe, |rank, comm| {
            let mut v = vec![(rank + 1) as f64; 3];
            comm.broadcast(Input::InPlace, &mut BufferMut::from_slice(&mut v), root)
                .map_err(|e| e.to_string())?;
            Ok(v)
        });
        let failed = match &outcomes {
            Err(e) => Some(e.clone()),
            Ok(o) => first_error(o).map(str::to_owned),
        };
        if let Some(e) = failed {
            let key = if root == 0 { "tree-peers" } else { "tree-root" };
            return Some(named(
                format!(
                    "your broadcast from root {root} on {WORLD} ranks did not finish: {e} (a \
                     rank waits for a message no rank sends it, or sends to a rank that does \
                     not wait for it)"
                ),
                key,
            ));
        }
        for (rank, got) in outcomes.ok()?.iter().enumerate() {
            let got = got.as_ref().ok()?;
            let want = (root + 1) as f64;
            if got[0] != want {
                let from = if got[0] == (rank + 1) as f64 {
                    "its own value: nothing reached it".to_string()
                } else {
                    format!("rank {}'s value", got[0] as usize - 1)
                };
                let key = if root == 0 { "tree-peers" } else { "tree-root" };
                return Some(named(
                    format!(
                        "your broadcast from root {root} on {WORLD} ranks (rank r starts with \
                         r + 1): rank {rank} element 0: got {}, expected {want}, {from}.",
                        got[0]
                    ),
                    key,
                ));
            }
        }
    }
    None
}

/// Every named mistake of `pieces`, one paragraph each (empty when none is
/// recognised).
pub fn diagnose(pieces: Pieces) -> Vec<String> {
    [
        reduce_scatter(pieces),
        all_gather(pieces),
        broadcast(pieces),
    ]
    .into_iter()
    .flatten()
    .collect()
}

#[cfg(test)]
mod tests;
