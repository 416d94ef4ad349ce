//! Lab 1's reference solution. Not a copy of library code: ringside's own
//! all-reduce algorithms (ring, tree, recursive doubling, in `collectives`) are
//! the better answer this lab leads to, and the program times them side by side.

use collectives::{Buffer, BufferMut, Communicator};
use labkit::LabError;

// ANCHOR: solution
/// Replaces `values` on every rank by the element-wise sum of all ranks' `values`:
/// a reduce to rank 0, then a broadcast from it, built from `send` and `recv`.
/// Rank 0 receives and sends n − 1 whole buffers, every other rank one each way.
pub fn all_reduce_by_hand(comm: &dyn Communicator, values: &mut [f64]) -> Result<(), LabError> {
    if comm.rank() == 0 {
        let mut theirs = vec![0.0f64; values.len()];
        for peer in 1..comm.world_size() {
            comm.recv(&mut BufferMut::from_slice(&mut theirs), peer)?;
            for (total, x) in values.iter_mut().zip(&theirs) {
                *total += x;
            }
        }
        for peer in 1..comm.world_size() {
            comm.send(&Buffer::from_slice(values), peer)?;
        }
    } else {
        comm.send(&Buffer::from_slice(values), 0)?;
        comm.recv(&mut BufferMut::from_slice(values), 0)?;
    }
    Ok(())
}
// ANCHOR_END: solution

// ANCHOR: time_collective
/// The reference solution of lab 1's stretch goal: the timing rule of every
/// measurement in ringside, `collectives::bench::time` (warm-up, a barrier
/// before each timed call, the slowest rank's time per iteration by a max
/// all-reduce), of which the stretch goal asks for the median.
pub fn time_collective(
    comm: &dyn Communicator,
    warmup: usize,
    iters: usize,
    call: &mut dyn FnMut() -> collectives::Result<()>,
) -> Result<f64, LabError> {
    let stats =
        collectives::bench::time(comm, warmup, iters, collectives::bench::Combine::Max, call)?;
    Ok(stats.median)
}
// ANCHOR_END: time_collective
