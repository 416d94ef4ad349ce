//! Each named mistake, fed to the probe as a learner would write it.

use super::*;
use collectives::algorithms::{split_pair, sub_mod};
use collectives::transport::Sink;

/// Reduces into its own block r at every step while sending block r − 1:
/// the left neighbour's copy of one block arrives at every step.
fn rs_same_blocks_every_step(
    p: &mut TaggedTransport<'_>,
    buf: &mut [u8],
    blocks: &[Range<usize>],
    dtype: DType,
    op: ReduceOp,
) -> Result<()> {
    let (r, n) = (p.rank(), p.world());
    for _ in 0..n - 1 {
        let (out, acc) = split_pair(buf, blocks[sub_mod(r, 1, n)].clone(), blocks[r].clone())?;
        let sink = Sink::Reduce {
            dst: acc,
            dtype,
            op,
        };
        p.sendrecv((r + 1) % n, out, sub_mod(r, 1, n), sink)?;
    }
    Ok(())
}

/// The all-gather's indices in the reduce-scatter (send r − s, reduce into
/// r − s − 1): every rank finishes the block after its own.
fn rs_shifted_by_one(
    p: &mut TaggedTransport<'_>,
    buf: &mut [u8],
    blocks: &[Range<usize>],
    dtype: DType,
    op: ReduceOp,
) -> Result<()> {
    let (r, n) = (p.rank(), p.world());
    for s in 0..n - 1 {
        let send = blocks[sub_mod(r, s, n)].clone();
        let recv = blocks[sub_mod(r, s + 1, n)].clone();
        let (out, acc) = split_pair(buf, send, recv)?;
        let sink = Sink::Reduce {
            dst: acc,
            dtype,
            op,
        };
        p.sendrecv((r + 1) % n, out, sub_mod(r, 1, n), sink)?;
    }
    Ok(())
}

/// Sends and receives the same block: `split_pair` must say so, not panic.
fn rs_same_block_both_ways(
    p: &mut TaggedTransport<'_>,
    buf: &mut [u8],
    blocks: &[Range<usize>],
    dtype: DType,
    op: ReduceOp,
) -> Result<()> {
    let (r, n) = (p.rank(), p.world());
    for s in 0..n - 1 {
        let b = blocks[sub_mod(r, s + 1, n)].clone();
        let (out, acc) = split_pair(buf, b.clone(), b)?;
        let sink = Sink::Reduce {
            dst: acc,
            dtype,
            op,
        };
        p.sendrecv((r + 1) % n, out, sub_mod(r, 1, n), sink)?;
    }
    Ok(())
}

/// The right all-gather indices, but reducing what arrives instead of copying it.
fn ag_reduces(p: &mut TaggedTransport<'_>, buf: &mut [u8], blocks: &[Range<usize>]) -> Result<()> {
    let (r, n) = (p.rank(), p.world());
    for s in 0..n - 1 {
        let send = blocks[sub_mod(r, s, n)].clone();
        let recv = blocks[sub_mod(r, s + 1, n)].clone();
        let (out, acc) = split_pair(buf, send, recv)?;
        let sink = Sink::Reduce {
            dst: acc,
            dtype: DType::F64,
            op: ReduceOp::Sum,
        };
        p.sendrecv((r + 1) % n, out, sub_mod(r, 1, n), sink)?;
    }
    Ok(())
}

/// Every rank receives from its left before it sends to its right: each
/// waits for a message its neighbour will only send after its own receive
/// (issue 25's deadlocked ring).
fn rs_receive_before_send(
    p: &mut TaggedTransport<'_>,
    buf: &mut [u8],
    blocks: &[Range<usize>],
    dtype: DType,
    op: ReduceOp,
) -> Result<()> {
    let (r, n) = (p.rank(), p.world());
    for s in 0..n - 1 {
        let send = blocks[sub_mod(r, s + 1, n)].clone();
        let recv = blocks[sub_mod(r, s + 2, n)].clone();
        let (out, acc) = split_pair(buf, send, recv)?;
        let sink = Sink::Reduce {
            dst: acc,
            dtype,
            op,
        };
        p.recv(sub_mod(r, 1, n), sink)?;
        p.send((r + 1) % n, out)?;
    }
    Ok(())
}

/// The binomial tree without renumbering: right for root 0 only.
fn bc_not_renumbered(p: &mut TaggedTransport<'_>, buf: &mut [u8], _root: usize) -> Result<()> {
    tree::broadcast(p, buf, 0)
}

/// Rank v waits for v − 1, but only the root sends: a chain that never starts.
fn bc_waits_for_left_neighbour(
    p: &mut TaggedTransport<'_>,
    buf: &mut [u8],
    root: usize,
) -> Result<()> {
    let (r, n) = (p.rank(), p.world());
    let v = sub_mod(r, root, n);
    if v == 0 {
        for to in 1..n {
            p.send((to + root) % n, buf)?;
        }
    } else {
        p.recv((v - 1 + root) % n, Sink::Copy(buf))?;
    }
    Ok(())
}

fn with(f: impl FnOnce(&mut Pieces)) -> Pieces {
    let mut p = Pieces::builtin();
    f(&mut p);
    p
}

fn assert_named(said: Option<String>, key: &str, words: &[&str]) {
    let said = said.unwrap_or_else(|| panic!("no diagnosis, expected {key}"));
    assert!(said.ends_with(&format!("hint: {key}")), "{said}");
    for w in words {
        assert!(said.contains(w), "missing {w:?} in: {said}");
    }
}

#[test]
fn the_solution_has_nothing_to_diagnose() {
    assert!(diagnose(Pieces::builtin()).is_empty());
}

#[test]
fn a_copy_added_twice_is_named_block_twice() {
    let p = with(|p| p.reduce_scatter = rs_same_blocks_every_step);
    // Rank 0's block 0: its own copy (1) + rank 2's block twice (16 + 16).
    assert_named(
        reduce_scatter(p),
        "block-twice",
        &[
            "rank 0 block 0 element 0: got 33, expected 21",
            "rank 2's copy of the block was added twice",
        ],
    );
}

#[test]
fn indices_shifted_by_one_finish_the_wrong_block() {
    let p = with(|p| p.reduce_scatter = rs_shifted_by_one);
    assert_named(
        reduce_scatter(p),
        "ring-wrong-block",
        &["rank 0 block 0 element 0", "block 1 is the one it finished"],
    );
}

#[test]
fn the_same_block_sent_and_received_is_an_error_not_a_panic() {
    let p = with(|p| p.reduce_scatter = rs_same_block_both_ways);
    assert_named(reduce_scatter(p), "same-block", &["overlap"]);
}

#[test]
fn an_all_gather_that_reduces_is_named() {
    let p = with(|p| p.all_gather = ag_reduces);
    assert_named(
        all_gather(p),
        "gather-reduces",
        &["rank 0 block 1 element 0", "expected 2", "added"],
    );
}

#[test]
fn a_tree_that_ignores_the_root_is_named() {
    let p = with(|p| p.broadcast = bc_not_renumbered);
    assert_named(broadcast(p), "tree-root", &["from root 2", "expected 3"]);
}

#[test]
fn a_broadcast_that_waits_forever_is_named_within_seconds() {
    let p = with(|p| p.broadcast = bc_waits_for_left_neighbour);
    let t = std::time::Instant::now();
    assert_named(
        broadcast(p),
        "tree-peers",
        &["from root 0", "did not finish"],
    );
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
}

#[test]
fn a_ring_that_receives_before_it_sends_is_named_within_seconds() {
    let p = with(|p| p.reduce_scatter = rs_receive_before_send);
    let t = std::time::Instant::now();
    assert_named(
        reduce_scatter(p),
        "ring-unmatched",
        &["reduce-scatter", "did not finish"],
    );
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
}
