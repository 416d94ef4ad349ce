//! The check that every ZeRO stage trains like plain data parallelism, and
//! the measurement of what each holds and moves: shared by trainers' tests and
//! the workshop's lab 13.
//!
//! Ranks are threads, each with its own reference-backend communicator over
//! shared memory (metered) and its own [`Zero`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use tch::Tensor;

use super::{GradPath, Memory, ReduceScatterStep, SgdStep, Stage, Zero, ZeroConfig};
use crate::data::Dataset;
/// What [`equivalence`] measured: the largest difference, and how far the
/// reference moved.
pub use crate::parity::Equivalence;
use crate::parity::{tensor_diff, worst};
use crate::thread_ranks::with_data_ranks;
use crate::traffic::{Counted, Metered, Traffic};
use crate::{Error, Result};

/// The checks' SGD: 10 steps move every parameter well beyond the tolerance.
pub const SGD: SgdStep = SgdStep {
    lr: 0.05,
    momentum: 0.9,
};
/// Seed of the unsplit model's parameters.
const SEED: i64 = 13;

/// Rank `rank`'s rows of global step `step`: `b` rows each, rank after rank,
/// images flattened.
fn rows(
    data: &Dataset,
    step: usize,
    rank: usize,
    world: usize,
    b: usize,
) -> Result<(Tensor, Tensor)> {
    let (x, y) = data.rows((step * world + rank) * b, b)?;
    Ok((x.f_flatten(1, -1)?, y))
}

/// `world` ranks train `config` with `stage` for `steps` steps of `b` rows
/// each; every rank's final parameters (gathered where sharded) and rank 0's
/// traffic.
fn train(
    stage: Stage,
    config: &ZeroConfig,
    world: usize,
    b: usize,
    steps: usize,
    data: &Dataset,
    path: Arc<dyn GradPath>,
) -> Result<Vec<Vec<Tensor>>> {
    let out = with_data_ranks(world, data, Duration::from_secs(60), |rank, comm, d| {
        let init = config.init(SEED)?;
        let mut z = Zero::new(stage, config, &init, rank, world, path.clone(), SGD)?;
        for s in 0..steps {
            let (x, y) = rows(&d, s, rank, world, b)?;
            z.step(comm.as_ref(), &x, &y)?;
        }
        z.parameters(comm.as_ref())
    })?;
    out.into_iter().collect()
}

/// `stage` (its shard updates through `path`) against plain data parallelism
/// (trainers' own all-reduce), `world` ranks, `steps` SGD steps of `b` rows
/// per rank, from the same start. Both average the same gradients; the
/// reduce-scatter may add them in another order than the all-reduce, so the
/// parameters may differ by rounding, compounded over the steps.
pub fn equivalence(
    stage: Stage,
    config: &ZeroConfig,
    world: usize,
    b: usize,
    steps: usize,
    data: &Dataset,
    path: Arc<dyn GradPath>,
) -> Result<Equivalence> {
    tch::set_num_threads(1);
    let want = train(
        Stage::Ddp,
        config,
        world,
        b,
        steps,
        data,
        Arc::new(ReduceScatterStep),
    )?;
    let got = train(stage, config, world, b, steps, data, path)?;
    let init = config.init(SEED)?;
    let mut out = Equivalence {
        max_diff: 0.0,
        moved: 0.0,
    };
    let reference = want
        .first()
        .ok_or_else(|| Error::InvalidArgument("no ranks".into()))?;
    for (i, (a, b)) in reference.iter().zip(&init).enumerate() {
        out.moved = worst(out.moved, tensor_diff(&format!("parameter {i}"), a, b)?);
    }
    for rank in got.iter().chain(&want) {
        for (i, (a, b)) in rank.iter().zip(reference).enumerate() {
            let d = tensor_diff(&format!("parameter {i}"), a, b)?;
            out.max_diff = worst(out.max_diff, d);
        }
    }
    Ok(out)
}

/// What [`measure`] saw on rank 0.
#[derive(Debug, Clone, Copy)]
pub struct Measured {
    /// The most model state held at once, in elements.
    pub peak: Memory,
    /// Payload bytes per step: all-reduce, reduce-scatter, all-gather.
    pub payload: [u64; 3],
    /// Bytes sent per step if each collective runs the ring algorithm.
    pub ring_bytes_sent: f64,
    /// The median step time.
    pub step: Duration,
    /// The last step's loss.
    pub loss: f64,
}

/// `world` thread ranks train `config` with `stage` for `steps` steps of `b`
/// rows per rank; rank 0's [`Measured`]. The first two steps are not timed.
pub fn measure(
    stage: Stage,
    config: &ZeroConfig,
    world: usize,
    b: usize,
    steps: usize,
    data: &Dataset,
) -> Result<Measured> {
    let threads = tch::get_num_threads();
    let mut out = with_data_ranks(world, data, Duration::from_secs(60), |rank, comm, d| {
        tch::set_num_threads(threads);
        let traffic = Traffic::new();
        let comm = Metered::new(comm, traffic.clone());
        let init = config.init(SEED)?;
        let mut z = Zero::new(
            stage,
            config,
            &init,
            rank,
            world,
            Arc::new(ReduceScatterStep),
            SGD,
        )?;
        let kinds = [
            Counted::AllReduce,
            Counted::ReduceScatter,
            Counted::AllGather,
        ];
        let (mut times, mut payload, mut sent, mut loss) = (Vec::new(), [0; 3], 0.0, 0.0);
        for s in 0..steps {
            let (x, y) = rows(&d, s, rank, world, b)?;
            let before: Vec<u64> = kinds.iter().map(|&k| traffic.bytes(k)).collect();
            let sent0 = traffic.ring_bytes_sent(world);
            let t = Instant::now();
            loss = z.step(&comm, &x, &y)?;
            if s >= 2 {
                times.push(t.elapsed());
            }
            for (p, (&k, b0)) in payload.iter_mut().zip(kinds.iter().zip(&before)) {
                *p = traffic.bytes(k) - b0;
            }
            sent = traffic.ring_bytes_sent(world) - sent0;
        }
        times.sort();
        Ok(Measured {
            peak: z.peak_memory(),
            payload,
            ring_bytes_sent: sent,
            step: times.get(times.len() / 2).copied().unwrap_or_default(),
            loss,
        })
    })?;
    if out.is_empty() {
        return Err(Error::InvalidArgument("no ranks".into()));
    }
    out.swap_remove(0)
}
