//! Lab 6's stretch goal, the file you edit (optional: lab 6 is done when
//! `cargo lab check 6` passes): a **bidirectional ring** all-reduce.
//!
//! Your ring sends every byte one way round: at every step each rank's link to
//! its right neighbour is busy and the link from that neighbour back to it
//! carries nothing. A link carries both ways at once (it is full duplex). Use
//! both directions: cut the buffer in two halves of whole elements and reduce
//! one half round the ring rank → rank + 1, the other round the ring
//! rank → rank − 1.
//!
//! **Contract.** As the exercise's `all_reduce`: on return every rank's `buf`
//! holds `op` over every rank's `buf` (the backend divides for `Avg`
//! afterwards; pass `op` to [`Sink::Reduce`] as it is). In total every rank
//! sends no more bytes than one ring would, and sends bytes to *both*
//! neighbours.
//!
//! **To think through.** Which half is which, when the element count is odd?
//! The ring that runs the other way is the same ring with the ranks numbered
//! backwards: which block does rank r send in step s, and to whom, so that
//! after the last step rank r holds the finished block r of that half?
//!
//! **What the check proves** (`cargo lab check 6 --stretch`): on 3 ranks, with
//! values chosen so that a wrong element says which ranks' copies it holds,
//! every element is the sum; each rank sent to both neighbours and no more
//! than a ring's bytes; then the conformance suite (every dtype and op, sizes
//! that split unevenly, in and out of place) on 2 to 4 ranks.
//!
//! Your tools are the exercise's: [`TaggedTransport`] (`p.sendrecv`, …),
//! [`partition`], [`split_pair`], [`sub_mod`]; and the backend's one-way ring,
//! `collectives::algorithms::ring::{reduce_scatter_blocks, all_gather_blocks}`.

// Until the TODO is done the imports and arguments below are unused; delete
// this line when you have finished, and the compiler will tell you what is left.
#![allow(unused_imports, unused_variables)]

use collectives::algorithms::{TaggedTransport, partition, ring, split_pair, sub_mod};
use collectives::transport::Sink;
use collectives::{DType, ReduceOp, Result};

/// This file, as the TODO error names it (`file!()` would name it from
/// tests/, which includes it).
const FILE: &str = "labs/06-collectives-from-scratch/src/stretch.rs";

// ANCHOR: bidirectional
/// The bidirectional ring all-reduce of `buf` (`dtype` elements), in place.
pub fn all_reduce(
    p: &mut TaggedTransport<'_>,
    buf: &mut [u8],
    dtype: DType,
    op: ReduceOp,
) -> Result<()> {
    // TODO(lab 06 stretch): one half each way. Stuck? `cargo lab hint 6 --stretch`.
    Err(labkit::stretch_todo(6, "the bidirectional ring all-reduce", FILE).into_collective())
}
// ANCHOR_END: bidirectional
