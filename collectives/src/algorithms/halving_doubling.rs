//! Recursive halving-doubling all_reduce (Rabenseifner's algorithm).
//!
//! Reduce-scatter by recursive halving: at distance d = p/2, p/4, …, 1 each
//! participant swaps half of its current range with partner `v XOR d` and
//! reduces the half it keeps, ending with block v. Then all-gather by recursive
//! doubling retraces the steps. log2(p) rounds each way and the ring's
//! bandwidth term, so it suits medium messages. Non-powers-of-two fold in and
//! out as in recursive doubling.

use std::ops::Range;

use super::recursive_doubling::Fold;
use super::{TaggedTransport, partition, split_pair};
use crate::element::{DType, ReduceOp};
use crate::error::Result;
use crate::transport::Sink;

fn span(blocks: &[Range<usize>], lo: usize, hi: usize) -> Range<usize> {
    blocks[lo].start..blocks[hi - 1].end
}

/// In-place halving-doubling all_reduce of `buf`; `tmp` must be as long as `buf`
/// (`Avg` is left as a sum; the caller divides).
pub fn all_reduce(
    p: &mut TaggedTransport<'_>,
    buf: &mut [u8],
    tmp: &mut [u8],
    dtype: DType,
    op: ReduceOp,
) -> Result<()> {
    let fold = Fold::new(p.world());
    fold.fold_in(p, buf, tmp, dtype, op)?;
    if let Some(v) = fold.vrank(p.rank()) {
        let blocks = partition(buf.len() / dtype.size(), fold.p, dtype.size());
        // Reduce-scatter: halve the range we own at every step.
        let (mut lo, mut hi) = (0, fold.p);
        let mut d = fold.p / 2;
        while d >= 1 {
            let partner = fold.real(v ^ d);
            let mid = (lo + hi) / 2;
            let (keep, give) = if v & d == 0 {
                ((lo, mid), (mid, hi))
            } else {
                ((mid, hi), (lo, mid))
            };
            let (out, acc) = split_pair(
                buf,
                span(&blocks, give.0, give.1),
                span(&blocks, keep.0, keep.1),
            )?;
            p.sendrecv(
                partner,
                out,
                partner,
                Sink::Reduce {
                    dst: acc,
                    dtype,
                    op,
                },
            )?;
            (lo, hi) = keep;
            d /= 2;
        }
        // All-gather: double the range back, mirroring the halving.
        let mut d = 1;
        while d < fold.p {
            let partner = fold.real(v ^ d);
            let width = hi - lo;
            let other = if v & d == 0 {
                (hi, hi + width)
            } else {
                (lo - width, lo)
            };
            let (out, into) =
                split_pair(buf, span(&blocks, lo, hi), span(&blocks, other.0, other.1))?;
            p.sendrecv(partner, out, partner, Sink::Copy(into))?;
            (lo, hi) = (lo.min(other.0), hi.max(other.1));
            d *= 2;
        }
    }
    fold.fold_out(p, buf)
}
