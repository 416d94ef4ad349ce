//! The single-device baseline every later trainer is compared with: a model
//! trained for some steps of SGD on one device, its phases timed, then evaluated
//! on the test set. The step is a [`TrainStep`] ([`SgdStep`] unless you bring
//! your own), so [`compare_steps`] can tell whether another step trains exactly
//! like the real one: lab 2's self-check and this crate's tests both call it.

use tch::Device;
use tch::nn::VarStore;

use super::phases::{Phase, PhaseClock, PhaseTimes};
use super::step::{Batch, SgdStep, TrainStep};
use super::{Tally, evaluate};
use crate::data::Dataset;
use crate::models::Arch;
use crate::optim::{Sgd, SgdConfig};
use crate::sampler::DistributedSampler;

/// What to train and how.
#[derive(Debug, Clone, PartialEq)]
pub struct Baseline {
    /// The model.
    pub arch: Arch,
    /// Optimizer steps to take (the shuffled training set is walked in order,
    /// epoch after epoch).
    pub steps: usize,
    /// Examples per step.
    pub batch: usize,
    /// SGD learning rate.
    pub lr: f64,
    /// SGD momentum.
    pub momentum: f64,
    /// Seed of the initial weights and of the data order.
    pub seed: u64,
    /// Steps left out of the timing medians (the first steps allocate memory and
    /// pick kernels).
    pub warmup: usize,
    /// Batch size of the evaluation.
    pub eval_batch: usize,
    /// Where to train. The data sets may live anywhere: each batch is gathered
    /// where its set lives and moved here, inside the data phase (from the host
    /// to a GPU through pinned memory, without waiting: see
    /// [`to_device_queued`](crate::data::to_device_queued)).
    pub device: Device,
    /// On a GPU, time the phases of one step in this many (see
    /// [`PhaseClock::sampled`]): a timed step waits for the device after each
    /// phase, which a launch-bound model pays for in throughput.
    pub phase_every: usize,
}

impl Default for Baseline {
    /// The CNN, batch 64, SGD lr 0.01 momentum 0.9 (`ringside-train`'s defaults
    /// on one rank), 100 steps on the CPU.
    fn default() -> Baseline {
        Baseline {
            arch: Arch::Cnn,
            steps: 100,
            batch: 64,
            lr: 0.01,
            momentum: 0.9,
            seed: 0,
            warmup: 5,
            eval_batch: 1000,
            device: Device::Cpu,
            phase_every: 8,
        }
    }
}

/// What a baseline run measured.
#[derive(Debug)]
pub struct BaselineRun {
    /// Every step's training loss, in order.
    pub losses: Vec<f64>,
    /// Loss and accuracy on the test set after the last step.
    pub test: Tally,
    /// Per phase, the median step after the warm-up (on a GPU, of the timed
    /// steps: one in [`Baseline::phase_every`]).
    pub median: PhaseTimes,
    /// Training examples per second over the steps after the warm-up (wall time
    /// of the steps, evaluation excluded).
    pub samples_per_s: f64,
    /// The trained parameters, by name, on the CPU.
    pub params: Vec<(String, tch::Tensor)>,
}

impl Baseline {
    /// Trains a freshly initialised model (seeded) with `step` on `train_set`, then
    /// evaluates it on `test_set`. The seed goes into libtorch's global generator:
    /// don't build other models on other threads meanwhile.
    pub fn run<S: TrainStep>(
        &self,
        step: &mut S,
        train_set: &Dataset,
        test_set: &Dataset,
    ) -> Result<BaselineRun, S::Error> {
        self.run_from(step, train_set, test_set, None)
    }

    /// The model's initial weights for this seed, by name, on the CPU.
    pub fn initial_weights(&self) -> crate::Result<Vec<(String, tch::Tensor)>> {
        crate::seed::seeded(self.seed as i64, || {
            let vs = VarStore::new(Device::Cpu);
            let _model = self.arch.blueprint().build(&vs.root());
            snapshot(&vs)
        })
    }

    /// [`run`](Self::run), starting from `init` (from
    /// [`initial_weights`](Self::initial_weights)) when given rather than from
    /// weights drawn now: two runs then start from the same weights even when
    /// other threads draw from libtorch's global generator in between.
    pub fn run_from<S: TrainStep>(
        &self,
        step: &mut S,
        train_set: &Dataset,
        test_set: &Dataset,
        init: Option<&[(String, tch::Tensor)]>,
    ) -> Result<BaselineRun, S::Error> {
        let vs = VarStore::new(self.device);
        let mut model =
            crate::seed::seeded(self.seed as i64, || self.arch.blueprint().build(&vs.root()));
        if let Some(init) = init {
            load_weights(&vs, init)?;
        }
        let mut opt = Sgd::new(&vs, SgdConfig::new(self.lr).momentum(self.momentum))?;
        let sampler = DistributedSampler::new(train_set.len(), 1, 0)?.with_seed(self.seed);
        let mut clock = PhaseClock::sampled(self.device, self.phase_every);
        let mut losses = Vec::with_capacity(self.steps);
        let (mut epoch, mut order) = (0, Vec::new());
        let mut window = super::window::Window::new(self.device);
        for k in 0..self.steps {
            if k == self.warmup {
                window.open();
            }
            let from = (k * self.batch) % (train_set.len() / self.batch * self.batch).max(1);
            if from == 0 {
                let mut s = sampler.clone();
                s.set_epoch(epoch);
                order = s.indices();
                epoch += 1;
            }
            let ids = &order[from..(from + self.batch).min(order.len())];
            let batch = clock.time(Phase::Data, || -> crate::Result<Batch> {
                let (x, y) = train_set.batch(ids)?;
                Ok(Batch::new(
                    crate::data::to_device_queued(&x, self.device)?,
                    crate::data::to_device_queued(&y, self.device)?,
                ))
            })?;
            let out = step.forward_backward(&mut model, &batch, &mut clock)?;
            step.optimizer_step(&mut opt, &mut clock)?;
            clock.end_step();
            // Kept on the device: reading each loss back would make every step
            // wait for the device to finish (a host sync per step on a GPU).
            losses.push(out.loss.f_detach().map_err(crate::Error::from)?);
            window.step(self.batch as f64);
        }
        window.close();
        let losses: Vec<f64> = if losses.is_empty() {
            Vec::new()
        } else {
            tch::Tensor::f_stack(&losses, 0)
                .and_then(|t| t.f_to_kind(tch::Kind::Double))
                .and_then(Vec::<f64>::try_from)
                .map_err(crate::Error::from)?
        };
        let samples_per_s = window.samples_per_s();
        let test_on_device = test_set.to_device(self.device)?;
        let eval = DistributedSampler::for_eval(test_set.len(), 1, 0)?;
        let test = evaluate(&model, &test_on_device, &eval, self.eval_batch, None)?;
        let params = snapshot(&vs)?;
        Ok(BaselineRun {
            losses,
            test,
            median: clock.median(self.warmup),
            samples_per_s,
            params,
        })
    }
}

/// Every variable of `vs` by name (sorted), copied to the CPU.
fn snapshot(vs: &VarStore) -> crate::Result<Vec<(String, tch::Tensor)>> {
    let mut params = vs
        .variables()
        .into_iter()
        .map(|(n, t)| Ok((n, t.f_to_device(Device::Cpu)?.f_detach_copy()?)))
        .collect::<crate::Result<Vec<_>>>()?;
    params.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(params)
}

/// Copies `weights` into the variables of `vs` of the same names (all must exist).
fn load_weights(vs: &VarStore, weights: &[(String, tch::Tensor)]) -> crate::Result<()> {
    let vars = vs.variables();
    tch::no_grad(|| {
        for (name, w) in weights {
            let v = vars.get(name).ok_or_else(|| {
                crate::Error::Model(format!("no variable {name} to load initial weights into"))
            })?;
            v.shallow_clone().f_copy_(w)?;
        }
        Ok(())
    })
}

/// How a step's baseline run compares with [`SgdStep`]'s from the same seed.
#[derive(Debug)]
pub struct StepComparison {
    /// The step under test.
    pub mine: BaselineRun,
    /// The real step.
    pub reference: BaselineRun,
}

/// How far a step may stray from [`SgdStep`] and still count as the same
/// training. Both runs start from the same weights and see the same batches, so
/// a step doing the same operations gives the very same bits (that is what this
/// crate's own test finds). But a correct step may write the loss another way
/// (`log_softmax` + `nll_loss`, or a mean over a sum): the same value rounded
/// differently in its last bit, which SGD then carries along. Such differences
/// stay at f32 rounding size (1e-7 relative) per step and grow slowly; a wrong
/// step (no zeroing, a missing update, another loss) moves the test loss by
/// percents. Hence: the test loss within [`LOSS_TOLERANCE`] (relative), the test
/// accuracy within [`ACCURACY_TOLERANCE`] (a few examples whose two top classes
/// were that close), and the training loss must fall.
pub const LOSS_TOLERANCE: f64 = 1e-3;
/// See [`LOSS_TOLERANCE`]: the test accuracy may differ by this fraction.
pub const ACCURACY_TOLERANCE: f64 = 2e-3;

impl StepComparison {
    /// The mean training loss of the first and of the last fifth of the steps.
    pub fn loss_fall(&self) -> (f64, f64) {
        let l = &self.mine.losses;
        let k = (l.len() / 5).max(1);
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        (
            mean(&l[..k.min(l.len())]),
            mean(&l[l.len().saturating_sub(k)..]),
        )
    }

    /// Whether every parameter ends with the very bits of the reference run.
    pub fn exact(&self) -> bool {
        self.mine.params.len() == self.reference.params.len()
            && self.mine.params.iter().all(|(name, t)| {
                self.reference
                    .params
                    .iter()
                    .any(|(n, r)| n == name && r.size() == t.size() && r.equal(t))
            })
    }

    /// `Ok` with a one-line summary when the step trains like [`SgdStep`] within
    /// the tolerances, else what differs.
    pub fn verdict(&self) -> std::result::Result<String, String> {
        let (first, last) = self.loss_fall();
        // NaN counts as not falling (a diverged run).
        if last.is_nan() || first.is_nan() || last >= first {
            return Err(format!(
                "the training loss did not fall: {first:.4} over the first steps, \
                 {last:.4} over the last"
            ));
        }
        let (m, r) = (&self.mine.test, &self.reference.test);
        let rel = (m.loss() - r.loss()).abs() / r.loss().abs();
        if rel.is_nan() || rel > LOSS_TOLERANCE {
            return Err(format!(
                "test loss {:.5} but the real step reaches {:.5} from the same seed \
                 (relative difference {rel:.1e}, allowed {LOSS_TOLERANCE:.0e})",
                m.loss(),
                r.loss()
            ));
        }
        let dacc = (m.accuracy() - r.accuracy()).abs();
        if dacc.is_nan() || dacc > ACCURACY_TOLERANCE {
            return Err(format!(
                "test accuracy {:.2}% but the real step reaches {:.2}% from the same seed",
                100.0 * m.accuracy(),
                100.0 * r.accuracy()
            ));
        }
        Ok(format!(
            "training loss {first:.3} -> {last:.3}; test accuracy {:.2}% (real step \
             {:.2}%), test loss {:.5} ({:.5}); {}",
            100.0 * m.accuracy(),
            100.0 * r.accuracy(),
            m.loss(),
            r.loss(),
            if self.exact() {
                "every parameter bit for bit the same".to_string()
            } else {
                format!("parameters differ (test loss by {rel:.1e} relative)")
            }
        ))
    }
}

/// Trains `config` once with `step` and once with [`SgdStep`], from the same
/// initial weights (drawn once from the seed) on the same batches: see
/// [`StepComparison::verdict`].
pub fn compare_steps<S: TrainStep>(
    config: &Baseline,
    step: &mut S,
    train_set: &Dataset,
    test_set: &Dataset,
) -> Result<StepComparison, S::Error> {
    let init = config.initial_weights()?;
    let mine = config.run_from(step, train_set, test_set, Some(&init))?;
    let reference = config
        .run_from(&mut SgdStep, train_set, test_set, Some(&init))
        .map_err(S::Error::from)?;
    Ok(StepComparison { mine, reference })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data;
    use crate::train::step::{Replica, StepOutput};

    /// Forgets to zero the gradients: every update adds all earlier gradients
    /// again (the classic bug the check must catch).
    struct NoZeroGrad;

    impl TrainStep for NoZeroGrad {
        type Error = crate::Error;
        fn forward_backward(
            &mut self,
            model: &mut dyn Replica,
            batch: &Batch,
            clock: &mut PhaseClock,
        ) -> crate::Result<StepOutput> {
            SgdStep.forward_backward(model, batch, clock)
        }
        fn optimizer_step(&mut self, opt: &mut Sgd, clock: &mut PhaseClock) -> crate::Result<()> {
            clock.time(Phase::Optimizer, || opt.step())
        }
    }

    fn small() -> (Baseline, Dataset, Dataset) {
        let config = Baseline {
            steps: 24,
            batch: 32,
            warmup: 2,
            eval_batch: 100,
            ..Baseline::default()
        };
        // Synthetic data: this checks the checker (fast, no data files); lab 2's
        // self-check runs the same function on Fashion-MNIST.
        (
            config,
            data::synthetic(512, 1).unwrap(),
            data::synthetic(200, 2).unwrap(),
        )
    }

    /// The real step against itself: same seed, same batches, same operations,
    /// so every parameter ends bit for bit the same, on any CPU (nothing in the
    /// two runs differs, not even a batch's row count).
    #[test]
    fn the_real_step_matches_itself_exactly_and_its_loss_falls() {
        tch::set_num_threads(1);
        let (config, train_set, test_set) = small();
        let c = compare_steps(&config, &mut SgdStep, &train_set, &test_set).unwrap();
        assert!(c.exact());
        assert_eq!(c.mine.test, c.reference.test);
        let (first, last) = c.loss_fall();
        assert!(last < first, "{first} -> {last}");
        let verdict = c.verdict().unwrap();
        assert!(verdict.contains("bit for bit"), "{verdict}");
        assert_eq!(c.mine.losses.len(), 24);
        let m = c.mine.median;
        assert!(
            m.get(Phase::Forward) > 0.0 && m.get(Phase::Backward) > 0.0,
            "{m:?}"
        );
        assert!(c.mine.samples_per_s > 0.0);
    }

    #[test]
    fn a_step_that_never_zeroes_its_gradients_fails_the_check() {
        tch::set_num_threads(1);
        let (config, train_set, test_set) = small();
        let c = compare_steps(&config, &mut NoZeroGrad, &train_set, &test_set).unwrap();
        assert!(!c.exact());
        let e = c.verdict().unwrap_err();
        assert!(e.contains("real step") || e.contains("did not fall"), "{e}");
    }
}
