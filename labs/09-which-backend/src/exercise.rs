//! Lab 9, the file you edit: your guesses, written *before* you run the lab.
//!
//! For each situation (a row of the decision table), which backend do you
//! expect to be fastest on this machine, and why? The program measures every
//! backend on the same job and prints your guess beside what it found and
//! beside the course's rule of thumb (Gloo for CPU tensors, NCCL for GPU
//! tensors, MPI where there is InfiniBand without IPoIB).
//!
//! What `cargo lab check 9` proves: every row has exactly one guess, each with
//! a reason of a sentence, and no guess names a backend that cannot run its
//! row at all. It does not judge your picks: the run does (`cargo lab 9`).

// Until the TODO is done the imports below are unused; delete this line when
// you have finished.
#![allow(unused_imports)]

use labkit::LabError;

use crate::{Guess, Pick, Row};

// ANCHOR: guesses
/// One guess per [`Row`]: `Guess { row: Row::SmallCpu, pick: Pick::Gloo, why: "…" }`.
/// Picks: `Pick::Gloo`, `Pick::Mpi`, `Pick::ReferenceShm`, `Pick::ReferenceTcp`,
/// `Pick::Nccl`, or `Pick::None` for "nothing can run this here".
pub fn guesses() -> Result<Vec<Guess>, LabError> {
    // TODO(lab 09): one guess for each of Row::SmallCpu, Row::LargeCpu,
    // Row::DdpCpu, Row::GpuTensors and Row::AcrossHosts, each with a reason of a
    // sentence (what makes that backend win there?).
    Err(labkit::todo(9, "guesses", file!()))
}
// ANCHOR_END: guesses
