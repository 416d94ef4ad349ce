//! Recursive doubling all_reduce: log2(n) rounds, each a full-buffer exchange
//! with the partner `rank XOR 2^k`. Fewest rounds, so best for small messages.
//!
//! Non-powers-of-two: with p the largest power of two ≤ n and rem = n − p, the
//! first 2·rem ranks pair up; even ones hand their data to the odd neighbour and
//! sit out, then get the result back at the end.

use super::TaggedTransport;
use crate::element::{DType, ReduceOp, reduce_into};
use crate::error::Result;
use crate::transport::Sink;

/// Folding plan shared with halving-doubling for non-power-of-two worlds.
#[derive(Clone, Copy, Debug)]
pub struct Fold {
    /// Largest power of two ≤ world.
    pub p: usize,
    /// world − p.
    pub rem: usize,
}

impl Fold {
    /// The plan for `world` ranks.
    pub fn new(world: usize) -> Fold {
        let p = if world.is_power_of_two() {
            world
        } else {
            world.next_power_of_two() / 2
        };
        Fold { p, rem: world - p }
    }
    /// This rank's index among the p participants, or None if it sits out.
    pub fn vrank(&self, rank: usize) -> Option<usize> {
        if rank < 2 * self.rem {
            (rank % 2 == 1).then_some(rank / 2)
        } else {
            Some(rank - self.rem)
        }
    }
    /// The real rank of participant `v`.
    pub fn real(&self, v: usize) -> usize {
        if v < self.rem {
            2 * v + 1
        } else {
            v + self.rem
        }
    }

    /// Before the core algorithm: even ranks below 2·rem send `buf` to their odd
    /// neighbour, which reduces it in (using `tmp` as landing space).
    pub fn fold_in(
        &self,
        p: &mut TaggedTransport<'_>,
        buf: &mut [u8],
        tmp: &mut [u8],
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        let r = p.rank();
        if r < 2 * self.rem {
            if r % 2 == 0 {
                p.send(r + 1, buf)?;
            } else {
                p.recv(r - 1, Sink::Copy(tmp))?;
                reduce_into(dtype, op, buf, tmp);
            }
        }
        Ok(())
    }

    /// After the core algorithm: odd ranks below 2·rem return the result.
    pub fn fold_out(&self, p: &mut TaggedTransport<'_>, buf: &mut [u8]) -> Result<()> {
        let r = p.rank();
        if r < 2 * self.rem {
            if r % 2 == 0 {
                p.recv(r + 1, Sink::Copy(buf))?;
            } else {
                p.send(r - 1, buf)?;
            }
        }
        Ok(())
    }
}

/// In-place recursive-doubling all_reduce of `buf`; `tmp` must be as long as
/// `buf` (`Avg` is left as a sum; the caller divides).
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
        let mut d = 1;
        while d < fold.p {
            let partner = fold.real(v ^ d);
            // The partner's data lands in tmp first: reducing straight into buf
            // would change bytes we are still sending.
            p.sendrecv(partner, buf, partner, Sink::Copy(tmp))?;
            reduce_into(dtype, op, buf, tmp);
            d <<= 1;
        }
    }
    fold.fold_out(p, buf)
}
