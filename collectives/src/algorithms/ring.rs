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
use crate::transport::{Pair, Sink};

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
        let (out, acc) = split_pair(buf, send, recv)?;
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
        let (out, into) = split_pair(buf, send, recv)?;
        p.sendrecv(right, out, left, Sink::Copy(into))?;
    }
    Ok(())
}
// ANCHOR_END: all_gather

/// Bytes per rank in one slice of a large all_reduce (see [`all_reduce`]):
/// 256 KiB at world 2, 1 MiB above.
///
/// World 2: small enough that a slice's blocks and the rings' chunks in
/// flight stay in L2 between the reduce-scatter's fold and the all-gather's
/// send. On the 2-core Xeon VM of issue 27 (2 MiB L2 per core), calls
/// alternating between slice sizes inside one run (so that both see the
/// machine in the same state) took at 64 MiB, world 2, with the ring's two
/// steps (thread ranks still take them): 1 MiB slices 23.1 / 26.1 ms,
/// 256 KiB 20.4 / 23.0, 128 KiB 20.3 / 22.9, 64 KiB 21.0 / 23.0 (two runs,
/// medians of 51 calls each), and 37.0 against 34.0 ms for 1 MiB against
/// 256 KiB with two busy loops beside them.
///
/// Above world 2 the smaller slice was not measured when it came in, and
/// lost (2026-11-27, `peers --impl ringside-shm` with a build of each,
/// alternating): four times the slices means four times the ring passes,
/// each n - 1 hand-overs per step. On the 2-core VM at world 4 (4 ranks on
/// 2 cores, 4 runs each) 256 KiB slices took 8.0-11.9 ms at 16 MiB against
/// 6.3-8.3 for 1 MiB (which does not slice there yet), 38-41 against 43-48
/// at 64 MiB; with two busy loops beside them 56-68 against 23-28 ms at
/// 16 MiB, 110-129 against 45-54 at 32 MiB and 216-253 against 180-196 at
/// 64 MiB. On a 16-core H200 node (3 runs each, idle) 1 MiB was faster at
/// 16-32 MiB at world 4 (3.9-4.1 against 4.6-7.5 ms at 16 MiB) and 256 KiB
/// from 64 MiB (21.5-31.4 against 25.6-30.1; 128 MiB 44-61 against 52-60);
/// at world 8 the two were alike. Busy or oversubscribed machines are where
/// the course runs, hence 1 MiB.
const fn slice_block(world: usize) -> usize {
    if world == 2 { 256 << 10 } else { 1 << 20 }
}

/// Buffers of at least this many slices are reduced slice by slice: from
/// 8 MiB at world 2, 64 MiB at world 4. With the ring's two steps, alternating as above, 8 MiB
/// whole took 2.07 ms against 1.85 sliced (2.55 against 2.38 with two busy
/// loops), 16 MiB 4.31 against 3.87, and 4 MiB whole was as fast or faster
/// idle (0.87 against 0.92). At world 2 a slice is now one pair answered in
/// the ring ([`all_reduce`]), for which whole and sliced took the same time
/// from 1 to 64 MiB, within 2 %: the slicing matters for the worlds above 2.
const MIN_SLICES: usize = 16;

/// In-place ring all_reduce of `buf` (`Avg` is left as a sum; the caller divides).
///
/// A buffer far larger than the cache is reduced in slices of
/// `world × slice_block(world)` bytes, each a whole reduce-scatter then all-gather:
/// the block a rank has just reduced is then still in its cache when the
/// all-gather sends it, instead of being read back from memory after the
/// reduce-scatter has swept the whole buffer (as NCCL slices its ring). At
/// world 2 that is one of the five passes over memory per byte.
///
/// At world 2 the ring's two steps are one [`TaggedTransport::reduce_pair`]:
/// between processes on shared memory the receiver answers in the ring, so
/// each block is copied twice and folded once instead of copied three times
/// and folded once (`transport/shm/reply.rs`). On the Xeon VM of issue 27
/// (`peers --impl ringside-shm`, three runs each way alternating) that took
/// 0.74–0.85 of the two steps' time from 32 KiB to 2 MiB.
pub fn all_reduce(
    p: &mut TaggedTransport<'_>,
    buf: &mut [u8],
    dtype: DType,
    op: ReduceOp,
) -> Result<()> {
    let reduce: fn(&mut TaggedTransport<'_>, &mut [u8], DType, ReduceOp) -> Result<()> =
        if p.world() == 2 {
            all_reduce_pair
        } else {
            all_reduce_whole
        };
    let slice = slice_block(p.world()) * p.world() / dtype.size() * dtype.size();
    if buf.len() < MIN_SLICES * slice {
        return reduce(p, buf, dtype, op);
    }
    for part in buf.chunks_mut(slice) {
        reduce(p, part, dtype, op)?;
    }
    Ok(())
}

/// World 2: the two ring steps as one [`TaggedTransport::reduce_pair`].
fn all_reduce_pair(
    p: &mut TaggedTransport<'_>,
    buf: &mut [u8],
    dtype: DType,
    op: ReduceOp,
) -> Result<()> {
    let blocks = partition(buf.len() / dtype.size(), 2, dtype.size());
    let (first, second) = buf.split_at_mut(blocks[1].start);
    // As in the ring: rank r reduces block r and sends the other.
    let (mine, theirs) = if p.rank() == 0 {
        (second, first)
    } else {
        (first, second)
    };
    p.reduce_pair(Pair {
        peer: 1 - p.rank(),
        mine,
        theirs,
        dtype,
        op,
    })
}

fn all_reduce_whole(
    p: &mut TaggedTransport<'_>,
    buf: &mut [u8],
    dtype: DType,
    op: ReduceOp,
) -> Result<()> {
    let blocks = partition(buf.len() / dtype.size(), p.world(), dtype.size());
    reduce_scatter_blocks(p, buf, &blocks, dtype, op)?;
    all_gather_blocks(p, buf, &blocks)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{MIN_SLICES, slice_block};
    use crate::thread_ranks::with_ranks;
    use crate::transport::TransportKind;
    use crate::{BufferMut, Communicator, Input, ReduceOp};

    #[test]
    fn a_buffer_reduced_in_slices_sums_exactly_including_its_ragged_end() {
        for world in [2, 3] {
            // Just past the slicing threshold, and not a whole number of
            // slices. Integer values below 2^24: exact in f32 in any order.
            let n = MIN_SLICES * slice_block(world) * world / 4 + 5;
            let value = |i: usize, r: usize| ((i % 1000) + r) as f32;
            let got = with_ranks(
                world,
                TransportKind::Shm,
                Duration::from_secs(60),
                |rank, comm| {
                    let mut x: Vec<f32> = (0..n).map(|i| value(i, rank)).collect();
                    comm.all_reduce(
                        Input::InPlace,
                        &mut BufferMut::from_slice(&mut x),
                        ReduceOp::Sum,
                    )
                    .unwrap();
                    x
                },
            )
            .unwrap();
            let want: Vec<f32> = (0..n)
                .map(|i| (0..world).map(|r| value(i, r)).sum())
                .collect();
            for (r, x) in got.iter().enumerate() {
                assert!(*x == want, "world {world} rank {r}");
            }
        }
    }
}
