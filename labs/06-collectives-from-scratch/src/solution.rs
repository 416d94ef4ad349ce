//! The reference solution of lab 6's stretch goal: the bidirectional ring.
//!
//! It lives here, not in `collectives::algorithms`, because the reference
//! backend has no use for it: its transport's `exchange` sends to one peer
//! while receiving from one, so the two rings take turns instead of sharing
//! the links at once, and on this transport a bidirectional ring is no faster
//! than the one-way ring the backend runs. (NCCL runs its rings on separate
//! channels, which do overlap.) The lesson is the mirrored indexing.

use collectives::algorithms::{TaggedTransport, partition, split_pair, sub_mod};
use collectives::transport::Sink;
use collectives::{DType, ReduceOp, Result};

// ANCHOR: bidirectional
/// Bidirectional ring all-reduce: the first half of the elements goes round
/// the ring rank → rank + 1, the second half round rank → rank − 1, step by
/// step together. (`Avg` adds; the backend divides.)
pub fn all_reduce(
    p: &mut TaggedTransport<'_>,
    buf: &mut [u8],
    dtype: DType,
    op: ReduceOp,
) -> Result<()> {
    let (r, n, size) = (p.rank(), p.world(), dtype.size());
    // Halve by elements, not bytes: a cut inside an element would reduce
    // half an element in each ring.
    let (cw, ccw) = buf.split_at_mut(buf.len() / size / 2 * size);
    let cw_blocks = partition(cw.len() / size, n, size);
    let ccw_blocks = partition(ccw.len() / size, n, size);
    let (right, left) = ((r + 1) % n, sub_mod(r, 1, n));
    // Reduce-scatter. Clockwise: send block r − s − 1, reduce block r − s − 2
    // (as the one-way ring). Counter-clockwise is the same ring with the ranks
    // numbered backwards: + where the clockwise ring has −.
    for s in 0..n.saturating_sub(1) {
        let (out, acc) = split_pair(
            cw,
            cw_blocks[sub_mod(r, s + 1, n)].clone(),
            cw_blocks[sub_mod(r, s + 2, n)].clone(),
        )?;
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
        let (out, acc) = split_pair(
            ccw,
            ccw_blocks[(r + s + 1) % n].clone(),
            ccw_blocks[(r + s + 2) % n].clone(),
        )?;
        p.sendrecv(
            left,
            out,
            right,
            Sink::Reduce {
                dst: acc,
                dtype,
                op,
            },
        )?;
    }
    // All-gather: each rank's finished block r travels on round its ring.
    for s in 0..n.saturating_sub(1) {
        let (out, into) = split_pair(
            cw,
            cw_blocks[sub_mod(r, s, n)].clone(),
            cw_blocks[sub_mod(r, s + 1, n)].clone(),
        )?;
        p.sendrecv(right, out, left, Sink::Copy(into))?;
        let (out, into) = split_pair(
            ccw,
            ccw_blocks[(r + s) % n].clone(),
            ccw_blocks[(r + s + 1) % n].clone(),
        )?;
        p.sendrecv(left, out, right, Sink::Copy(into))?;
    }
    Ok(())
}
// ANCHOR_END: bidirectional
