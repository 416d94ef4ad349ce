//! ringside's collectives: one [`Communicator`] abstraction, the rendezvous store,
//! the launcher, and the backends behind it.
//!
//! A communicator is picked at run time by [`Backend`] name, so one benchmark
//! loop can drive every library. All collectives take [`Buffer`]/[`BufferMut`]
//! views, which carry dtype, length and location, so the trait stays
//! object-safe (`Box<dyn Communicator>`).
//!
//! # Buffer shapes
//! `count` is the per-rank element count; `n` is the world size. In-place forms
//! follow nccl-tests: the input lives inside the output buffer.
//!
//! | collective | input (out-of-place) | output | in-place: input is |
//! |---|---|---|---|
//! | all_reduce | count | count | output |
//! | broadcast | count, read at root only | count | output at root |
//! | reduce | count | count, written at root only | output (non-roots left unchanged) |
//! | all_gather | count | n·count | `output[rank·count..][..count]` |
//! | reduce_scatter | n·count | count (n·count in place) | output; result lands at `output[rank·count..]` |
//! | all_to_all | n·count | n·count | output |
//! | gather | count | n·count at root (ignored elsewhere) | `output[rank·count..]` on every rank |
//! | scatter | n·count, read at root only | count (n·count in place) | output at root; result at `output[rank·count..]` |
//!
//! After an in-place reduce_scatter or scatter, the blocks of the output other
//! than the caller's own are unspecified.
#![deny(missing_docs)]

pub mod algorithms;
mod aligned;
pub mod backends;
pub mod bench;
pub mod buffer;
pub mod collective;
pub mod conformance;
mod copy;
pub mod deadline;
pub mod element;
pub mod error;
pub mod flight;
pub mod job;
pub mod launch;
pub mod plug_check;
pub mod queued;
pub mod rendezvous;
mod sys;
pub mod testing;
pub mod thread_ranks;
pub mod transport;

use std::fmt;

pub use buffer::{Buffer, BufferMut, Location};
pub use element::{DType, Element, ReduceOp};
pub use error::{Error, Result};

/// The libraries a [`Communicator`] can be backed by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    /// ringside's own pure-Rust algorithms over TCP or shared memory.
    Reference,
    /// Facebook's Gloo (libgloo-dev).
    Gloo,
    /// MPI (OpenMPI or MPICH) through the `mpi` crate.
    Mpi,
    /// NVIDIA NCCL through cudarc.
    Nccl,
}

impl Backend {
    /// Every backend, in a fixed order.
    pub const ALL: [Backend; 4] = [
        Backend::Reference,
        Backend::Gloo,
        Backend::Mpi,
        Backend::Nccl,
    ];

    /// The lowercase name used on command lines.
    pub const fn name(self) -> &'static str {
        match self {
            Backend::Reference => "reference",
            Backend::Gloo => "gloo",
            Backend::Mpi => "mpi",
            Backend::Nccl => "nccl",
        }
    }

    /// Parses a backend name (`ref` is accepted for `reference`).
    pub fn parse(s: &str) -> Option<Backend> {
        match s.to_ascii_lowercase().as_str() {
            "reference" | "ref" => Some(Backend::Reference),
            "gloo" => Some(Backend::Gloo),
            "mpi" => Some(Backend::Mpi),
            "nccl" => Some(Backend::Nccl),
            _ => None,
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The operations a communicator offers, as named in headers, errors,
/// benchmarks and results files (the `measure` crate's, so results readers
/// share them without this crate). How to size, run and check each one is in
/// [`collective`].
pub use measure::Collective;

/// The input of a collective: a separate buffer, or "already in the output"
/// (the in-place form; see the crate docs for where in the output it sits).
#[derive(Debug)]
pub enum Input<'a> {
    /// The input sits inside the output buffer.
    InPlace,
    /// A separate input buffer.
    Buffer(Buffer<'a>),
}

impl<'a> From<Buffer<'a>> for Input<'a> {
    fn from(b: Buffer<'a>) -> Self {
        Input::Buffer(b)
    }
}

/// A group of ranks that run collectives together.
///
/// Every rank must call the same collectives in the same order with matching
/// counts, dtypes, ops and roots; the reference backend checks this and returns
/// [`Error::Mismatch`] on every rank instead of hanging or corrupting data.
pub trait Communicator: Send {
    /// Which library serves this communicator.
    fn backend(&self) -> Backend;
    /// This process's rank, `0..world_size`.
    fn rank(&self) -> usize;
    /// Number of ranks.
    fn world_size(&self) -> usize;
    /// Everyone's output becomes `op` over everyone's input.
    fn all_reduce(&self, input: Input<'_>, output: &mut BufferMut<'_>, op: ReduceOp) -> Result<()>;
    /// Everyone's output becomes the root's input.
    fn broadcast(&self, input: Input<'_>, output: &mut BufferMut<'_>, root: usize) -> Result<()>;
    /// The root's output becomes `op` over everyone's input.
    fn reduce(
        &self,
        input: Input<'_>,
        output: &mut BufferMut<'_>,
        op: ReduceOp,
        root: usize,
    ) -> Result<()>;
    /// Everyone's output becomes all inputs concatenated in rank order.
    fn all_gather(&self, input: Input<'_>, output: &mut BufferMut<'_>) -> Result<()>;
    /// Rank r's output becomes block r of `op` over everyone's input.
    fn reduce_scatter(
        &self,
        input: Input<'_>,
        output: &mut BufferMut<'_>,
        op: ReduceOp,
    ) -> Result<()>;
    /// Block j of rank r's input becomes block r of rank j's output.
    fn all_to_all(&self, input: Input<'_>, output: &mut BufferMut<'_>) -> Result<()>;
    /// The root's output becomes all inputs concatenated in rank order.
    fn gather(&self, input: Input<'_>, output: &mut BufferMut<'_>, root: usize) -> Result<()>;
    /// Rank r's output becomes block r of the root's input.
    fn scatter(&self, input: Input<'_>, output: &mut BufferMut<'_>, root: usize) -> Result<()>;
    /// Returns once every rank has entered the barrier.
    fn barrier(&self) -> Result<()>;
    /// Sends `buf` to `peer`, which must post a matching [`Communicator::recv`].
    fn send(&self, buf: &Buffer<'_>, peer: usize) -> Result<()>;
    /// Receives into `buf` from `peer`; length and dtype must match the send.
    fn recv(&self, buf: &mut BufferMut<'_>, peer: usize) -> Result<()>;
}
