//! Each named mistake, fed to the probes as a learner would write it: trainers'
//! own pieces with one piece replaced.

use super::*;
use collectives::{Communicator, Input, ReduceOp};
use trainers::comm::buffer_mut;
use trainers::ddp::Standard;

/// Trainers' pieces, but the all-reduce sums.
struct Sums;

impl GradSync for Sums {
    fn broadcast(&self, c: &dyn Communicator, t: &[Tensor], root: usize) -> trainers::Result<()> {
        Standard.broadcast(c, t, root)
    }
    fn all_reduce_mean(&self, comm: &dyn Communicator, flat: &mut Tensor) -> trainers::Result<()> {
        comm.all_reduce(Input::InPlace, &mut buffer_mut(flat)?, ReduceOp::Sum)?;
        Ok(())
    }
    fn flatten(&self, g: &[Tensor], flat: &mut Tensor) -> trainers::Result<()> {
        Standard.flatten(g, flat)
    }
    fn unflatten(&self, flat: &Tensor, g: &[Tensor]) -> trainers::Result<()> {
        Standard.unflatten(flat, g)
    }
    fn ready(&self, stage: usize, rs: &[usize], next: usize) -> trainers::Result<usize> {
        Standard.ready(stage, rs, next)
    }
}

/// Trainers' pieces, but the broadcast always from rank 0.
struct FromZero;

impl GradSync for FromZero {
    fn broadcast(&self, c: &dyn Communicator, t: &[Tensor], _root: usize) -> trainers::Result<()> {
        Standard.broadcast(c, t, 0)
    }
    fn all_reduce_mean(&self, c: &dyn Communicator, flat: &mut Tensor) -> trainers::Result<()> {
        Standard.all_reduce_mean(c, flat)
    }
    fn flatten(&self, g: &[Tensor], flat: &mut Tensor) -> trainers::Result<()> {
        Standard.flatten(g, flat)
    }
    fn unflatten(&self, flat: &Tensor, g: &[Tensor]) -> trainers::Result<()> {
        Standard.unflatten(flat, g)
    }
    fn ready(&self, stage: usize, rs: &[usize], next: usize) -> trainers::Result<usize> {
        Standard.ready(stage, rs, next)
    }
}

/// Trainers' pieces, but `ready` launches every bucket whose stage is at most
/// `stage` (the comparison the wrong way round) and flatten never moves its offset.
struct EarlyAndOverwriting;

impl GradSync for EarlyAndOverwriting {
    fn broadcast(&self, c: &dyn Communicator, t: &[Tensor], root: usize) -> trainers::Result<()> {
        Standard.broadcast(c, t, root)
    }
    fn all_reduce_mean(&self, c: &dyn Communicator, flat: &mut Tensor) -> trainers::Result<()> {
        Standard.all_reduce_mean(c, flat)
    }
    fn flatten(&self, grads: &[Tensor], flat: &mut Tensor) -> trainers::Result<()> {
        for g in grads {
            flat.f_narrow(0, 0, g.numel() as i64)?
                .f_copy_(&g.f_reshape([-1])?)?;
        }
        Ok(())
    }
    fn unflatten(&self, flat: &Tensor, g: &[Tensor]) -> trainers::Result<()> {
        Standard.unflatten(flat, g)
    }
    fn ready(&self, stage: usize, rs: &[usize], next: usize) -> trainers::Result<usize> {
        Ok(next + rs[next..].iter().take_while(|&&s| s <= stage).count())
    }
}

#[test]
fn trainers_own_pieces_have_nothing_to_diagnose() {
    assert_eq!(diagnose(&Standard), "");
}

#[test]
fn a_sum_instead_of_a_mean_is_named_avg_not_sum() {
    let said = all_reduce_mean(&Sums).expect("no diagnosis");
    assert!(
        said.contains("rank 0 element 0: got 3, expected 1.5"),
        "{said}"
    );
    assert!(said.ends_with("hint: avg-not-sum"), "{said}");
}

#[test]
fn a_broadcast_from_the_wrong_root_is_named() {
    let said = broadcast(&FromZero).expect("no diagnosis");
    assert!(
        said.contains("rank 0 element 0: got 1, expected 11"),
        "{said}"
    );
    assert!(said.ends_with("hint: broadcast-root"), "{said}");
}

#[test]
fn a_bucket_launched_before_its_gradients_exist_is_named() {
    let said = ready(&EarlyAndOverwriting).expect("no diagnosis");
    assert!(said.contains("returned 5, expected 3"), "{said}");
    assert!(said.ends_with("hint: bucket-too-early"), "{said}");
}

#[test]
fn a_flatten_that_never_moves_its_offset_is_named() {
    let said = flatten(&EarlyAndOverwriting).expect("no diagnosis");
    assert!(said.contains("element 0: got 3, expected 1"), "{said}");
    assert!(said.ends_with("hint: flatten-offset"), "{said}");
}

/// Trainers' pieces, but the all-reduce averages a copy of `flat`, and
/// `ready` holds every bucket back until backward has finished (stage 0).
struct CopiedAndHeldBack;

impl GradSync for CopiedAndHeldBack {
    fn broadcast(&self, c: &dyn Communicator, t: &[Tensor], root: usize) -> trainers::Result<()> {
        Standard.broadcast(c, t, root)
    }
    fn all_reduce_mean(&self, c: &dyn Communicator, flat: &mut Tensor) -> trainers::Result<()> {
        let mut copy = flat.copy();
        Standard.all_reduce_mean(c, &mut copy)
    }
    fn flatten(&self, g: &[Tensor], flat: &mut Tensor) -> trainers::Result<()> {
        Standard.flatten(g, flat)
    }
    fn unflatten(&self, flat: &Tensor, g: &[Tensor]) -> trainers::Result<()> {
        Standard.unflatten(flat, g)
    }
    fn ready(&self, stage: usize, rs: &[usize], next: usize) -> trainers::Result<usize> {
        Ok(if stage == 0 { rs.len() } else { next })
    }
}

#[test]
fn a_mean_of_a_copy_is_named_not_in_place() {
    let said = all_reduce_mean(&CopiedAndHeldBack).expect("no diagnosis");
    assert!(
        said.contains("rank 0 element 0: got 1, expected 1.5"),
        "{said}"
    );
    assert!(said.ends_with("hint: not-in-place"), "{said}");
}

#[test]
fn buckets_held_back_until_backward_ends_are_named_no_overlap() {
    let said = ready(&CopiedAndHeldBack).expect("no diagnosis");
    assert!(said.contains("returned 1, expected 3"), "{said}");
    assert!(said.ends_with("hint: no-overlap"), "{said}");
}
