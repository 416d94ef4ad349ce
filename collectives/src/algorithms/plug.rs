//! A slot for all_reduce and broadcast algorithms written outside this crate,
//! run *inside* the reference backend: the workshop's lab 6 plugs a learner's
//! ring and tree in here, so the same validation, agreement round, abort on
//! error and conformance suite judge them as judge the backend's own.
//!
//! [`Builtin`] is what the reference backend itself runs for `--algo ring`
//! and for every broadcast: the ring of [`super::ring`] and the binomial tree
//! of [`super::tree`]. [`crate::plug_check`] judges a plug by the conformance
//! suite.

use super::{TaggedTransport, ring, tree};
use crate::element::{DType, ReduceOp};
use crate::error::Result;

// ANCHOR: plug
/// all_reduce and broadcast over the backend's tagged transport, in place on
/// host bytes. The backend has already checked the buffers, run the agreement
/// round (every rank called the same collective with the same shape) and copied
/// an out-of-place input into `buf`; afterwards it divides for `Avg` (pass `op`
/// to [`crate::transport::Sink::Reduce`] as it is: `Avg` adds).
pub trait Plug: Send + Sync {
    /// A name for charts and messages (`your ring`).
    fn name(&self) -> &str;
    /// Leaves the reduction of every rank's `buf` in every rank's `buf`.
    fn all_reduce(
        &self,
        p: &mut TaggedTransport<'_>,
        buf: &mut [u8],
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()>;
    /// Copies `root`'s `buf` into every rank's `buf`.
    fn broadcast(&self, p: &mut TaggedTransport<'_>, buf: &mut [u8], root: usize) -> Result<()>;
}
// ANCHOR_END: plug

/// The reference backend's own: ring all_reduce, binomial-tree broadcast.
#[derive(Clone, Copy, Debug, Default)]
pub struct Builtin;

impl Plug for Builtin {
    fn name(&self) -> &str {
        "reference ring + tree"
    }
    fn all_reduce(
        &self,
        p: &mut TaggedTransport<'_>,
        buf: &mut [u8],
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        ring::all_reduce(p, buf, dtype, op)
    }
    fn broadcast(&self, p: &mut TaggedTransport<'_>, buf: &mut [u8], root: usize) -> Result<()> {
        tree::broadcast(p, buf, root)
    }
}
