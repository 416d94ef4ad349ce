//! Lab 13: sharded data parallelism. The same MLP trains with plain DDP and
//! with ZeRO-1, ZeRO-2 and ZeRO-3 (FSDP), trainers' [`Zero`](trainers::zero::Zero):
//! the learner writes the gradient path every ZeRO stage runs
//! ([`exercise::YourGradPath`], a [`GradPath`]: reduce-scatter, then the
//! shard's update); the solution is trainers' own [`ReduceScatterStep`]. The
//! program checks each stage against DDP and measures what each holds and
//! moves per rank.

pub mod exercise;

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
    let e = check::equivalence(stage, &check_config(), world, 16, 10, data, path(variant))
        .map_err(lab_error)?;
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

/// One call of `variant`'s gradient path on 2 thread ranks, on a gradient of
/// 1,024 f32: the bytes rank 0 sends if its collectives run the ring
/// algorithm, and what one reduce-scatter of it sends.
pub fn bytes_sent(variant: Variant) -> trainers::Result<(f64, f64)> {
    let path = path(variant);
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
    let data = data::synthetic(3 * 16 * 10, 13).map_err(lab_error)?;
    let mut worst = 0f64;
    for world in [2, 3] {
        for stage in [Stage::One, Stage::Two, Stage::Three] {
            worst = worst.max(judge(variant, stage, world, &data)?.max_diff);
        }
    }
    let (sent, shard) = bytes_sent(variant).map_err(lab_error)?;
    if sent > shard {
        return Err(LabError::Wrong(format!(
            "the results are right, but one step of your gradient path on 2 ranks sends {sent} \
             bytes per rank where a reduce-scatter sends {shard}: every rank received the whole \
             average and kept one block. Which collective delivers only your block?"
        )));
    }
    Ok(format!(
        "ZeRO-1, ZeRO-2 and ZeRO-3 train like DDP on 2 and 3 ranks (max |Δ| {worst:.1e} after \
         10 steps), and one gradient path sends {sent} bytes per rank, a reduce-scatter's"
    ))
}
