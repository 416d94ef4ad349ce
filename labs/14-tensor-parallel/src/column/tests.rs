//! The stretch check fed the mistakes a learner makes on the way to the
//! gathered column-parallel layer: each is named, with the key of its hint.

use super::*;
use crate::solution::column_forward;
use collectives::{Input, ReduceOp};
use trainers::comm::{buffer, buffer_mut};

fn message(f: ColumnForward) -> String {
    check(f).unwrap_err().to_string()
}

fn local(input: &Tensor, weight: &Tensor, bias: &Tensor) -> trainers::Result<Tensor> {
    Ok(input.f_matmul(&weight.f_tr()?)?.f_add(bias)?)
}

/// This rank's columns only: nothing gathered.
fn own_only(
    _: &dyn Communicator,
    x: &Tensor,
    w: &Tensor,
    b: &Tensor,
    _: i64,
) -> trainers::Result<Tensor> {
    local(x, w, b)
}

/// The gathered flat blocks read as `[batch, out]` (no padding: right only
/// where the shards are equal, which 2 ranks of 10 are).
fn as_rows(
    comm: &dyn Communicator,
    x: &Tensor,
    w: &Tensor,
    b: &Tensor,
    out: i64,
) -> trainers::Result<Tensor> {
    let mine = local(x, w, b)?.f_detach()?.f_contiguous()?;
    let mut all = Tensor::f_zeros(
        [mine.numel() as i64 * comm.world_size() as i64],
        (mine.kind(), mine.device()),
    )?;
    comm.all_gather(Input::Buffer(buffer(&mine)?), &mut buffer_mut(&mut all)?)?;
    Ok(all.f_reshape([x.size()[0], out])?)
}

/// The right numbers with no autograd history.
fn detached(
    comm: &dyn Communicator,
    x: &Tensor,
    w: &Tensor,
    b: &Tensor,
    out: i64,
) -> trainers::Result<Tensor> {
    Ok(column_forward(comm, x, w, b, out)?.f_detach()?)
}

/// The right numbers and gradients, by an all-reduce of a zero-filled output.
fn by_all_reduce(
    comm: &dyn Communicator,
    x: &Tensor,
    w: &Tensor,
    b: &Tensor,
    out: i64,
) -> trainers::Result<Tensor> {
    let mine = local(x, w, b)?;
    let (start, len) = shard(out, comm.rank(), comm.world_size());
    let mut full = Tensor::f_zeros([x.size()[0], out], (mine.kind(), mine.device()))?;
    full.f_narrow(1, start, len)?.f_copy_(&mine.f_detach()?)?;
    comm.all_reduce(Input::InPlace, &mut buffer_mut(&mut full)?, ReduceOp::Sum)?;
    let mut live = Tensor::f_zeros([x.size()[0], out], (mine.kind(), mine.device()))?;
    live = live.f_slice_scatter(&mine.f_sub(&mine.f_detach()?)?, 1, start, start + len, 1)?;
    Ok(full.f_add(&live)?)
}

/// The right numbers, but this rank's gradient path added to every rank's
/// block (2 ranks: equal blocks).
fn gradient_everywhere(
    comm: &dyn Communicator,
    x: &Tensor,
    w: &Tensor,
    b: &Tensor,
    out: i64,
) -> trainers::Result<Tensor> {
    let mine = local(x, w, b)?;
    let zero = mine.f_sub(&mine.f_detach()?)?;
    let zeros: Vec<Tensor> = (0..comm.world_size())
        .map(|_| zero.shallow_clone())
        .collect();
    Ok(column_forward(comm, x, w, b, out)?
        .f_detach()?
        .f_add(&Tensor::f_cat(&zeros, 1)?)?)
}

/// Each rank gathers its own length: unequal on 3 ranks of 10.
fn unpadded(
    comm: &dyn Communicator,
    x: &Tensor,
    w: &Tensor,
    b: &Tensor,
    out: i64,
) -> trainers::Result<Tensor> {
    let live = local(x, w, b)?;
    let mine = live.f_detach()?.f_contiguous()?;
    let world = comm.world_size() as i64;
    let mut all = Tensor::f_zeros(
        [world, x.size()[0], mine.size()[1]],
        (mine.kind(), mine.device()),
    )?;
    comm.all_gather(Input::Buffer(buffer(&mine)?), &mut buffer_mut(&mut all)?)?;
    let mut blocks = all.f_unbind(0)?;
    blocks[comm.rank()] = live;
    let _ = out;
    Ok(Tensor::f_cat(&blocks, 1)?)
}

#[test]
fn only_this_ranks_columns_are_named() {
    let msg = message(own_only);
    assert!(
        msg.contains("on 2 ranks (shards of 5-5), rank 0 returned shape [6, 5]"),
        "{msg}"
    );
    assert!(msg.contains("hint: gather-the-columns"), "{msg}");
}

#[test]
fn blocks_laid_as_rows_are_named() {
    let msg = message(as_rows);
    assert!(msg.contains("hint: columns-not-rows"), "{msg}");
}

#[test]
fn an_output_without_autograd_history_is_named() {
    let msg = message(detached);
    assert!(msg.contains("never reached its weight"), "{msg}");
    assert!(msg.contains("hint: keep-the-graph"), "{msg}");
}

#[test]
fn an_all_reduce_with_the_right_numbers_is_named_by_its_bytes() {
    let msg = message(by_all_reduce);
    assert!(msg.contains("called all_reduce 1 time(s)"), "{msg}");
    assert!(msg.contains("hint: all-gather-not-all-reduce"), "{msg}");
}

#[test]
fn a_gradient_that_reaches_other_ranks_columns_is_named() {
    let msg = message(gradient_everywhere);
    assert!(msg.contains("weight gradient element 0"), "{msg}");
    assert!(msg.contains("hint: own-columns-gradient"), "{msg}");
}

#[test]
fn unequal_blocks_in_one_gather_are_named_on_three_ranks() {
    let msg = message(unpadded);
    assert!(msg.contains("on 3 ranks (shards of 4-3-3)"), "{msg}");
    assert!(msg.contains("ranks disagree"), "{msg}");
    assert!(msg.contains("hint: pad-the-blocks"), "{msg}");
}

#[test]
fn the_solution_passes() {
    let said = check(column_forward).unwrap();
    assert!(said.contains("shards of 5-5, 4-3-3, 3-3-2-2"), "{said}");
}

#[test]
fn a_nan_is_never_equal() {
    assert_eq!(first_difference(&[1.0, f32::NAN], &[1.0, 2.0]), Some(1));
    assert_eq!(first_difference(&[1.0, 2.0], &[1.0, 2.0]), None);
}
