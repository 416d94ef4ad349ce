//! The stretch check fed the mistakes a learner makes on the way to ZeRO-3's
//! parameter gather: each is named, with the key of its hint.

use super::*;
use collectives::{Input, ReduceOp};
use trainers::comm::buffer_mut;
use trainers::zero::gather_unit;

fn message(f: Gather) -> String {
    check(f).unwrap_err().to_string()
}

/// The shards in reverse rank order.
fn reversed(comm: &dyn Communicator, shard: &Tensor) -> trainers::Result<Tensor> {
    let full = gather_unit(comm, shard)?;
    let blocks = full.f_chunk(comm.world_size() as i64, 0)?;
    let back: Vec<Tensor> = blocks.into_iter().rev().collect();
    Ok(Tensor::f_cat(&back, 0)?)
}

/// This rank's shard in its place, zeros elsewhere: nothing communicated.
fn own_only(comm: &dyn Communicator, shard: &Tensor) -> trainers::Result<Tensor> {
    let len = shard.numel() as i64;
    let full = Tensor::f_zeros(
        [len * comm.world_size() as i64],
        (shard.kind(), shard.device()),
    )?;
    full.f_narrow(0, comm.rank() as i64 * len, len)?
        .f_copy_(shard)?;
    Ok(full)
}

/// The right numbers, by an all-reduce of a zero-filled unit: twice the bytes.
fn by_all_reduce(comm: &dyn Communicator, shard: &Tensor) -> trainers::Result<Tensor> {
    let mut full = own_only(comm, shard)?;
    comm.all_reduce(Input::InPlace, &mut buffer_mut(&mut full)?, ReduceOp::Sum)?;
    Ok(full)
}

/// The right numbers without the padding.
fn unpadded(comm: &dyn Communicator, shard: &Tensor) -> trainers::Result<Tensor> {
    let full = gather_unit(comm, shard)?;
    // The check's units: 37,680 and 490 parameters; cut the padding of both.
    let numel = if full.numel() >= 37_680 { 37_680 } else { 490 };
    Ok(full.f_narrow(0, 0, numel)?)
}

#[test]
fn shards_in_the_wrong_order_are_named_with_the_block() {
    let msg = message(reversed);
    assert!(
        msg.contains("on 2 ranks, rank 0's gather of unit 0"),
        "{msg}"
    );
    assert!(msg.contains("block 0 holds rank 1's shard"), "{msg}");
    assert!(msg.contains("hint: shard-order"), "{msg}");
}

#[test]
fn shards_that_never_arrived_are_named() {
    let msg = message(own_only);
    assert!(
        msg.contains("block 1 is all zeros: rank 1's shard never arrived"),
        "{msg}"
    );
    assert!(msg.contains("hint: only-your-shard"), "{msg}");
}

#[test]
fn an_all_reduce_with_the_right_numbers_is_named_by_its_bytes() {
    let msg = message(by_all_reduce);
    assert!(
        msg.contains("the parameters are right, but on 2 ranks"),
        "{msg}"
    );
    assert!(msg.contains("hint: all-reduce-not-all-gather"), "{msg}");
}

#[test]
fn a_unit_without_its_padding_is_named_where_there_is_padding() {
    // 37,680 and 490 divide by 2: the first world with padding is 3.
    let msg = message(unpadded);
    assert!(
        msg.contains("on 3 ranks, rank 0's gather of unit 1 (490 parameters, 2 of padding"),
        "{msg}"
    );
    assert!(msg.contains("hint: keep-the-padding"), "{msg}");
}

#[test]
fn a_nan_is_never_equal() {
    let want = [1.0f32, 2.0, 3.0, 4.0];
    let got = [1.0f32, f32::NAN, 3.0, 4.0];
    let msg = judge_unit(2, 0, 0, 4, &got, &want).unwrap();
    assert!(msg.contains("element 1 (block 0) is NaN"), "{msg}");
    assert_eq!(judge_unit(2, 0, 0, 4, &want, &want), None);
}

#[test]
fn trainers_gather_passes() {
    let said = check(gather_unit).unwrap();
    assert!(said.contains("on 2, 3 and 4 ranks"), "{said}");
}
