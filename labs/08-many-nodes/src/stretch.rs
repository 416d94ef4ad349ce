//! Lab 8's stretch goal, the file you edit (optional: lab 8 is done when
//! `cargo lab check 8` passes): a **hierarchical all-reduce**.
//!
//! Between nodes the link is the slow part. A flat ring over 2 nodes × 2 ranks
//! runs 0 → 1 → 2 → 3 → 0: two of its four links cross the node boundary, and
//! each carries 2(n − 1)/n of the buffer. NCCL and Horovod reduce in two
//! levels instead, so that only one rank per node, its leader (local rank 0),
//! ever talks to other nodes:
//!
//! 1. inside each node, reduce every rank's buffer into the leader's;
//! 2. among the leaders only, all-reduce those node sums;
//! 3. inside each node, the leader sends the total to the rest of its node.
//!
//! **Contract.** Ranks r with equal r / `per_node` share a node (launchers
//! number a node's ranks consecutively). On return every rank's `buf` holds
//! `op` over every rank's `buf` (the backend divides for `Avg` afterwards;
//! pass `op` on as it is). No rank but a node's local rank 0 sends to
//! another node. `per_node` divides the world size (the backend checks).
//!
//! **To think through.** Who is the leader of rank r's node, and does every
//! rank of the node compute the same one? Which ranks form the world of the
//! all-reduce in step 2, and what does a rank that is not in it do meanwhile?
//!
//! **What the check proves** (`cargo lab check 8 --stretch`): inside the
//! reference backend on thread ranks playing 2 nodes × 2, 2 × 3 and 3 × 2,
//! with values chosen so that a wrong sum says whose values it counted how
//! often, every element on every rank is the exact sum; only leaders send
//! across node boundaries, and fewer bytes cross them than with the flat ring
//! (both counts printed). A rank that waits 3 s for a message is a hang,
//! named.
//!
//! Your tools: [`Group`] views a subset of the ranks as a world of its own
//! (`Group::new(&mut *p.t, members)`, wrapped as a [`TaggedTransport`] with
//! `p.tag`), and the backend's algorithms, which run on any such world:
//! [`ring::all_reduce`], [`tree::reduce`], [`tree::broadcast`].

// Until the TODO is done the imports and arguments below are unused; delete
// this line when you have finished, and the compiler will tell you what is left.
#![allow(unused_imports, unused_variables)]

use collectives::algorithms::group::Group;
use collectives::algorithms::{TaggedTransport, ring, tree};
use collectives::{DType, ReduceOp, Result};

/// This file, as the TODO error names it (`file!()` would name it from
/// tests/, which includes it).
const FILE: &str = "labs/08-many-nodes/src/stretch.rs";

// ANCHOR: hierarchical
/// The hierarchical all-reduce of `buf` (`dtype` elements), in place, over
/// nodes of `per_node` consecutive ranks.
pub fn all_reduce(
    p: &mut TaggedTransport<'_>,
    buf: &mut [u8],
    dtype: DType,
    op: ReduceOp,
    per_node: usize,
) -> Result<()> {
    // TODO(lab 08 stretch): reduce in the node, all-reduce among leaders,
    // broadcast in the node. Stuck? `cargo lab hint 8 --stretch`.
    Err(labkit::stretch_todo(8, "the hierarchical all-reduce", FILE).into_collective())
}
// ANCHOR_END: hierarchical
