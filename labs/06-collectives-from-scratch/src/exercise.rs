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
//! - `split_pair(buf, src, dst)?`: `&buf[src]` and `&mut buf[dst]` at once (an
//!   error, not a panic, if the two ranges overlap);
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
/// Ring reduce-scatter over the n ranks (`n = p.world()`).
///
/// **Contract.** On return, block `rank` of `buf` (`buf[blocks[rank].clone()]`)
/// holds `op` over every rank's copy of that block; what the other blocks hold
/// does not matter. The ring has n − 1 steps; in each, every rank sends one
/// block to its right neighbour (rank + 1) and reduces one block arriving from
/// its left neighbour (rank − 1) into its own copy of that block.
///
/// **The invariant to find.** After step s, the block rank r has just reduced
/// into holds s + 2 copies added together: its own and s + 1 that travelled
/// round the ring. Which block is that, so that after the last step it is
/// block r? And which block must r send in step s so that its right
/// neighbour adds to something it has already added to?
///
/// **What the check proves.** `cargo lab check 6` runs your ring as the
/// reference backend's all_reduce through the conformance suite (every dtype
/// and op, sizes that split unevenly, 1 to 5 ranks); when it fails, it runs
/// this function alone on 3 ranks and tells you which rank's copies ended up
/// in which block.
pub fn reduce_scatter(
    p: &mut TaggedTransport<'_>,
    buf: &mut [u8],
    blocks: &[Range<usize>],
    dtype: DType,
    op: ReduceOp,
) -> Result<()> {
    // TODO(lab 06): the ring reduce-scatter. Stuck? `cargo lab hint 6`.
    Err(labkit::todo(6, "reduce_scatter", file!()).into_collective())
}
// ANCHOR_END: reduce_scatter

// ANCHOR: all_gather
/// Ring all-gather: the second half of the all-reduce.
///
/// **Contract.** On entry rank r holds one finished block, block r (what your
/// `reduce_scatter` left); on return every rank holds every finished block,
/// unchanged. n − 1 steps of the same ring: send one block right, receive one
/// from the left.
///
/// **To think through.** A finished block must not be reduced again, only
/// placed: which [`Sink`] is that? In step 0 a rank can only pass on what it
/// finished itself; in step s, what did it receive in step s − 1?
pub fn all_gather(
    p: &mut TaggedTransport<'_>,
    buf: &mut [u8],
    blocks: &[Range<usize>],
) -> Result<()> {
    // TODO(lab 06): the ring all-gather.
    Err(labkit::todo(6, "all_gather", file!()).into_collective())
}
// ANCHOR_END: all_gather

// ANCHOR: broadcast
/// Binomial-tree broadcast: `root`'s `buf` ends in every rank's `buf`.
///
/// **Contract.** Every rank receives at most once, before it sends; after
/// ⌈log2 n⌉ rounds every rank holds the root's bytes, for any root and any n
/// (not only powers of two). No rank may wait for a message nobody sends.
///
/// **To think through.** Number the ranks so that the root is 0. In round k the
/// ranks that already hold the data each pass it to one rank that does not:
/// who holds it after round 1, round 2? Written in binary, how does a rank's
/// number tell you whom it received from and whom it sends to? (The check runs
/// roots 0 and 2 on 5 ranks when it fails, and says who got whose value.)
pub fn broadcast(p: &mut TaggedTransport<'_>, buf: &mut [u8], root: usize) -> Result<()> {
    // TODO(lab 06): the binomial-tree broadcast.
    Err(labkit::todo(6, "broadcast", file!()).into_collective())
}
// ANCHOR_END: broadcast
