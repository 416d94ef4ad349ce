//! Peer benchmarks: ringside's reference all_reduce against the real
//! libraries (OpenMPI over shared memory, Gloo over TCP), in the same run.
//!
//! The peer programs live in `benches/peers/` (C for MPI, C++ for Gloo) and
//! are compiled by `build.rs`. Every implementation (the two peers and
//! `ringside sweep`), each an [`Impl`], follows one timing rule and prints
//! one JSON line per message size (a results-file [`Record`] from the
//! `measure` crate); the `peers` binary launches them
//! ([`child`]), collects those lines and compares them against the project's
//! targets ([`report`]). See `benches/README.md` for the timing rule.
#![deny(missing_docs)]

pub mod child;
pub mod error;
pub mod impls;
pub mod memcpy;
pub mod report;
pub mod sizes;

pub use error::{Error, Result};
pub use impls::Impl;
pub use measure::Record;
pub use sizes::Sweep;
