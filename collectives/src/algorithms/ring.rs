//! Ring algorithms: reduce-scatter, all-gather, and all_reduce as the two in a row.
//!
//! Rank r sends to r+1 and receives from r−1. The buffer is cut into one block
//! per rank; each of the n−1 steps moves one block per rank, so every rank sends
//! and receives 2(n−1)/n of the buffer in an all_reduce — the bandwidth optimum.
//! Within a step the transport streams the block in pieces, so sending,
//! receiving and reducing overlap (the pipelining); received bytes are reduced
//! straight into the destination block with no staging copy on shared memory.

use std::ops::Range;

use super::{TaggedTransport, partition, split_pair, sub_mod};
use crate::element::{DType, ReduceOp};
use crate::error::Result;
use crate::transport::Sink;

// ANCHOR: reduce_scatter
/// In-place ring reduce-scatter: afterwards `buf[blocks[rank]]` holds the
/// reduction of every rank's block `rank`; other blocks hold partial sums.
pub fn reduce_scatter_blocks(
    p: &mut TaggedTransport<'_>,
    buf: &mut [u8],
    blocks: &[Range<usize>],
    dtype: DType,
    op: ReduceOp,
) -> Result<()> {
    let (r, n) = (p.rank(), p.world());
    let (right, left) = ((r + 1) % n, sub_mod(r, 1, n));
    for s in 0..n - 1 {
        let send = blocks[sub_mod(r, s + 1, n)].clone();
        let recv = blocks[sub_mod(r, s + 2, n)].clone();
        let (out, acc) = split_pair(buf, send, recv);
        p.sendrecv(
            right,
            out,
            left,
            Sink::Reduce {
                dst: acc,
                dtype,
                op,
            },
        )?;
    }
    Ok(())
}
// ANCHOR_END: reduce_scatter

// ANCHOR: all_gather
/// In-place ring all-gather: rank r's `buf[blocks[r]]` goes to every rank.
pub fn all_gather_blocks(
    p: &mut TaggedTransport<'_>,
    buf: &mut [u8],
    blocks: &[Range<usize>],
) -> Result<()> {
    let (r, n) = (p.rank(), p.world());
    let (right, left) = ((r + 1) % n, sub_mod(r, 1, n));
    for s in 0..n - 1 {
        let send = blocks[sub_mod(r, s, n)].clone();
        let recv = blocks[sub_mod(r, s + 1, n)].clone();
        let (out, into) = split_pair(buf, send, recv);
        p.sendrecv(right, out, left, Sink::Copy(into))?;
    }
    Ok(())
}
// ANCHOR_END: all_gather

/// In-place ring all_reduce of `buf` (`Avg` is left as a sum; the caller divides).
pub fn all_reduce(
    p: &mut TaggedTransport<'_>,
    buf: &mut [u8],
    dtype: DType,
    op: ReduceOp,
) -> Result<()> {
    let blocks = partition(buf.len() / dtype.size(), p.world(), dtype.size());
    reduce_scatter_blocks(p, buf, &blocks, dtype, op)?;
    all_gather_blocks(p, buf, &blocks)
}
