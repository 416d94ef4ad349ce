//! Lab 6, the file you edit: a ring all-reduce and a binomial-tree broadcast,
//! written on send/recv, that run *inside* the reference backend.
//!
//! The backend has already checked the buffers, made sure every rank called the
//! same collective with the same shape, and copied an out-of-place input into
//! `buf`; it divides for `Avg` afterwards. Your code only moves and reduces
//! bytes. What you get (`p` is a [`TaggedTransport`]):
//!
//! - `p.rank()`, `p.world()`;
//! - `p.send(to, &buf[range])`, `p.recv(from, Sink::Copy(&mut buf[range]))`;
//! - `p.recv(from, Sink::Reduce { dst: &mut buf[range], dtype, op })`: adds (or
//!   max, min, …) what arrives into `dst`, element by element, as it streams in;
//! - `p.sendrecv(to, &data, from, sink)`: both at once, which is what a ring
//!   step needs (everybody sending first and receiving second could deadlock);
//! - `split_pair(buf, src, dst)`: `&buf[src]` and `&mut buf[dst]` at once;
//! - `sub_mod(a, b, n)`: (a − b) mod n without underflow.
//!
//! Check it with `cargo lab check 6` (the conformance suite, 1 to 5 ranks),
//! time it with `cargo lab 6`.

// Until the TODOs are done the imports and arguments below are unused; delete
// this line when you have finished, and the compiler will tell you what is left.
#![allow(unused_imports, unused_variables)]

use std::ops::Range;

use collectives::algorithms::plug::Plug;
use collectives::algorithms::{TaggedTransport, partition, split_pair, sub_mod};
use collectives::transport::Sink;
use collectives::{DType, ReduceOp, Result};

/// Your algorithms, as the reference backend runs them.
pub struct YourAlgorithms;

impl Plug for YourAlgorithms {
    fn name(&self) -> &str {
        "your ring + tree"
    }

    fn all_reduce(
        &self,
        p: &mut TaggedTransport<'_>,
        buf: &mut [u8],
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        // One block (chunk) per rank, as equal as whole elements allow: block i
        // is buf[blocks[i].clone()].
        let blocks = partition(buf.len() / dtype.size(), p.world(), dtype.size());
        reduce_scatter(p, buf, &blocks, dtype, op)?;
        all_gather(p, buf, &blocks)
    }

    fn broadcast(&self, p: &mut TaggedTransport<'_>, buf: &mut [u8], root: usize) -> Result<()> {
        broadcast(p, buf, root)
    }
}

// ANCHOR: reduce_scatter
/// Ring reduce-scatter: afterwards block `rank` of `buf` holds the
/// reduction of every rank's copy of that block (the other blocks hold partial
/// results). In each of the n − 1 steps, send one block to the right
/// neighbour (rank + 1) while reducing the block arriving from the left one
/// (rank − 1) into your copy of it.
pub fn reduce_scatter(
    p: &mut TaggedTransport<'_>,
    buf: &mut [u8],
    blocks: &[Range<usize>],
    dtype: DType,
    op: ReduceOp,
) -> Result<()> {
    // TODO(lab 06): for s in 0..n-1, send block (rank − s − 1) mod n to the
    // right while receiving block (rank − s − 2) mod n from the left with
    // `Sink::Reduce`. `split_pair` gives you the block to send and the block to
    // reduce into at the same time.
    Err(labkit::todo(6, "reduce_scatter", file!()).into_collective())
}
// ANCHOR_END: reduce_scatter

// ANCHOR: all_gather
/// Ring all-gather: every rank starts with one finished block (the one
/// `reduce_scatter` left finished) and passes blocks around the ring until
/// every rank holds all n.
pub fn all_gather(
    p: &mut TaggedTransport<'_>,
    buf: &mut [u8],
    blocks: &[Range<usize>],
) -> Result<()> {
    // TODO(lab 06): for s in 0..n-1, send block (rank − s) mod n to the right
    // while receiving block (rank − s − 1) mod n from the left with `Sink::Copy`.
    Err(labkit::todo(6, "all_gather", file!()).into_collective())
}
// ANCHOR_END: all_gather

// ANCHOR: broadcast
/// Binomial-tree broadcast from `root`: renumber ranks so the root is 0
/// (v = (rank − root) mod n). Rank v receives once, from v minus its lowest
/// set bit, then forwards to v + 2^k for every 2^k below that bit (the root
/// forwards to every power of two below n), largest first. ⌈log2 n⌉ rounds.
pub fn broadcast(p: &mut TaggedTransport<'_>, buf: &mut [u8], root: usize) -> Result<()> {
    // TODO(lab 06): compute v; unless v == 0, receive `buf` from
    // ((v − lowest set bit of v) + root) mod n; then send `buf` to
    // (v + m + root) mod n for m = span/2, span/4, …, 1 where v + m < n
    // (span: v's lowest set bit, or n rounded up to a power of two for v = 0).
    // `v & v.wrapping_neg()` is v's lowest set bit.
    Err(labkit::todo(6, "broadcast", file!()).into_collective())
}
// ANCHOR_END: broadcast
