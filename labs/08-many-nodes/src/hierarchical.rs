//! The check of lab 8's stretch goal, the hierarchical all-reduce
//! (`cargo lab check 8 --stretch`).
//!
//! The learner's function runs inside the reference backend through its
//! [`Plug`] slot, on thread ranks that play `nodes × per_node` hosts: ranks
//! r with equal r / per_node form a node. Rank r gives 16^r + i·2^32 in
//! element i of an i64 buffer, so a result's low 32 bits, read in base 16,
//! say how many copies of each rank's value went into it (a wrong sum names
//! who was counted twice or not at all), and its high bits whether the copies
//! were of element i. A counting layer under the transport records the bytes
//! each rank sends to ranks on other nodes; the flat ring (the backend's own)
//! runs through the same layer, and the hierarchical one must send fewer.
//! Every wait is bounded by `WAIT`: a deadlock is an error within seconds.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use collectives::algorithms::plug::Plug;
use collectives::algorithms::{TaggedTransport, ring, tree};
use collectives::transport::observed::Observed;
use collectives::{DType, ReduceOp, Result};
use labkit::{LabError, named};

/// A hierarchical all-reduce, as `stretch::all_reduce` and
/// `collectives::algorithms::hierarchical::all_reduce` (so a test can hand in
/// mistaken ones).
pub type AllReduce = fn(&mut TaggedTransport<'_>, &mut [u8], DType, ReduceOp, usize) -> Result<()>;

/// The layouts the check runs, nodes × ranks per node: the smallest with a
/// node boundary, more ranks per node, more nodes.
pub const LAYOUTS: [(usize, usize); 3] = [(2, 2), (2, 3), (3, 2)];
/// Elements per rank: whole blocks for every leaders' ring above (2 or 3 leaders).
const COUNT: usize = 12;
/// How long a rank waits for a message before the run is called a hang.
const WAIT: Duration = Duration::from_secs(3);

/// Rank `r`'s element `i`: its rank digit in base 16 below bit 32, its
/// element index above (exact in i64 for up to 15 copies of 6 ranks).
fn value(r: usize, i: usize) -> i64 {
    (1i64 << (4 * r)) + ((i as i64) << 32)
}

/// Bytes one rank sent to ranks on other nodes, and to which rank first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Crossed {
    /// Bytes sent across a node boundary.
    pub bytes: usize,
    /// The first rank on another node this rank sent to.
    pub first_peer: Option<usize>,
}

/// `f` with `per_node` in the reference backend's slot (broadcast: the
/// backend's own tree), remembering what each rank's last all_reduce sent
/// across node boundaries.
struct Stretch {
    f: AllReduce,
    per_node: usize,
    crossed: Mutex<Vec<Crossed>>,
}

impl Plug for Stretch {
    fn name(&self) -> &str {
        "your hierarchical all-reduce"
    }
    fn all_reduce(
        &self,
        p: &mut TaggedTransport<'_>,
        buf: &mut [u8],
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        let (rank, tag, per_node) = (p.rank(), p.tag, self.per_node);
        let mut crossed_now = Crossed::default();
        let done = {
            let mut counting = Observed::new(&mut *p.t, |to, bytes| {
                if to / per_node != rank / per_node {
                    crossed_now.bytes += bytes;
                    crossed_now.first_peer.get_or_insert(to);
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
                per_node,
            )
        };
        // A poisoned lock means another rank panicked; its panic is the verdict.
        if let Ok(mut crossed) = self.crossed.lock() {
            if let Some(c) = crossed.get_mut(rank) {
                *c = crossed_now;
            }
        }
        done
    }
    fn broadcast(&self, p: &mut TaggedTransport<'_>, buf: &mut [u8], root: usize) -> Result<()> {
        tree::broadcast(p, buf, root)
    }
}

/// The flat ring, as an [`AllReduce`] that ignores the layout: the baseline.
fn flat_ring(
    p: &mut TaggedTransport<'_>,
    buf: &mut [u8],
    dtype: DType,
    op: ReduceOp,
    _per_node: usize,
) -> Result<()> {
    ring::all_reduce(p, buf, dtype, op)
}

/// What one run saw: each rank's numbers and bytes across node boundaries.
struct Probed {
    values: Vec<Vec<i64>>,
    crossed: Vec<Crossed>,
}

/// Runs `f` once on `nodes × per_node` thread ranks as an i64 sum of
/// [`COUNT`] elements; an error, a panic or a hang becomes the error text.
fn probe(f: AllReduce, nodes: usize, per_node: usize) -> std::result::Result<Probed, String> {
    let world = nodes * per_node;
    let plug = Arc::new(Stretch {
        f,
        per_node,
        crossed: Mutex::new(vec![Crossed::default(); world]),
    });
    let values = labkit::plugged::sum_through(plug.clone(), world, WAIT, COUNT, value)?;
    let crossed = plug.crossed.lock().map(|c| c.clone()).unwrap_or_default();
    Ok(Probed { values, crossed })
}

/// How many copies of each rank's value a probe result holds (its base-16
/// digits below bit 32), and whether they were all copies of element `i`.
fn copies(got: i64, i: usize, world: usize) -> (Vec<u64>, bool) {
    let low = (got as u64) & 0xffff_ffff;
    let counts: Vec<u64> = (0..world).map(|r| (low >> (4 * r)) & 0xf).collect();
    let total: u64 = counts.iter().sum();
    (counts, (got >> 32) as u64 == total * i as u64)
}

/// "ranks 0, 1 once, rank 3 twice": a result's copies in words.
fn in_words(counts: &[u64]) -> String {
    let mut parts = Vec::new();
    for c in 0..=15u64 {
        let who: Vec<String> = (0..counts.len())
            .filter(|&r| counts[r] == c)
            .map(|r| r.to_string())
            .collect();
        if who.is_empty() {
            continue;
        }
        let times = match c {
            0 => "not at all".to_string(),
            1 => "once".to_string(),
            2 => "twice".to_string(),
            c => format!("{c} times"),
        };
        let ranks = if who.len() == 1 { "rank" } else { "ranks" };
        parts.push(format!("{ranks} {} {times}", who.join(", ")));
    }
    parts.join(", ")
}

/// Names what is wrong with one layout's numbers, or nothing when every
/// element on every rank is the sum.
fn judge_values(values: &[Vec<i64>], nodes: usize, per_node: usize) -> Option<String> {
    let world = nodes * per_node;
    let full = |i: usize| (0..world).map(|r| value(r, i)).sum::<i64>();
    let right = |r: usize| (0..COUNT).all(|i| values[r].get(i) == Some(&full(i)));
    let r = (0..world).find(|&r| !right(r))?;
    let i = (0..COUNT)
        .find(|&i| values[r].get(i) != Some(&full(i)))
        .unwrap_or(0);
    let layout = format!("on {nodes} nodes × {per_node} ranks");
    let Some(&got) = values[r].get(i) else {
        return Some(format!(
            "{layout}, rank {r}'s buffer came back with {} elements instead of {COUNT}",
            values[r].len()
        ));
    };
    let (counts, in_place) = copies(got, i, world);
    let head = format!(
        "{layout} (rank r gives 16^r + i·2^32 in element i), rank {r}'s element {i} counts {}",
        in_words(&counts)
    );
    if !in_place {
        return Some(format!(
            "{head}, and not all of them copies of element {i}: elements moved"
        ));
    }
    let leaders_right = (0..world).step_by(per_node).all(right);
    Some(if counts.iter().all(|&c| c == counts[0]) && counts[0] > 1 {
        named(
            format!(
                "{head}: rank {r} got {}× the sum. Every rank of a node joined the all-reduce \
                 across nodes, each with its node's sum",
                counts[0]
            ),
            "only-leaders-cross",
        )
    } else if counts.iter().any(|&c| c > 1) {
        named(
            format!(
                "{head}: some ranks were counted more than once. Did ranks other than the \
                 leaders take part in the all-reduce across nodes?"
            ),
            "only-leaders-cross",
        )
    } else if leaders_right && r % per_node != 0 {
        named(
            format!(
                "{head}, while every node's leader (ranks {}) holds the sum: rank {r} kept its \
                 partial sum. The total never came back from its leader",
                (0..world)
                    .step_by(per_node)
                    .map(|l| l.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            "broadcast-back",
        )
    } else {
        head
    })
}

/// Names what is wrong with one layout's bytes across node boundaries, given
/// the flat ring's, or nothing when the hierarchy sent fewer.
fn judge_bytes(crossed: &[Crossed], flat: usize, nodes: usize, per_node: usize) -> Option<String> {
    let total: usize = crossed.iter().map(|c| c.bytes).sum();
    let layout = format!("on {nodes} nodes × {per_node} ranks");
    // Only a node's local rank 0 should talk to other nodes.
    if let Some((r, c)) = crossed
        .iter()
        .enumerate()
        .find(|(r, c)| r % per_node != 0 && c.bytes > 0)
    {
        let peer = c.first_peer.unwrap_or(r);
        let msg = format!(
            "the sums are right, but {layout} rank {r}, not its node's leader, sent {} bytes \
             to ranks on other nodes (first rank {peer}, on node {}); {total} bytes crossed \
             node boundaries in all, where the flat ring sends {flat}",
            c.bytes,
            peer / per_node
        );
        return Some(if peer % per_node == r % per_node {
            named(
                format!(
                    "{msg}. Ranks {r} and {peer} share r % {per_node}, not r / {per_node}: \
                     your nodes are strided across the real ones"
                ),
                "node-is-rank-div",
            )
        } else {
            named(msg, "only-leaders-cross")
        });
    }
    (total >= flat).then(|| {
        format!(
            "the sums are right, but {layout} {total} bytes crossed node boundaries, where \
             the flat ring sends {flat}: the hierarchy should send fewer"
        )
    })
}

/// The stretch goal's check: on each of [`LAYOUTS`], every element on every
/// rank is the exact sum, and fewer bytes cross node boundaries than with the
/// flat ring (each mistake we know named, with its `hint:` line). Returns
/// what passed, with both byte counts.
pub fn check(f: AllReduce) -> std::result::Result<String, LabError> {
    let mut said = Vec::new();
    for (nodes, per_node) in LAYOUTS {
        let layout = format!("{nodes} nodes × {per_node} ranks");
        let probed = probe(f, nodes, per_node).map_err(|e| {
            LabError::Wrong(
                if e.contains("timed out") || e.contains("hang") || e.contains("lost rank") {
                    named(
                        format!(
                            "your hierarchical all-reduce on {layout} stopped: {e}\nRanks \
                             waited for messages that never came: do all ranks of a node \
                             agree which rank leads it (the root of its reduce and of its \
                             broadcast)?"
                        ),
                        "one-leader-per-node",
                    )
                } else {
                    format!("your hierarchical all-reduce on {layout} stopped: {e}")
                },
            )
        })?;
        if let Some(why) = judge_values(&probed.values, nodes, per_node) {
            return Err(LabError::Wrong(why));
        }
        let flat = probe(flat_ring, nodes, per_node)
            .map_err(|e| LabError::Wrong(format!("the flat ring on {layout} stopped: {e}")))?;
        let flat: usize = flat.crossed.iter().map(|c| c.bytes).sum();
        if let Some(why) = judge_bytes(&probed.crossed, flat, nodes, per_node) {
            return Err(LabError::Wrong(why));
        }
        let yours: usize = probed.crossed.iter().map(|c| c.bytes).sum();
        said.push(format!(
            "{layout}: exact sums, {yours} bytes across nodes (flat ring: {flat})"
        ));
    }
    Ok(said.join("; "))
}

#[cfg(test)]
mod tests;
