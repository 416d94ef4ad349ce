//! Lab 1, the file you edit: an all-reduce by hand.
//!
//! Every rank holds a buffer of numbers; afterwards every rank must hold the
//! element-wise sum over all ranks. Build it from point-to-point messages only.
//!
//! Check it with `cargo lab check 1`, run it with `cargo lab 1`. Stuck? `cargo
//! lab hint 1` gives one hint per call, each more concrete.

// Until the TODO is done the imports and arguments below are unused; delete this
// line when you have finished, and the compiler will tell you what is left over.
#![allow(unused_imports, unused_variables)]

use collectives::{Buffer, BufferMut, Communicator};
use labkit::LabError;

// ANCHOR: exercise
/// Replaces `values` on every rank by the element-wise sum of all ranks' `values`,
/// using only `send` and `recv`.
///
/// **Contract.** Every rank calls this with a buffer of the same length; on
/// return every rank's buffer holds the same sums, and its own numbers are
/// counted exactly once. A `recv` waits until the peer's matching `send`
/// arrives, so every `send` needs exactly one `recv` on the other side, in the
/// same order, or a rank waits forever (the check calls that out after 10 s).
///
/// **To think through.** No rank can know a sum before it has heard, directly
/// or not, from every other rank: where could the sum be formed first, and how
/// many messages does that take? Once one rank knows it, who still does not?
///
/// **What you have.** `comm.rank()`, `comm.world_size()`;
/// `comm.send(&Buffer::from_slice(values), peer)?` sends a whole slice to
/// `peer`; `comm.recv(&mut BufferMut::from_slice(&mut other), peer)?` fills
/// `other` (a slice as long as the sender's) with what `peer` sent.
///
/// **What the check proves.** On 1 to 5 ranks, for 1, 7 and 10,000 numbers,
/// every rank ends with exactly the sequential sum; when not, it names the
/// rank, the element, and the mistake if it recognises it.
pub fn all_reduce_by_hand(comm: &dyn Communicator, values: &mut [f64]) -> Result<(), LabError> {
    // TODO(lab 01): the all-reduce, from send and recv.
    Err(labkit::todo(1, "all_reduce_by_hand", file!()))
}
// ANCHOR_END: exercise
