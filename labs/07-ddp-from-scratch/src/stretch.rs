//! Lab 7's stretch goal, the file you edit (optional: lab 7 is done when
//! `cargo lab check 7` passes): **which gradients share a bucket**.
//!
//! In step 2 trainers' `Ddp` handed you buckets already formed; here you form
//! them, as PyTorch DDP does when it wraps a model. Visit the parameters in
//! the order their gradients become ready (`order`: for a model whose layers
//! run in registration order, the reverse of it), and put each into the open
//! bucket of its kind (dtype and device: one flat tensor holds one kind). A
//! bucket closes once it holds *at least* its limit in bytes, the parameter
//! that crossed the limit included. The first bucket of each kind has limit
//! `limits[0]`, its second `limits[1]`, and so on; the last limit repeats.
//!
//! **Contract.** `params[i]` is parameter i's size in bytes and its kind;
//! `order` is a permutation of `0..params.len()`; `limits` is not empty (the
//! check gives only such; the solution also rejects the others with an
//! error). Return the buckets as lists of parameter indices, each in the
//! order it was filled, the buckets in the order they closed, then the
//! buckets still open at the end, in the order their kinds first appeared.
//!
//! **To think through.** Why should the first bucket be small (PyTorch: 1
//! MiB) and the later ones large (25 MiB)? What goes wrong for overlap if the
//! buckets follow registration order instead of ready order?
//!
//! **What the check proves** (`cargo lab check 7 --stretch`): on the lab's
//! CNN with step 3's 64 KiB buckets and with PyTorch's defaults, and on small
//! models that tell the mistakes apart (limits met exactly, a parameter that
//! crosses the limit, two kinds interleaved), your buckets are PyTorch's:
//! every parameter exactly once, one kind per bucket, the same members in the
//! same order. It names buckets filled in registration order, a crossing
//! parameter left out, a limit treated as "more than", and the first limit
//! used for every bucket or for none.

// Until the TODO is done the imports and arguments below are unused; delete
// this line when you have finished, and the compiler will tell you what is left.
#![allow(unused_imports, unused_variables)]

use lab07_ddp_from_scratch::buckets::Key;
use trainers::{Error, Result};

/// This file, as the TODO error names it (`file!()` would name it from
/// tests/, which includes it).
const FILE: &str = "labs/07-ddp-from-scratch/src/stretch.rs";

// ANCHOR: assign
/// The buckets of `params` (bytes and kind), visited in `order`, closed at
/// `limits` (the first bucket of each kind at `limits[0]`, …; the last repeats).
pub fn assign(
    params: &[(usize, Key)],
    order: &[usize],
    limits: &[usize],
) -> Result<Vec<Vec<usize>>> {
    // TODO(lab 07 stretch): the bucket assignment. Stuck? `cargo lab hint 7 --stretch`.
    Err(Error::Seam(Box::new(labkit::stretch_todo(
        7,
        "the bucket assignment",
        FILE,
    ))))
}
// ANCHOR_END: assign
