//! Binomial-tree broadcast and reduce, rooted anywhere.
//!
//! Ranks are renumbered relative to the root (v = (rank − root) mod n). In a
//! broadcast, v receives from v minus its lowest set bit and forwards to
//! v + 2^k for every 2^k below that bit; a reduce runs the same tree upward.
//! ⌈log2 n⌉ rounds, each moving the whole buffer: latency-friendly.

use super::{TaggedTransport, sub_mod};
use crate::element::{DType, ReduceOp};
use crate::error::Result;
use crate::transport::Sink;

// ANCHOR: broadcast
/// The lowest set bit of v, or the first power of two ≥ n for the root.
fn span_of(v: usize, n: usize) -> usize {
    if v == 0 {
        n.next_power_of_two()
    } else {
        v & v.wrapping_neg()
    }
}

/// Broadcasts `buf` from `root` (in place: the root's `buf` is the source).
pub fn broadcast(p: &mut TaggedTransport<'_>, buf: &mut [u8], root: usize) -> Result<()> {
    let (r, n) = (p.rank(), p.world());
    let v = sub_mod(r, root, n);
    let span = span_of(v, n);
    if v != 0 {
        p.recv((v - span + root) % n, Sink::Copy(buf))?;
    }
    let mut m = span / 2;
    while m >= 1 {
        if v + m < n {
            p.send((v + m + root) % n, buf)?;
        }
        m /= 2;
    }
    Ok(())
}
// ANCHOR_END: broadcast

/// Reduces every rank's `acc` into the root's `acc`. On other ranks `acc` is
/// clobbered with partial results, so callers pass scratch there (`Avg` is
/// left as a sum; the caller divides).
pub fn reduce(
    p: &mut TaggedTransport<'_>,
    acc: &mut [u8],
    dtype: DType,
    op: ReduceOp,
    root: usize,
) -> Result<()> {
    let (r, n) = (p.rank(), p.world());
    let v = sub_mod(r, root, n);
    let span = span_of(v, n);
    let mut m = 1;
    while m < span {
        if v + m < n {
            // Children are folded in a fixed order, so float results repeat run to run.
            p.recv(
                (v + m + root) % n,
                Sink::Reduce {
                    dst: acc,
                    dtype,
                    op,
                },
            )?;
        }
        m *= 2;
    }
    if v != 0 {
        p.send((v - span + root) % n, acc)?;
    }
    Ok(())
}
