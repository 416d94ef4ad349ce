//! Lab 13: sharded data parallelism. The same MLP trains with plain DDP and
//! with ZeRO-1, ZeRO-2 and ZeRO-3 (FSDP), trainers' [`Zero`](trainers::zero::Zero):
//! the learner writes the gradient path every ZeRO stage runs
//! ([`exercise::YourGradPath`], a [`GradPath`]: reduce-scatter, then the
//! shard's update); the solution is trainers' own [`ReduceScatterStep`]. The
//! program checks each stage against DDP and measures what each holds and
//! moves per rank.
//!
//! The optional stretch goal, ZeRO-3's parameter gather, is the learner's
//! `src/stretch.rs`, compiled only by its own check `tests/stretch.rs`;
//! [`gather`] judges it against the unsharded model, and its solution is
//! trainers' own [`trainers::zero::gather_unit`], which [`Zero`](trainers::zero::Zero) calls.

pub mod exercise;
pub mod gather;

pub use labkit_torch::{fashion_mnist, lab_error};
use std::sync::Arc;
use std::time::Duration;

use collectives::transport::TransportKind;
use tch::{Device, Kind, Tensor};
use trainers::traffic::{Metered, Traffic};

use labkit::{LabError, Variant};
use trainers::data::{self, Dataset};
use trainers::zero::check::{self, Equivalence};
use trainers::zero::{GradPath, ReduceScatterStep, SgdStep, Stage, ZeroConfig};

/// `variant`'s gradient path.
pub fn path(variant: Variant) -> Arc<dyn GradPath> {
    match variant {
        Variant::Exercise => Arc::new(exercise::YourGradPath),
        Variant::Solution => Arc::new(ReduceScatterStep),
    }
}

/// The check's model: units of 37,680 and 490 parameters, which divide by
/// neither 3 nor 4 (padded shards).
pub fn check_config() -> ZeroConfig {
    ZeroConfig {
        sizes: vec![784, 48, 10],
    }
}

/// The largest |Δ| from DDP the check accepts after 10 SGD steps: the same
/// gradients averaged by a reduce-scatter instead of an all-reduce differ at
/// most in the order of addition (0 on 2 ranks here, 3e-8 on 3); a sum where
/// an average belongs, or a block of the wrong rank, is off by far more.
pub const TOLERANCE: f64 = 1e-5;

/// `stage` with `variant`'s gradient path on `world` ranks against DDP, 10
/// steps of 16 rows per rank of `data`, judged.
pub fn judge(
    variant: Variant,
    stage: Stage,
    world: usize,
    data: &Dataset,
) -> Result<Equivalence, LabError> {
    judge_path(path(variant), stage, world, data)
}

/// [`judge`] for any gradient path.
pub fn judge_path(
    path: Arc<dyn GradPath>,
    stage: Stage,
    world: usize,
    data: &Dataset,
) -> Result<Equivalence, LabError> {
    let e =
        check::equivalence(stage, &check_config(), world, 16, 10, data, path).map_err(lab_error)?;
    if e.max_diff.is_nan() || e.max_diff > TOLERANCE || e.moved < 1e-3 {
        return Err(LabError::Wrong(format!(
            "{} on {world} ranks: after 10 steps the parameters differ from DDP's by up to \
             {:.3e} (allowed {TOLERANCE:e}): is the gradient averaged (ReduceOp::Avg, not Sum), \
             and is the block you update the one the reduce-scatter gave this rank?",
            stage.name(),
            e.max_diff
        )));
    }
    Ok(e)
}

/// One call of gradient path `path` on 2 thread ranks, on a gradient of
/// 1,024 f32: the bytes rank 0 sends if its collectives run the ring
/// algorithm, and what one reduce-scatter of it sends.
pub fn bytes_sent(path: Arc<dyn GradPath>) -> trainers::Result<(f64, f64)> {
    let out = collectives::thread_ranks::with_ranks(
        2,
        TransportKind::Shm,
        Duration::from_secs(30),
        |rank, comm| -> trainers::Result<f64> {
            let traffic = Traffic::new();
            let comm = Metered::new(Box::new(comm), traffic.clone());
            let grad = Tensor::f_full([1024], rank as f64 + 1.0, (Kind::Float, Device::Cpu))?;
            let mut shard = Tensor::f_zeros([512], (Kind::Float, Device::Cpu))?;
            let sgd = SgdStep {
                lr: 0.1,
                momentum: 0.9,
            };
            path.step(&comm, &grad, &mut shard, &mut None, sgd)?;
            Ok(traffic.ring_bytes_sent(2))
        },
    )?;
    let sent = out.into_iter().next().unwrap_or(Ok(0.0))?;
    // (n − 1)/n of the 4 KiB input.
    Ok((sent, 2048.0))
}

/// The self-check (`cargo lab check 13`): ZeRO-1, ZeRO-2 and ZeRO-3 with
/// your gradient path train like DDP on 2 and 3 ranks (parameters within
/// [`TOLERANCE`] after 10 SGD steps with momentum), and the path sends what a
/// reduce-scatter sends, not an all-reduce's twice as much.
pub fn check(variant: Variant) -> Result<String, LabError> {
    check_path(path(variant))
}

/// [`check()`] for any gradient path: first the probe of [`diagnose`] (which
/// names a known mistake by its values), then the training against DDP, then
/// the bytes.
pub fn check_path(path: Arc<dyn GradPath>) -> Result<String, LabError> {
    if let Some(why) = diagnose(path.clone()) {
        return Err(LabError::Wrong(why));
    }
    let data = data::synthetic(3 * 16 * 10, 13).map_err(lab_error)?;
    let mut worst = 0f64;
    for world in [2, 3] {
        for stage in [Stage::One, Stage::Two, Stage::Three] {
            let e = judge_path(path.clone(), stage, world, &data)?;
            worst = worst.max(e.max_diff);
        }
    }
    let (sent, shard) = bytes_sent(path).map_err(lab_error)?;
    if sent > shard {
        return Err(LabError::Wrong(format!(
            "the results are right, but one step of your gradient path on 2 ranks sends {sent} \
             bytes per rank where a reduce-scatter sends {shard}: every rank received the whole \
             average and kept one block. Which collective delivers only your block?\n\
             hint: all-reduce-not-reduce-scatter"
        )));
    }
    Ok(format!(
        "ZeRO-1, ZeRO-2 and ZeRO-3 train like DDP on 2 and 3 ranks (max |Δ| {worst:.1e} after \
         10 steps), and one gradient path sends {sent} bytes per rank, a reduce-scatter's"
    ))
}

/// Names the mistake in gradient path `path`, if it is one we know, from two
/// steps (lr 1, momentum 0.9, a fresh shard of zeros) on 2 thread ranks whose
/// gradients of an 8-element unit are `[1, 2, …, 8]` and three times that. The
/// average is `[2, 4, …, 16]`: rank 0's block `[2, 4, 6, 8]`, rank 1's
/// `[10, 12, 14, 16]`; after one step the shard is minus its block, after two
/// 2.9 times that (PyTorch's momentum: the buffer is `0.9 · g + g`). `None`
/// when the path does that, or fails (the check then reports its error).
pub fn diagnose(path: Arc<dyn GradPath>) -> Option<String> {
    let out = collectives::thread_ranks::with_ranks(
        2,
        TransportKind::Shm,
        Duration::from_secs(10),
        |rank, comm| -> trainers::Result<[Vec<f32>; 2]> {
            let grad = Tensor::f_arange_start(1, 9, (Kind::Float, Device::Cpu))?
                .f_mul_scalar(2.0 * rank as f64 + 1.0)?;
            let mut shard = Tensor::f_zeros([4], (Kind::Float, Device::Cpu))?;
            let mut momentum = None;
            let sgd = SgdStep {
                lr: 1.0,
                momentum: 0.9,
            };
            path.step(&comm, &grad, &mut shard, &mut momentum, sgd)?;
            let first = Vec::<f32>::try_from(&shard)?;
            path.step(&comm, &grad, &mut shard, &mut momentum, sgd)?;
            Ok([first, Vec::<f32>::try_from(&shard)?])
        },
    )
    .ok()?;
    let got: Vec<[Vec<f32>; 2]> = out.into_iter().collect::<trainers::Result<_>>().ok()?;
    // The shard after one step, on each rank, if its gradient was `g(rank, i)`.
    let after = |g: &dyn Fn(usize, usize) -> f32| -> Vec<Vec<f32>> {
        (0..2).map(|r| (0..4).map(|i| -g(r, i)).collect()).collect()
    };
    let first: Vec<Vec<f32>> = got.iter().map(|g| g[0].clone()).collect();
    let second: Vec<Vec<f32>> = got.iter().map(|g| g[1].clone()).collect();
    let avg = |r: usize, i: usize| 2.0 * (4 * r + i + 1) as f32;
    let right = after(&avg);
    let close = |a: &[Vec<f32>], b: &[Vec<f32>]| {
        a.len() == b.len()
            && a.iter().zip(b).all(|(a, b)| {
                a.len() == b.len()
                    && a.iter()
                        .zip(b)
                        .all(|(x, y)| (x - y).abs() <= 1e-5 * y.abs().max(1.0))
            })
    };
    let (why, key, want) = if close(&first, &right) {
        let twice: Vec<Vec<f32>> = right
            .iter()
            .map(|v| v.iter().map(|x| 2.9 * x).collect())
            .collect();
        if close(&second, &twice) {
            return None;
        }
        let no_momentum: Vec<Vec<f32>> = right
            .iter()
            .map(|v| v.iter().map(|x| 2.0 * x).collect())
            .collect();
        let (why, key) = if close(&second, &no_momentum) {
            (
                "the first step is right, the second moved as if no momentum were kept: \
                 `momentum` is this shard's buffer, which the next step must find again",
                "keep-the-momentum",
            )
        } else {
            ("the first step is right, the second is not", "")
        };
        (why, key, (second, twice))
    } else if close(&first, &after(&|r, i| 2.0 * avg(r, i))) {
        (
            "twice the average on 2 ranks: the sum of the ranks' gradients, not their mean",
            "avg-not-sum",
            (first, right),
        )
    } else if close(&first, &after(&|_, i| avg(0, i))) {
        (
            "both ranks updated with block 0 of the average: rank r owns block r",
            "wrong-block",
            (first, right),
        )
    } else if close(
        &first,
        &after(&|r, i| ((4 * r + i + 1) * (2 * r + 1)) as f32),
    ) {
        (
            "each rank updated with its own gradient's block, not the average over the \
             ranks: nothing was reduced",
            "never-reduced",
            (first, right),
        )
    } else if first.iter().flatten().all(|&x| x == 0.0) {
        (
            "the shard is unchanged: the update must be written into `shard`",
            "update-the-shard",
            (first, right),
        )
    } else {
        ("", "", (first, right))
    };
    let (got, want) = want;
    // A shard of another length reads as NaN, which no comparison accepts.
    let at = |v: &[Vec<f32>], r: usize, i: usize| v[r].get(i).copied().unwrap_or(f32::NAN);
    let (rank, i) = (0..2)
        .flat_map(|r| (0..4).map(move |i| (r, i)))
        .find(|&(r, i)| {
            let (g, w) = (at(&got, r, i), at(&want, r, i));
            (g - w).abs() > 1e-5 * w.abs().max(1.0) || g.is_nan()
        })?;
    let head = format!(
        "on 2 ranks with gradients [1, 2, …, 8] and 3 × that, lr 1 and momentum 0.9, rank \
         {rank}'s shard element {i} is {} where {} is expected (shards {:?} and {:?})",
        at(&got, rank, i),
        at(&want, rank, i),
        got[0],
        got[1]
    );
    Some(match (why, key) {
        ("", _) => head,
        (why, "") => format!("{head}: {why}"),
        (why, key) => format!("{head}: {why}\nhint: {key}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use collectives::{Communicator, Input, ReduceOp};
    use trainers::comm::{buffer, buffer_mut};
    use trainers::zero::sgd_update;

    /// A gradient path with one of the known mistakes.
    #[derive(Clone, Copy)]
    enum Mistake {
        /// ReduceOp::Sum where Avg belongs.
        Sum,
        /// The whole average by all-reduce, then block 0 on every rank.
        BlockZero,
        /// The right values through an all-reduce (twice the bytes).
        AllReduce,
        /// A fresh momentum buffer at every step.
        NoMomentum,
        /// This rank's own gradient's block: no collective at all.
        NeverReduced,
        /// The update computed into a copy of the shard.
        CopyUpdated,
    }

    impl GradPath for Mistake {
        fn step(
            &self,
            comm: &dyn Communicator,
            grad: &Tensor,
            shard: &mut Tensor,
            momentum: &mut Option<Tensor>,
            sgd: SgdStep,
        ) -> trainers::Result<()> {
            let n = shard.numel() as i64;
            let r = comm.rank() as i64;
            let mut mine = shard.f_zeros_like()?;
            match self {
                Mistake::Sum | Mistake::NoMomentum => {
                    let op = if let Mistake::Sum = self {
                        ReduceOp::Sum
                    } else {
                        ReduceOp::Avg
                    };
                    comm.reduce_scatter(
                        Input::Buffer(buffer(grad)?),
                        &mut buffer_mut(&mut mine)?,
                        op,
                    )?;
                }
                Mistake::NeverReduced | Mistake::CopyUpdated => {
                    mine = grad.f_narrow(0, r * n, n)?.copy();
                    if let Mistake::CopyUpdated = self {
                        comm.reduce_scatter(
                            Input::Buffer(buffer(grad)?),
                            &mut buffer_mut(&mut mine)?,
                            ReduceOp::Avg,
                        )?;
                        let mut copy = shard.copy();
                        return sgd_update(&mut copy, &mine, momentum, sgd);
                    }
                }
                Mistake::BlockZero | Mistake::AllReduce => {
                    let mut all = grad.copy();
                    comm.all_reduce(Input::InPlace, &mut buffer_mut(&mut all)?, ReduceOp::Avg)?;
                    let at = if let Mistake::BlockZero = self {
                        0
                    } else {
                        r * n
                    };
                    mine = all.f_narrow(0, at, n)?.copy();
                }
            }
            if let Mistake::NoMomentum = self {
                return sgd_update(shard, &mine, &mut None, sgd);
            }
            sgd_update(shard, &mine, momentum, sgd)
        }
    }

    fn message(m: Mistake) -> String {
        check_path(Arc::new(m)).unwrap_err().to_string()
    }

    #[test]
    fn sum_instead_of_average_is_named_with_the_element() {
        let msg = message(Mistake::Sum);
        assert!(
            msg.contains("rank 0's shard element 0 is -4 where -2 is expected"),
            "{msg}"
        );
        assert!(msg.contains("hint: avg-not-sum"), "{msg}");
    }

    #[test]
    fn block_of_another_rank_is_named() {
        let msg = message(Mistake::BlockZero);
        assert!(
            msg.contains("rank 1's shard element 0 is -2 where -10 is expected"),
            "{msg}"
        );
        assert!(msg.contains("hint: wrong-block"), "{msg}");
    }

    #[test]
    fn lost_momentum_is_named() {
        let msg = message(Mistake::NoMomentum);
        assert!(msg.contains("hint: keep-the-momentum"), "{msg}");
    }

    #[test]
    fn all_reduce_then_slice_is_named_by_its_bytes() {
        let msg = message(Mistake::AllReduce);
        assert!(msg.contains("sends 4096 bytes per rank"), "{msg}");
        assert!(msg.contains("hint: all-reduce-not-reduce-scatter"), "{msg}");
    }

    #[test]
    fn own_gradient_never_reduced_is_named() {
        let msg = message(Mistake::NeverReduced);
        assert!(
            msg.contains("rank 0's shard element 0 is -1 where -2 is expected"),
            "{msg}"
        );
        assert!(msg.contains("hint: never-reduced"), "{msg}");
    }

    #[test]
    fn an_update_that_never_reached_the_shard_is_named() {
        let msg = message(Mistake::CopyUpdated);
        assert!(msg.contains("the shard is unchanged"), "{msg}");
        assert!(msg.contains("hint: update-the-shard"), "{msg}");
    }

    #[test]
    fn the_solution_passes_the_probe() {
        assert_eq!(diagnose(Arc::new(ReduceScatterStep)), None);
    }
}
