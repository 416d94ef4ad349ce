//! Lab 10: scaling the batch. The same MLP trains on Fashion-MNIST at
//! effective batches 64 to 1024, reached with more ranks and with gradient
//! accumulation (`no_sync`), under the linear and the square-root learning-rate
//! rule with and without warm-up ([`trainers::lr`]), and with gradients
//! all-reduced as f32, fp16 or bf16. The learner writes the compression hook
//! ([`exercise::YourCompression`], a [`GradSync`] that trainers' `Ddp` runs);
//! the solution is trainers' own [`Compressed`].

pub mod exercise;

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
    let mut said = Vec::new();
    for (wire, u) in [(Wire::Fp16, 2f64.powi(-11)), (Wire::Bf16, 2f64.powi(-8))] {
        for world in [2, 3] {
            let m = ddp::check::compression(world, sync(variant, wire), 10_000, 1.0)
                .map_err(lab_error)?;
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
                     (a 16-bit wire moves half): is the tensor you all-reduce the {:?} copy?",
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
    let m = match ddp::check::compression(2, sync(variant, Wire::Fp16), 10_000, 15_000.0) {
        Ok(m) => m,
        Err(trainers::Error::InvalidArgument(e)) => {
            return Err(LabError::Wrong(format!(
                "{near_limit}: your hook failed ({e}); divide by the world size before the \
                 cast, so the all-reduce adds means"
            )));
        }
        Err(e) => return Err(lab_error(e)),
    };
    if m.max_diff.is_nan() || m.max_diff > 5.0 * 2f64.powi(-11) * m.max_grad {
        return Err(LabError::Wrong(format!(
            "{near_limit}: max |Δ| = {:.3e}; divide by the world size before the cast",
            m.max_diff
        )));
    }
    said.push("no overflow near fp16's limit".into());
    match ddp::check::compression(2, sync(variant, Wire::Fp16), 10_000, 40_000.0) {
        Err(trainers::Error::InvalidArgument(_)) => said.push("an overflow is an error".into()),
        Err(e) => return Err(lab_error(e)),
        Ok(m) => {
            return Err(LabError::Wrong(format!(
                "fp16 gradients up to {:.0} (their mean is beyond 65,504): the hook returned \
                 Ok with max |Δ| = {:e}; check that the result is finite and return \
                 Error::InvalidArgument if not",
                m.max_grad, m.max_diff
            )));
        }
    }
    Ok(said.join("; "))
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
