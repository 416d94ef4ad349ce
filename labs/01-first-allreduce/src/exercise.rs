//! Lab 1, the file you edit: an all-reduce by hand.
//!
//! Every rank holds a buffer of numbers; afterwards every rank must hold the
//! element-wise sum over all ranks. Build it from point-to-point messages only
//! (`comm.send`, `comm.recv`): every rank sends its buffer to rank 0, rank 0 adds
//! them up and sends the total back to everyone.
//!
//! Check it with `cargo lab check 1`, run it with `cargo lab 1`.

// Until the TODO is done the imports and arguments below are unused; delete this
// line when you have finished, and the compiler will tell you what is left over.
#![allow(unused_imports, unused_variables)]

use collectives::{Buffer, BufferMut, Communicator};
use labkit::LabError;

// ANCHOR: exercise
/// Replaces `values` on every rank by the element-wise sum of all ranks' `values`,
/// using only `send` and `recv`.
pub fn all_reduce_by_hand(comm: &dyn Communicator, values: &mut [f64]) -> Result<(), LabError> {
    // TODO(lab 01): on rank 0, receive every other rank's buffer and add it into
    // `values`, then send the total to every other rank. On the other ranks, send
    // `values` to rank 0 and receive the total back into it.
    //
    // The pieces: `comm.rank()`, `comm.world_size()`;
    // `comm.send(&Buffer::from_slice(values), peer)?` sends a whole slice to `peer`;
    // `comm.recv(&mut BufferMut::from_slice(&mut other), peer)?` fills `other` (a
    // `Vec<f64>` as long as `values`) with what `peer` sent.
    Err(labkit::todo(1, "all_reduce_by_hand", file!()))
}
// ANCHOR_END: exercise
