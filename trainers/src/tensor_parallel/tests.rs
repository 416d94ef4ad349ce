use std::sync::Arc;

use collectives::{Communicator, Input, ReduceOp};
use tch::Tensor;

use super::check::{self, Split};
use super::*;
use crate::comm::buffer_mut;
use crate::data::{Dataset, synthetic};

fn small() -> TpConfig {
    TpConfig {
        input: 784,
        width: 32,
        hidden: 100, // divides by neither 3 nor 8: uneven shards
        classes: 10,
    }
}

fn data() -> Dataset {
    synthetic(400, 7).unwrap()
}

#[test]
fn shards_cover_every_row_once_in_order() {
    for n in [1, 7, 100, 1024] {
        for world in 1..=8usize {
            if n < world as i64 {
                continue;
            }
            let mut next = 0;
            for rank in 0..world {
                let (start, len) = shard(n, rank, world);
                assert_eq!(start, next, "n {n} world {world} rank {rank}");
                assert!(len == n / world as i64 || len == n / world as i64 + 1);
                next += len;
            }
            assert_eq!(next, n);
        }
    }
}

#[test]
fn two_and_three_ranks_train_like_the_unsplit_mlp_with_one_all_reduce_each_way() {
    let d = data();
    for world in [2, 3] {
        let e = check::equivalence(small(), world, 32, 10, &d, Arc::new(AllReduceRow)).unwrap();
        // The sums differ in order only (world partial sums instead of one):
        // rounding of ~1e-7 per step, which GELU does not amplify.
        assert!(e.max_diff <= 1e-5, "world {world}: {e:?}");
        assert!(e.first_logits_diff <= 1e-5, "world {world}: {e:?}");
        assert!(e.moved > 1e-3, "world {world}: nothing moved: {e:?}");
        assert_eq!(e.forward_all_reduces, vec![1; 10]);
        assert_eq!(e.backward_all_reduces, vec![1; 10]);
    }
}

/// Adds the bias on every rank before the sum: the output is off by
/// (world − 1) × bias.
struct BiasBeforeSum;

impl RowForward for BiasBeforeSum {
    fn forward(
        &self,
        comm: &dyn Communicator,
        input: &Tensor,
        weight: &Tensor,
        bias: &Tensor,
    ) -> Result<Tensor> {
        let partial = input.f_matmul(&weight.f_tr()?)?.f_add(bias)?;
        let mut total = partial.f_detach()?.copy();
        comm.all_reduce(Input::InPlace, &mut buffer_mut(&mut total)?, ReduceOp::Sum)?;
        Ok(total.f_add(&partial.f_sub(&partial.f_detach()?)?)?)
    }
}

/// Returns the all-reduced output detached from its inputs.
struct Detached;

impl RowForward for Detached {
    fn forward(
        &self,
        comm: &dyn Communicator,
        input: &Tensor,
        weight: &Tensor,
        bias: &Tensor,
    ) -> Result<Tensor> {
        let mut total = input.f_matmul(&weight.f_tr()?)?.f_detach()?.copy();
        comm.all_reduce(Input::InPlace, &mut buffer_mut(&mut total)?, ReduceOp::Sum)?;
        Ok(total.f_add(bias)?)
    }
}

#[test]
fn a_bias_added_before_the_sum_is_caught() {
    let e = check::equivalence(small(), 2, 32, 3, &data(), Arc::new(BiasBeforeSum)).unwrap();
    assert!(e.first_logits_diff > 1e-4, "{e:?}");
}

#[test]
fn a_detached_row_output_is_an_error_naming_autograd() {
    let err = check::equivalence(small(), 2, 32, 2, &data(), Arc::new(Detached)).unwrap_err();
    assert!(err.to_string().contains("autograd"), "{err}");
}

#[test]
fn tensor_parallel_moves_activations_where_data_parallel_moves_gradients() {
    let c = small();
    let d = data();
    let (world, batch) = (2, 64);
    let tp = check::footprint(c, Split::Tensor, world, batch, 4, &d).unwrap();
    let dp = check::footprint(c, Split::Data, world, batch, 4, &d).unwrap();
    // Two all-reduces of [batch, width] f32 per step.
    assert_eq!(tp.all_reduces_per_step, 2);
    assert_eq!(tp.bytes_per_step, 2 * (batch as u64) * (c.width as u64) * 4);
    // One all-reduce of every gradient.
    let params = c.parameters_per_rank(0, 1);
    assert_eq!(dp.all_reduces_per_step, 1);
    assert_eq!(dp.bytes_per_step, params as u64 * 4);
    assert_eq!(dp.parameters, params);
    // fc1 and fc2's weights and fc1's bias are halved.
    let (_, h) = shard(c.hidden, 0, world);
    assert_eq!(tp.parameters, params - (c.hidden - h) * (2 * c.width + 1));
    // The hidden activation: the whole batch on half the features, against
    // half the batch on all of them.
    assert_eq!(tp.sharded_activations, 2 * batch as i64 * h);
    assert_eq!(
        dp.sharded_activations,
        2 * (batch / world) as i64 * c.hidden
    );
}

#[test]
fn a_data_parallel_batch_that_does_not_divide_is_an_error() {
    let err = check::footprint(small(), Split::Data, 3, 64, 2, &data()).unwrap_err();
    assert!(err.to_string().contains("do not divide"), "{err}");
}
