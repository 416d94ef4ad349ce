//! One test per mistake the check names: each feeds a mistaken hierarchical
//! all-reduce and asserts the message and the `hint:` key.

use super::*;
use collectives::algorithms::group::Group;
use collectives::algorithms::hierarchical;

/// `members` of `p`'s world as a world of their own, with `p`'s tag.
fn on<T>(
    p: &mut TaggedTransport<'_>,
    members: Vec<usize>,
    body: impl FnOnce(&mut TaggedTransport<'_>) -> Result<T>,
) -> Result<T> {
    let tag = p.tag;
    let mut g = Group::new(&mut *p.t, members)?;
    body(&mut TaggedTransport { t: &mut g, tag })
}

fn message(f: AllReduce) -> String {
    check(f).unwrap_err().to_string()
}

#[test]
fn the_backends_hierarchical_all_reduce_passes_with_fewer_bytes_across_nodes() {
    let said = check(hierarchical::all_reduce).unwrap();
    // 2 × 2, 12 i64: the flat ring crosses 2 boundaries with 3/4 of 96 bytes
    // (2 · 144); the 2 leaders' ring sends 96 bytes each way.
    assert!(
        said.contains("2 nodes × 2 ranks: exact sums, 192 bytes across nodes (flat ring: 288)"),
        "{said}"
    );
}

/// Every rank of a node joins the ring across nodes, each with its node's sum.
fn everyone_crosses(
    p: &mut TaggedTransport<'_>,
    buf: &mut [u8],
    dtype: DType,
    op: ReduceOp,
    per_node: usize,
) -> Result<()> {
    let leader = p.rank() / per_node * per_node;
    let node: Vec<usize> = (leader..leader + per_node).collect();
    on(p, node.clone(), |g| tree::reduce(g, buf, dtype, op, 0))?;
    on(p, node, |g| tree::broadcast(g, buf, 0))?;
    ring::all_reduce(p, buf, dtype, op)
}

#[test]
fn every_rank_in_the_leaders_all_reduce_is_named() {
    let msg = message(everyone_crosses);
    assert!(msg.contains("rank 0 got 2× the sum"), "{msg}");
    assert!(msg.contains("hint: only-leaders-cross"), "{msg}");
}

/// The leaders hold the total; nobody sends it back.
fn no_broadcast(
    p: &mut TaggedTransport<'_>,
    buf: &mut [u8],
    dtype: DType,
    op: ReduceOp,
    per_node: usize,
) -> Result<()> {
    let (r, n) = (p.rank(), p.world());
    let leader = r / per_node * per_node;
    on(p, (leader..leader + per_node).collect(), |g| {
        tree::reduce(g, buf, dtype, op, 0)
    })?;
    if r == leader {
        on(p, (0..n).step_by(per_node).collect(), |g| {
            ring::all_reduce(g, buf, dtype, op)
        })?;
    }
    Ok(())
}

#[test]
fn a_forgotten_broadcast_is_named() {
    let msg = message(no_broadcast);
    assert!(
        msg.contains("rank 1's element 0 counts ranks 0, 2, 3 not at all, rank 1 once"),
        "{msg}"
    );
    assert!(msg.contains("kept its partial sum"), "{msg}");
    assert!(msg.contains("hint: broadcast-back"), "{msg}");
}

/// Every rank takes itself for its node's leader: each waits in the reduce
/// for a message from a rank that waits too.
fn every_rank_leads(
    p: &mut TaggedTransport<'_>,
    buf: &mut [u8],
    dtype: DType,
    op: ReduceOp,
    per_node: usize,
) -> Result<()> {
    let r = p.rank();
    let leader = r / per_node * per_node;
    let node: Vec<usize> = (leader..leader + per_node).collect();
    on(p, node.clone(), |g| {
        tree::reduce(g, buf, dtype, op, r % per_node)
    })?;
    on(p, node, |g| tree::broadcast(g, buf, r % per_node))
}

#[test]
fn leaders_chosen_inconsistently_deadlock_is_named_within_seconds() {
    let start = std::time::Instant::now();
    let msg = message(every_rank_leads);
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "{:?}",
        start.elapsed()
    );
    assert!(msg.contains("on 2 nodes × 2 ranks stopped"), "{msg}");
    assert!(msg.contains("hint: one-leader-per-node"), "{msg}");
}

/// Nodes of ranks with equal r % per_node: a right sum, over the wrong links.
fn strided_nodes(
    p: &mut TaggedTransport<'_>,
    buf: &mut [u8],
    dtype: DType,
    op: ReduceOp,
    per_node: usize,
) -> Result<()> {
    let (r, n) = (p.rank(), p.world());
    let node: Vec<usize> = (r % per_node..n).step_by(per_node).collect();
    let leader = node[0];
    on(p, node.clone(), |g| tree::reduce(g, buf, dtype, op, 0))?;
    if r == leader {
        on(p, (0..per_node).collect(), |g| {
            ring::all_reduce(g, buf, dtype, op)
        })?;
    }
    on(p, node, |g| tree::broadcast(g, buf, 0))
}

#[test]
fn nodes_from_rank_mod_per_node_are_named() {
    let msg = message(strided_nodes);
    assert!(msg.contains("the sums are right"), "{msg}");
    assert!(
        msg.contains("rank 1, not its node's leader, sent 96 bytes"),
        "{msg}"
    );
    assert!(msg.contains("share r % 2, not r / 2"), "{msg}");
    assert!(msg.contains("hint: node-is-rank-div"), "{msg}");
}
