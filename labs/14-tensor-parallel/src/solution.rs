//! The reference solution of lab 14's stretch goal: the column-parallel
//! layer with its output gathered.
//!
//! It lives here, not in trainers, because trainers' [`TpModel`] never
//! gathers a column-parallel output: its `fc1` feeds the row-parallel `fc2`,
//! which wants the split activation, and a gather there would only be undone.
//! The gathered form is what ends a block (Megatron's `gather_output=True`).
//!
//! [`TpModel`]: trainers::tensor_parallel::TpModel

use collectives::{Communicator, Input};
use tch::Tensor;
use trainers::Result;
use trainers::comm::{buffer, buffer_mut};
use trainers::tensor_parallel::shard;

// ANCHOR: column_forward
/// The whole `[batch, out]` output of a layer whose `out` output features
/// are split over the ranks by [`shard`], on every rank.
pub fn column_forward(
    comm: &dyn Communicator,
    input: &Tensor,
    weight: &Tensor,
    bias: &Tensor,
    out: i64,
) -> Result<Tensor> {
    let (rank, world) = (comm.rank(), comm.world_size());
    // This rank's columns of the output: no communication.
    let local = input.f_matmul(&weight.f_tr()?)?.f_add(bias)?;
    let batch = local.size()[0];
    // An all-gather moves equal blocks: pad every slice to the largest
    // (rank 0's, which holds the extra column when `out` does not divide).
    let widest = shard(out, 0, world).1;
    let padded = local
        .f_detach()?
        .f_constant_pad_nd([0, widest - local.size()[1]])?
        .f_contiguous()?;
    let mut gathered = Tensor::f_zeros(
        [world as i64, batch, widest],
        (local.kind(), local.device()),
    )?;
    comm.all_gather(
        Input::Buffer(buffer(&padded)?),
        &mut buffer_mut(&mut gathered)?,
    )?;
    // The gather concatenates flat blocks, one per rank: each is a `[batch,
    // widest]` matrix whose first `len` columns are that rank's output
    // features, so the output is the blocks side by side, along the columns.
    // This rank's own block is `local` itself (the same numbers), which keeps
    // its gradient path: the gather's backward is taking one's own columns.
    let blocks = (0..world)
        .map(|j| {
            if j == rank {
                Ok(local.shallow_clone())
            } else {
                Ok(gathered
                    .f_get(j as i64)?
                    .f_narrow(1, 0, shard(out, j, world).1)?)
            }
        })
        .collect::<Result<Vec<Tensor>>>()?;
    Ok(Tensor::f_cat(&blocks, 1)?)
}
// ANCHOR_END: column_forward
