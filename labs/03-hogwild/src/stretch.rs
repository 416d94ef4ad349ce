//! Lab 3's stretch goal, the file you edit (optional: lab 3 is done when
//! `cargo lab check 3` passes): **local SGD's delta push** (Downpour SGD's
//! worker).
//!
//! Hogwild! writes every step into the shared parameters. Local SGD lets a
//! worker train a private copy for k steps and only then touch the shared
//! memory: it adds what its k steps changed, its *delta* (the private numbers
//! minus the snapshot it started from), into the shared parameters, in place
//! and without a lock, and starts its next k steps from what is shared now.
//! Meanwhile other workers push theirs into the same numbers.
//!
//! **Contract.** `shared`, `private` and `snapshot` hold one tensor per
//! parameter, in the same order and shapes, `f32` on the CPU; `shared` are
//! tensors over the shared region. Afterwards `shared[i]` holds its numbers
//! before the call plus this worker's delta (whatever other workers added
//! before survives), and the next round starts from the shared numbers:
//! `private[i]` and `snapshot[i]` both hold what `shared[i]` now holds. Write
//! into the tensors given (they are the memory the worker keeps), outside
//! autograd.
//!
//! **What the check proves** (`cargo lab check 3 --stretch`): one worker after
//! 3 local steps: the shared numbers are the snapshot plus the delta (to a few
//! units in the last place: the check redoes the arithmetic), and the
//! private copy and snapshot were re-taken; two workers from one snapshot: both
//! deltas land; a second push with no new steps adds nothing. It names a copy
//! that overwrites the other worker's delta, a snapshot that was not re-taken
//! (the next push would count the same steps twice) and a delta of the wrong
//! sign. The real Hogwild workers use trainers' own push (`cargo lab 3 --
//! --local-steps 5`).

// Until the TODO is done the imports and arguments below are unused; delete
// this line when you have finished, and the compiler will tell you what is left.
#![allow(unused_imports, unused_variables)]

use tch::Tensor;
use trainers::{Error, Result};

/// This file, as the TODO error names it (`file!()` would name it from
/// tests/, which includes it).
const FILE: &str = "labs/03-hogwild/src/stretch.rs";

// ANCHOR: push_delta
/// Adds this worker's delta into `shared` and starts the next round from it.
pub fn push_delta(shared: &[Tensor], private: &[Tensor], snapshot: &[Tensor]) -> Result<()> {
    // TODO(lab 03 stretch): the delta push. Stuck? `cargo lab hint 3 --stretch`.
    Err(Error::Seam(Box::new(labkit::stretch_todo(
        3,
        "local SGD's delta push",
        FILE,
    ))))
}
// ANCHOR_END: push_delta
