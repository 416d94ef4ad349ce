//! The pieces of a training loop every trainer shares: the loss, accuracy, exact
//! metric tallies (summed across ranks), evaluation, throughput timing, and the seed
//! of any per-step randomness. [`crate::metrics`] writes the results.
//!
//! The step itself is a seam, [`step::TrainStep`] ([`step::SgdStep`] is the real
//! one), timed phase by phase with a [`phases::PhaseClock`]; [`baseline`] is the
//! single-device loop around it that the workshop starts from.
//!
//! ```no_run
//! use tch::nn::{ModuleT, VarStore};
//! use trainers::{data, models, optim::{Sgd, SgdConfig}, sampler::DistributedSampler, train};
//! let (train_set, test_set) = (data::synthetic(512, 1)?, data::synthetic(128, 2)?);
//! let vs = VarStore::new(tch::Device::Cpu);
//! let model = models::cnn().build(&vs.root());
//! let mut opt = Sgd::new(&vs, SgdConfig::new(0.05).momentum(0.9))?;
//! let mut timer = train::StepTimer::start();
//! for batch in DistributedSampler::new(train_set.len(), 1, 0)?.indices().chunks(64) {
//!     let (x, y) = train_set.batch(batch)?;
//!     let logits = model.forward_t(&x, true);
//!     opt.backward_step(&train::cross_entropy(&logits, &y)?)?;
//!     let rate = timer.lap(batch.len());
//!     println!("acc {:.3} at {rate:.0} samples/s", train::accuracy(&logits, &y)?);
//! }
//! let eval = DistributedSampler::for_eval(test_set.len(), 1, 0)?;
//! let val = train::evaluate(&model, &test_set, &eval, 256, None)?;
//! println!("val loss {:.4} acc {:.4}", val.loss(), val.accuracy());
//! # Ok::<(), trainers::Error>(())
//! ```

use std::time::{Duration, Instant};

use collectives::{BufferMut, Communicator, Input, ReduceOp};
use tch::nn::ModuleT;
use tch::{Kind, Reduction, Tensor};

use crate::data::Dataset;
use crate::sampler::{DistributedSampler, Tail};
use crate::{Error, Result};

pub mod baseline;
pub mod pending;
pub mod phases;
pub mod step;
pub mod window;

/// A loss that *averages* over the batch: `(outputs, targets) -> scalar`.
///
/// The parallel trainers rely on the average: it is what makes the sum of the pieces'
/// gradients equal to the whole batch's gradient.
pub type LossFn = fn(&Tensor, &Tensor) -> Result<Tensor>;

/// Mean cross-entropy of `logits` `[N, C]` against class `labels` `[N]` (the loss to
/// call `backward` on): `F.cross_entropy(logits, labels)`.
pub fn cross_entropy(logits: &Tensor, labels: &Tensor) -> Result<Tensor> {
    Ok(logits.f_cross_entropy_loss::<Tensor>(labels, None, Reduction::Mean, -100, 0.0)?)
}

/// The fraction of rows of `logits` whose arg-max is the label (0 for no rows).
pub fn accuracy(logits: &Tensor, labels: &Tensor) -> Result<f64> {
    let n = labels.numel();
    if n == 0 {
        return Ok(0.0);
    }
    Ok(correct(logits, labels)? as f64 / n as f64)
}

/// How many rows of `logits` have their arg-max at the label.
fn correct(logits: &Tensor, labels: &Tensor) -> Result<u64> {
    let hits = logits
        .f_argmax(-1, false)?
        .f_eq_tensor(labels)?
        .f_sum(Kind::Int64)?
        .f_int64_value(&[])?;
    Ok(hits.max(0) as u64)
}

/// Loss sums are kept in fixed point with this many fractional bits.
pub const LOSS_FRACTION_BITS: i32 = 32;

/// Loss sum, correct predictions and example count over some examples; the sum is
/// exact and independent of how the examples were split into batches or ranks.
///
/// Each example's cross-entropy (an `f32` from libtorch) is rounded to a multiple of
/// 2^-[`LOSS_FRACTION_BITS`] and summed as an integer. Integer addition is
/// associative, so the same per-example losses give the very same bits however they
/// are grouped: summed in one process or over N ranks' shards by
/// [`all_reduce`](Tally::all_reduce), which a floating-point sum would not promise.
/// (The per-example losses themselves can differ in their last bits with the batch
/// an example was evaluated in: see [`evaluate`].) Per example the
/// rounding is below 2^-33 ≈ 1.2e-10, far below `f32` resolution near 1. A
/// non-finite example loss makes [`loss_sum`](Tally::loss_sum) NaN; a sum too
/// large for the fixed point (above about 2·10⁹ / world size: a diverged model)
/// makes it +∞.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    loss_units: i64,
    correct: u64,
    count: u64,
    non_finite: u64,
    overflow: bool,
}

impl Tally {
    /// An empty tally.
    pub fn new() -> Tally {
        Tally::default()
    }

    /// Adds one batch: per-example losses and hits of `logits` `[N, C]` against
    /// `labels` `[N]`. Computed without gradient tracking.
    pub fn add_batch(&mut self, logits: &Tensor, labels: &Tensor) -> Result<()> {
        let (losses, hits) = tch::no_grad(|| -> Result<(Vec<f64>, u64)> {
            let per = logits
                .f_detach()?
                .f_cross_entropy_loss::<Tensor>(labels, None, Reduction::None, -100, 0.0)?
                .f_to_kind(Kind::Double)?
                .f_to_device(tch::Device::Cpu)?;
            Ok((Vec::<f64>::try_from(&per)?, correct(logits, labels)?))
        })?;
        self.add_examples(&losses, hits);
        Ok(())
    }

    /// Adds examples given their losses and how many of them were predicted
    /// correctly: the exact, integer part of [`add_batch`](Self::add_batch).
    pub(crate) fn add_examples(&mut self, losses: &[f64], hits: u64) {
        let scale = f64::from(LOSS_FRACTION_BITS).exp2();
        for &l in losses {
            if !l.is_finite() {
                self.non_finite += 1;
                continue;
            }
            // f64 → i64 saturates; anything near the limit is an overflow anyway.
            let units = (l * scale).round();
            match (units < 9.0e18)
                .then(|| self.loss_units.checked_add(units as i64))
                .flatten()
            {
                Some(sum) => self.loss_units = sum,
                None => self.overflow = true,
            }
        }
        self.correct += hits;
        self.count += losses.len() as u64;
    }

    /// Adds another tally (e.g. one batch's) into this one.
    pub fn merge(&mut self, other: &Tally) {
        match self.loss_units.checked_add(other.loss_units) {
            Some(sum) => self.loss_units = sum,
            None => self.overflow = true,
        }
        self.correct += other.correct;
        self.count += other.count;
        self.non_finite += other.non_finite;
        self.overflow |= other.overflow;
    }

    /// Replaces this rank's tally by the sum over all ranks (one `all_reduce` of five
    /// `i64`s). Every rank must call it.
    pub fn all_reduce(&mut self, comm: &dyn Communicator) -> Result<()> {
        // Bound each rank's share so the sum of `world` shares cannot overflow i64.
        let cap = i64::MAX / comm.world_size().max(1) as i64;
        let overflow = self.overflow || self.loss_units > cap;
        let as_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let mut v = [
            if overflow { 0 } else { self.loss_units },
            as_i64(self.correct),
            as_i64(self.count),
            as_i64(self.non_finite),
            i64::from(overflow),
        ];
        comm.all_reduce(
            Input::InPlace,
            &mut BufferMut::from_slice(&mut v),
            ReduceOp::Sum,
        )?;
        let as_u64 = |v: i64| u64::try_from(v).unwrap_or(0);
        *self = Tally {
            loss_units: v[0],
            correct: as_u64(v[1]),
            count: as_u64(v[2]),
            non_finite: as_u64(v[3]),
            overflow: v[4] != 0,
        };
        Ok(())
    }

    /// Examples counted.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Examples predicted correctly.
    pub fn correct(&self) -> u64 {
        self.correct
    }

    /// Sum of the per-example losses (NaN if any was not finite, +∞ on overflow).
    pub fn loss_sum(&self) -> f64 {
        if self.non_finite > 0 {
            f64::NAN
        } else if self.overflow {
            f64::INFINITY
        } else {
            self.loss_units as f64 * f64::from(-LOSS_FRACTION_BITS).exp2()
        }
    }

    /// Mean loss per example (NaN when empty).
    pub fn loss(&self) -> f64 {
        self.loss_sum() / self.count as f64
    }

    /// Fraction predicted correctly (NaN when empty).
    pub fn accuracy(&self) -> f64 {
        self.correct as f64 / self.count as f64
    }
}

/// Loss and accuracy of `model` (in eval mode, without gradients) over this rank's
/// share of `data`, summed over all ranks when `comm` is given, so every rank gets
/// the metrics of the whole set.
///
/// **What is exact.** The sum over ranks is exact ([`Tally`] adds in fixed point):
/// N ranks give the very bits one process gets when it evaluates the same shards
/// with the same batch size. What is *not* promised is that an example's logits, and
/// so its loss, are independent of the batch it is evaluated in: libtorch's CPU
/// `Linear` runs MKL's `sgemm`, which picks its kernel (and with it the order in
/// which the 1,600 products of the CNN's `fc1` are summed) by the number of rows. On
/// an AVX-512 Xeon a row's result in a batch of up to 15 rows differs in the last
/// bits from the same row in a batch of 16 or more; with AVX2 kernels the cut-offs
/// are elsewhere. So when the world size changes how the set is batched, the
/// metrics agree with one process to about 1e-6 relative in loss, and exactly in
/// accuracy except for an example whose two top logits are that close.
///
/// The sampler must be in [`Tail::Exact`] mode
/// ([`DistributedSampler::for_eval`]): padding would count some examples twice and
/// skew the result. Without `comm` the sampler must cover the whole set (world size
/// 1); with it, its rank and world size must be the communicator's.
pub fn evaluate(
    model: &dyn ModuleT,
    data: &Dataset,
    sampler: &DistributedSampler,
    batch_size: usize,
    comm: Option<&dyn Communicator>,
) -> Result<Tally> {
    if sampler.tail() != Tail::Exact {
        return Err(Error::InvalidArgument(format!(
            "evaluate needs a sampler in exact mode (DistributedSampler::for_eval), \
             not {:?}: padding would count examples twice",
            sampler.tail()
        )));
    }
    if sampler.dataset_len() != data.len() {
        return Err(Error::InvalidArgument(format!(
            "the sampler covers {} examples but the data set holds {}",
            sampler.dataset_len(),
            data.len()
        )));
    }
    let (rank, world) = comm.map_or((0, 1), |c| (c.rank(), c.world_size()));
    if (sampler.rank(), sampler.world_size()) != (rank, world) {
        return Err(Error::InvalidArgument(format!(
            "sampler is rank {} of {} but the {} is rank {rank} of {world}",
            sampler.rank(),
            sampler.world_size(),
            if comm.is_some() {
                "communicator"
            } else {
                "single process (no communicator)"
            },
        )));
    }
    if batch_size == 0 {
        return Err(Error::InvalidArgument("batch size 0".into()));
    }
    let mut tally = Tally::new();
    for batch in sampler.indices().chunks(batch_size) {
        let (x, y) = data.batch(batch)?;
        let logits = tch::no_grad(|| model.forward_t(&x, false));
        tally.add_batch(&logits, &y)?;
    }
    if let Some(comm) = comm {
        tally.all_reduce(comm)?;
    }
    Ok(tally)
}

/// Measures throughput: samples per second between laps and overall.
#[derive(Debug, Clone)]
pub struct StepTimer {
    start: Instant,
    last: Instant,
    samples: u64,
}

impl StepTimer {
    /// Starts timing now.
    pub fn start() -> StepTimer {
        let now = Instant::now();
        StepTimer {
            start: now,
            last: now,
            samples: 0,
        }
    }

    /// Records `samples` processed since the previous lap and returns their rate
    /// in samples per second.
    pub fn lap(&mut self, samples: usize) -> f64 {
        let now = Instant::now();
        let dt = now.duration_since(self.last).as_secs_f64();
        self.last = now;
        self.samples += samples as u64;
        rate(samples as u64, dt)
    }

    /// Samples recorded by all laps.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Time since [`start`](Self::start).
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// Samples per second from the start to the last lap.
    pub fn samples_per_s(&self) -> f64 {
        rate(
            self.samples,
            self.last.duration_since(self.start).as_secs_f64(),
        )
    }
}

fn rate(samples: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        samples as f64 / seconds
    } else {
        0.0
    }
}

/// The seed of any randomness inside training step `step` of `epoch` (dropout,
/// augmentation): a SplitMix64 mix of the three, so resuming from a checkpoint's
/// counters reproduces it (libtorch's generator state itself cannot be saved through
/// tch; see [`crate::checkpoint`]). Use as `tch::manual_seed(step_seed(..) as i64)`.
pub fn step_seed(seed: u64, epoch: u64, step: u64) -> u64 {
    fn mix(mut z: u64) -> u64 {
        z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    mix(mix(mix(seed) ^ epoch) ^ step)
}

#[cfg(test)]
pub(crate) mod tests;
