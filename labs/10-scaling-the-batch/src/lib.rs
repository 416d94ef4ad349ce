//! Lab 10: scaling the batch. The same MLP trains on Fashion-MNIST at
//! effective batches 64 to 1024, reached with more ranks and with gradient
//! accumulation (`no_sync`), under the linear and the square-root learning-rate
//! rule with and without warm-up ([`trainers::lr`]), and with gradients
//! all-reduced as f32, fp16 or bf16. The learner writes the compression hook
//! ([`exercise::YourCompression`], a [`GradSync`] that trainers' `Ddp` runs);
//! the solution is trainers' own [`Compressed`].
//!
//! The optional stretch goal, the linear-scaling rule with its warm-up, is the
//! learner's `src/stretch.rs`, compiled only by its own check
//! `tests/stretch.rs`; [`schedule`] judges it, and its solution
//! ([`solution::lr_at`]) is [`trainers::lr`]'s schedule.

pub mod exercise;
pub mod schedule;
pub mod solution;

pub use labkit_torch::{fashion_mnist, lab_error};
use std::sync::Arc;
use std::time::{Duration, Instant};

use labkit::{LabError, Variant};
use tch::nn::{self, OptimizerConfig};
use tch::{Device, Kind, Tensor};
use trainers::data::Dataset;
use trainers::ddp::{self, Compressed, Ddp, DdpOptions, GradSync, Standard};
use trainers::lr::{LrSchedule, Scaling};
use trainers::models::{self, MlpConfig};
use trainers::sampler::DistributedSampler;
use trainers::traffic::{Counted, Metered, Traffic};
use trainers::train::Tally;

/// How the gradients travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// f32, `ReduceOp::Avg` (trainers' own).
    F32,
    /// fp16 through the compression hook.
    Fp16,
    /// bf16 through the compression hook.
    Bf16,
}

impl Wire {
    /// The name in labels.
    pub fn name(self) -> &'static str {
        match self {
            Wire::F32 => "f32",
            Wire::Fp16 => "fp16",
            Wire::Bf16 => "bf16",
        }
    }
}

/// `variant`'s way of moving gradients as `wire`: f32 is always trainers' own;
/// fp16 and bf16 are the learner's hook or trainers' [`Compressed`].
pub fn sync(variant: Variant, wire: Wire) -> Arc<dyn GradSync> {
    let (kind, ours) = match wire {
        Wire::F32 => return Arc::new(Standard),
        Wire::Fp16 => (Kind::Half, Compressed::fp16()),
        Wire::Bf16 => (Kind::BFloat16, Compressed::bf16()),
    };
    match variant {
        Variant::Exercise => Arc::new(exercise::YourCompression { kind }),
        Variant::Solution => Arc::new(ours),
    }
}

/// The self-check (`cargo lab check 10`): on 2 and 3 ranks, fp16 and bf16
/// averages of random gradients are within the stated rounding of the f32
/// average and moved half its bytes; fp16 gradients near its largest value
/// (whose sum overflows) average without overflowing; a mean beyond fp16's
/// range is an error, not infinities in the weights.
pub fn check(variant: Variant) -> Result<String, LabError> {
    check_hooks(|wire| sync(variant, wire))
}

/// [`check`] for any hooks: `hook(wire)` is the hook for `wire`. First the
/// probe of [`diagnose`] on each 16-bit wire, then the measurements.
pub fn check_hooks(hook: impl Fn(Wire) -> Arc<dyn GradSync>) -> Result<String, LabError> {
    for wire in [Wire::Fp16, Wire::Bf16] {
        if let Some(why) = diagnose(hook(wire)) {
            return Err(LabError::Wrong(format!("{}: {why}", wire.name())));
        }
    }
    let mut said = Vec::new();
    for (wire, u) in [(Wire::Fp16, 2f64.powi(-11)), (Wire::Bf16, 2f64.powi(-8))] {
        for world in [2, 3] {
            let m = ddp::check::compression(world, hook(wire), 10_000, 1.0).map_err(lab_error)?;
            // n casts (u each) and n − 1 additions of partial sums no larger
            // than max|g| (u each), then an exact cast back to f32.
            let bound = (2.0 * world as f64 + 1.0) * u * m.max_grad;
            // NaN (an overflow turned to inf − inf) must fail too.
            if m.max_diff.is_nan() || m.max_diff > bound {
                return Err(LabError::Wrong(format!(
                    "{} on {world} ranks: max |your mean − f32 mean| = {:.3e}, more than the \
                     rounding allows ({bound:.3e}): is every rank's share in the sum, divided \
                     by the world size once?",
                    wire.name(),
                    m.max_diff
                )));
            }
            if m.max_diff == 0.0 || m.wire_bytes * 2 != m.f32_bytes {
                return Err(LabError::Wrong(format!(
                    "{} on {world} ranks: the all-reduce moved {} bytes where f32 moves {} \
                     (a 16-bit wire moves half): is the tensor you all-reduce the {:?} copy?\n\
                     hint: send-the-16-bit-copy",
                    wire.name(),
                    m.wire_bytes,
                    m.f32_bytes,
                    wire
                )));
            }
        }
        said.push(format!("{} within rounding, half the bytes", wire.name()));
    }
    // Gradients up to ~4 × 15,000: their sum on 2 ranks passes 65,504, their
    // mean does not.
    let near_limit = "fp16 gradients up to ~60,000, whose sum overflows fp16 where their mean \
                      does not";
    let m = match ddp::check::compression(2, hook(Wire::Fp16), 10_000, 15_000.0) {
        Ok(m) => m,
        Err(trainers::Error::InvalidArgument(e)) => {
            return Err(LabError::Wrong(format!(
                "{near_limit}: your hook failed ({e}); the sum of the ranks' gradients \
                 overflowed where their mean would not\nhint: divide-before-cast"
            )));
        }
        Err(e) => return Err(lab_error(e)),
    };
    if m.max_diff.is_nan() || m.max_diff > 5.0 * 2f64.powi(-11) * m.max_grad {
        return Err(LabError::Wrong(format!(
            "{near_limit}: max |Δ| = {:.3e}; the sum of the ranks' gradients overflowed \
             where their mean would not\nhint: divide-before-cast",
            m.max_diff
        )));
    }
    said.push("no overflow near fp16's limit".into());
    match ddp::check::compression(2, hook(Wire::Fp16), 10_000, 40_000.0) {
        Err(trainers::Error::InvalidArgument(_)) => said.push("an overflow is an error".into()),
        Err(e) => return Err(lab_error(e)),
        Ok(m) => {
            return Err(LabError::Wrong(format!(
                "fp16 gradients up to {:.0} (their mean is beyond 65,504): the hook returned \
                 Ok with max |Δ| = {:e}: an infinity written into the gradients ruins the \
                 weights; the hook must say so with an Err\nhint: unchecked-overflow",
                m.max_grad, m.max_diff
            )));
        }
    }
    Ok(said.join("; "))
}

/// Names the mistake in compression hook `hook`, if it is one we know, from
/// one call on 2 thread ranks holding `[1, 2, 3, 4]` and `[3, 6, 9, 12]`
/// (every value, sum and mean exact in fp16 and bf16): the mean is
/// `[2, 4, 6, 8]`. `None` when the hook averages, or fails (the check then
/// reports its error).
pub fn diagnose(hook: Arc<dyn GradSync>) -> Option<String> {
    let out = collectives::thread_ranks::with_ranks(
        2,
        collectives::transport::TransportKind::Shm,
        Duration::from_secs(10),
        |rank, comm| -> trainers::Result<Vec<f32>> {
            let base = Tensor::from_slice(&[1f32, 2.0, 3.0, 4.0]);
            let mut flat = base.f_mul_scalar(2.0 * rank as f64 + 1.0)?;
            hook.all_reduce_mean(&comm, &mut flat)?;
            Ok(Vec::<f32>::try_from(&flat.f_to_kind(Kind::Float)?).unwrap_or_default())
        },
    )
    .ok()?;
    let got: Vec<Vec<f32>> = out.into_iter().collect::<trainers::Result<_>>().ok()?;
    let mean = [2f32, 4.0, 6.0, 8.0];
    let (why, key) = if got.iter().all(|g| g.as_slice() == mean) {
        return None;
    } else if got.iter().all(|g| g.as_slice() == [4f32, 8.0, 12.0, 16.0]) {
        (
            "the sum, twice the mean: is the world size divided out?",
            "avg-not-sum",
        )
    } else if got.iter().all(|g| g.as_slice() == [1f32, 2.0, 3.0, 4.0]) {
        (
            "half the mean: the world size was divided out twice",
            "divided-twice",
        )
    } else if got[1].as_slice() == [3f32, 6.0, 9.0, 12.0] {
        (
            "rank 1's own gradients, untouched: DDP reads the result from `flat`",
            "copy-back-into-flat",
        )
    } else {
        ("", "")
    };
    // The first wrong element, as a value (not bytes).
    let (rank, i) = (0..2)
        .flat_map(|r| (0..4).map(move |i| (r, i)))
        .find(|&(r, i)| got[r].get(i) != Some(&mean[i]))?;
    let head = format!(
        "ranks holding [1, 2, 3, 4] and [3, 6, 9, 12] got {:?} and {:?}; rank {rank} element \
         {i}: got {}, expected {}",
        got[0],
        got[1],
        got[rank].get(i).copied().unwrap_or(f32::NAN),
        mean[i]
    );
    Some(if key.is_empty() {
        head
    } else {
        format!("{head}: {why}\nhint: {key}")
    })
}

/// One training configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Ranks (threads of this process, each with its own communicator).
    pub world: usize,
    /// Batch per rank per micro-batch.
    pub batch: usize,
    /// Micro-batches per optimizer step (all but the last under `no_sync`).
    pub accumulate: usize,
    /// The learning-rate rule.
    pub scaling: Scaling,
    /// Whether the rate warms up.
    pub warmup: bool,
    /// How gradients travel.
    pub wire: Wire,
}

impl Config {
    /// The effective batch: ranks × batch × accumulated micro-batches.
    pub fn effective_batch(&self) -> usize {
        self.world * self.batch * self.accumulate
    }

    /// What charts and tables call it.
    pub fn label(&self) -> String {
        let mut s = format!(
            "B={} ({}r×{}×{}) {}",
            self.effective_batch(),
            self.world,
            self.batch,
            self.accumulate,
            self.scaling.name()
        );
        if self.warmup {
            s.push_str("+warm-up");
        }
        if self.wire != Wire::F32 {
            s.push(' ');
            s.push_str(self.wire.name());
        }
        s
    }
}

/// What every configuration shares.
#[derive(Debug, Clone)]
pub struct Budget {
    /// Training samples seen, whatever the batch (so every run sees the same data).
    pub samples: usize,
    /// The rate tuned at [`Self::base_batch`].
    pub base_lr: f64,
    /// The batch the base rate was tuned at.
    pub base_batch: usize,
    /// Samples over which the rate warms up.
    pub warmup_samples: usize,
    /// Evaluate after about every this many samples.
    pub eval_every: usize,
    /// Test examples in each evaluation (the first ones).
    pub eval_rows: usize,
}

/// What one configuration's training measured.
#[derive(Debug, Clone)]
pub struct Trained {
    /// (training seconds, test accuracy) after each evaluation, from (0, start).
    pub curve: Vec<[f64; 2]>,
    /// Optimizer steps taken.
    pub steps: usize,
    /// The learning rate after warm-up.
    pub lr: f64,
    /// All-reduce payload per optimizer step, bytes (0 on one rank).
    pub bytes_per_step: f64,
    /// Training seconds in all (evaluations excluded).
    pub seconds: f64,
}

impl Trained {
    /// The last evaluation's accuracy.
    pub fn final_accuracy(&self) -> f64 {
        self.curve.last().map_or(0.0, |p| p[1])
    }

    /// Training seconds until the test accuracy first reached `target`.
    pub fn time_to(&self, target: f64) -> Option<f64> {
        self.curve.iter().find(|p| p[1] >= target).map(|p| p[0])
    }
}

/// Trains `cfg` on `train` and evaluates rank 0's model on `test` as it goes.
/// Every configuration starts from the same weights (seed 0) and sees the
/// same number of samples; only the step count and the rate differ.
pub fn train(
    variant: Variant,
    cfg: &Config,
    budget: &Budget,
    train: &Dataset,
    test: &Dataset,
) -> Result<Trained, LabError> {
    let eff = cfg.effective_batch();
    let steps = (budget.samples / eff).max(1);
    let schedule = LrSchedule::new(
        budget.base_lr,
        budget.base_batch,
        eff,
        cfg.scaling,
        if cfg.warmup {
            budget.warmup_samples.div_ceil(eff) as u64
        } else {
            0
        },
    )
    .map_err(lab_error)?;
    let eval_steps = (budget.eval_every / eff).max(1);
    // Only rank 0 evaluates; a Tensor may move to its thread but not be shared.
    let test = std::sync::Mutex::new(Some(
        test.head(budget.eval_rows.min(test.len()))
            .map_err(lab_error)?,
    ));
    let sync = sync(variant, cfg.wire);
    let opts = DdpOptions {
        timeout: Duration::from_secs(60),
        ..DdpOptions::default()
    };
    let results = trainers::thread_ranks::with_data_ranks(
        cfg.world,
        train,
        opts.timeout,
        |rank, comm, data| {
            let test = match rank {
                0 => test.lock().ok().and_then(|mut t| t.take()),
                _ => None,
            };
            let traffic = Traffic::new();
            let comm = Box::new(Metered::new(comm, traffic.clone()));
            // libtorch's generator is global: ranks drawing their weights at the
            // same time would interleave draws, and rank 0 (whose weights the
            // others receive) would start differently in every configuration.
            let vs = nn::VarStore::new(Device::Cpu);
            let model =
                trainers::seed::seeded(0, || models::mlp(&MlpConfig::default()).build(&vs.root()));
            let mut ddp = Ddp::with_sync(model, &vs, comm, opts.clone(), sync.clone())?;
            let mut opt = nn::Sgd {
                momentum: 0.9,
                ..Default::default()
            }
            .build(&vs, schedule.lr_at(0))?;
            let mut sampler = DistributedSampler::new(data.len(), cfg.world, rank)?.with_seed(0);
            let mut order = sampler.indices().into_iter();
            let mut next_batch = |n: usize| -> trainers::Result<Vec<usize>> {
                let mut idx: Vec<usize> = order.by_ref().take(n).collect();
                if idx.len() < n {
                    sampler.set_epoch(sampler.epoch() + 1);
                    order = sampler.indices().into_iter();
                    idx.extend(order.by_ref().take(n - idx.len()));
                }
                Ok(idx)
            };
            let mut curve = vec![[0.0, accuracy(&ddp, &test)?]];
            let mut seconds = 0.0;
            for step in 0..steps {
                let t0 = Instant::now();
                opt.set_lr(schedule.lr_at(step as u64));
                opt.zero_grad();
                for m in 0..cfg.accumulate {
                    let (x, y) = data.batch(&next_batch(cfg.batch)?)?;
                    let k = cfg.accumulate as f64;
                    let loss = |l: &Tensor| l.cross_entropy_for_logits(&y) / k;
                    if m + 1 < cfg.accumulate {
                        let _ = ddp.no_sync(|d| d.forward_backward(&x, loss))?;
                    } else {
                        let _ = ddp.forward_backward(&x, loss)?;
                    }
                }
                opt.step();
                seconds += t0.elapsed().as_secs_f64();
                if (step + 1) % eval_steps == 0 || step + 1 == steps {
                    curve.push([seconds, accuracy(&ddp, &test)?]);
                }
            }
            let bytes = traffic.bytes(Counted::AllReduce) as f64 / steps as f64;
            Ok((curve, seconds, bytes))
        },
    )
    .map_err(lab_error)?;
    let mut out = None;
    for r in results {
        let (curve, seconds, bytes) = r.map_err(lab_error)?;
        out.get_or_insert((curve, seconds, bytes));
    }
    let (curve, seconds, bytes_per_step) = out.ok_or_else(|| LabError::Wrong("no ranks".into()))?;
    Ok(Trained {
        curve,
        steps,
        lr: schedule.target(),
        bytes_per_step,
        seconds,
    })
}

/// Rank 0's test accuracy (the other ranks hold the same weights and no test set).
fn accuracy(ddp: &Ddp, test: &Option<Dataset>) -> trainers::Result<f64> {
    let Some(test) = test else {
        return Ok(f64::NAN);
    };
    let mut tally = Tally::new();
    let n = test.len();
    for from in (0..n).step_by(1000) {
        let rows: Vec<usize> = (from..(from + 1000).min(n)).collect();
        let (x, y) = test.batch(&rows)?;
        let logits = tch::no_grad(|| ddp.forward_t(&x, false));
        tally.add_batch(&logits, &y)?;
    }
    Ok(tally.accuracy())
}

#[cfg(test)]
mod tests {
    use super::*;
    use collectives::Communicator;
    use trainers::Result;

    /// A compression hook with one of the known mistakes.
    #[derive(Clone, Copy)]
    enum Mistake {
        /// No division: the sum.
        Sum,
        /// Cast first, sum, then divide: the sum can overflow.
        CastFirst,
        /// No finiteness check.
        Unchecked,
        /// Divides before the cast and again after the sum: half the mean.
        DividedTwice,
        /// Averages into the 16-bit copy and never writes it back to `flat`.
        NoCopyBack,
        /// All-reduces `flat` itself, as f32: right values, twice the bytes.
        SendF32,
    }

    struct Hook(Mistake, Kind);

    impl GradSync for Hook {
        fn all_reduce_mean(&self, comm: &dyn Communicator, flat: &mut Tensor) -> Result<()> {
            let n = comm.world_size() as f64;
            if let Mistake::SendF32 = self.0 {
                return Standard.all_reduce_mean(comm, flat);
            }
            let mut wire = match self.0 {
                Mistake::Sum | Mistake::CastFirst => flat.f_to_kind(self.1)?,
                _ => flat.f_div_scalar(n)?.f_to_kind(self.1)?,
            };
            comm.all_reduce(
                collectives::Input::InPlace,
                &mut trainers::comm::buffer_mut(&mut wire)?,
                collectives::ReduceOp::Sum,
            )?;
            if let Mistake::CastFirst | Mistake::DividedTwice = self.0 {
                wire = wire.f_div_scalar(n)?;
            }
            if !matches!(self.0, Mistake::Unchecked)
                && wire.f_isfinite()?.f_all()?.f_int64_value(&[])? == 0
            {
                return Err(trainers::Error::InvalidArgument("overflow".into()));
            }
            if !matches!(self.0, Mistake::NoCopyBack) {
                flat.f_copy_(&wire)?;
            }
            Ok(())
        }
        fn broadcast(&self, comm: &dyn Communicator, t: &[Tensor], root: usize) -> Result<()> {
            Standard.broadcast(comm, t, root)
        }
        fn flatten(&self, grads: &[Tensor], flat: &mut Tensor) -> Result<()> {
            Standard.flatten(grads, flat)
        }
        fn unflatten(&self, flat: &Tensor, grads: &[Tensor]) -> Result<()> {
            Standard.unflatten(flat, grads)
        }
        fn ready(&self, stage: usize, ready_stage: &[usize], next: usize) -> Result<usize> {
            Standard.ready(stage, ready_stage, next)
        }
    }

    fn message(m: Mistake) -> String {
        check_hooks(|wire| {
            let kind = if wire == Wire::Bf16 {
                Kind::BFloat16
            } else {
                Kind::Half
            };
            Arc::new(Hook(m, kind))
        })
        .unwrap_err()
        .to_string()
    }

    #[test]
    fn sum_instead_of_mean_is_named_with_the_element() {
        let msg = message(Mistake::Sum);
        assert!(msg.contains("rank 0 element 0: got 4, expected 2"), "{msg}");
        assert!(msg.contains("hint: avg-not-sum"), "{msg}");
    }

    #[test]
    fn cast_before_dividing_is_named() {
        let msg = message(Mistake::CastFirst);
        assert!(msg.contains("hint: divide-before-cast"), "{msg}");
    }

    #[test]
    fn unchecked_overflow_is_named() {
        let msg = message(Mistake::Unchecked);
        assert!(msg.contains("hint: unchecked-overflow"), "{msg}");
    }

    #[test]
    fn dividing_by_the_world_twice_is_named() {
        let msg = message(Mistake::DividedTwice);
        assert!(msg.contains("rank 0 element 0: got 1, expected 2"), "{msg}");
        assert!(msg.contains("hint: divided-twice"), "{msg}");
    }

    #[test]
    fn mean_left_in_the_16_bit_copy_is_named() {
        let msg = message(Mistake::NoCopyBack);
        assert!(msg.contains("hint: copy-back-into-flat"), "{msg}");
    }

    #[test]
    fn gradients_sent_as_f32_are_named_by_their_bytes() {
        let msg = message(Mistake::SendF32);
        assert!(
            msg.contains("moved") && msg.contains("a 16-bit wire moves half"),
            "{msg}"
        );
        assert!(msg.contains("hint: send-the-16-bit-copy"), "{msg}");
    }

    #[test]
    fn trainers_hook_passes_the_probe() {
        assert_eq!(diagnose(Arc::new(Compressed::fp16())), None);
        assert_eq!(diagnose(Arc::new(Compressed::bf16())), None);
    }
}
