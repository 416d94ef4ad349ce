//! Pipeline model parallelism: a model cut into stages, each stage on its own device
//! and run by its own thread, trained with a schedule that says which micro-batch each
//! stage works on when.
//!
//! * **Naive model parallelism** ([`Naive`], or any schedule with `micro_batches = 1`):
//!   the whole batch goes through stage 1, then stage 2, …; the backward pass comes back
//!   the same way. Only one stage works at any time: with `S` stages each is idle
//!   `(S-1)/S` of the time. This is the classic "part of the model on the CPU, part on
//!   the GPU" step ([`devices`] puts stage 0 on the CPU and the rest on the GPU when
//!   there is one).
//! * **GPipe** ([`GPipe`], the default of [`Pipeline::step`]; `micro_batches = M > 1`):
//!   the batch is cut into `M` micro-batches. Every stage runs the forward of all
//!   micro-batches, sending each activation on as soon as it is computed, so stage 2
//!   works on micro-batch 1 while stage 1 works on micro-batch 2. Then the backward
//!   passes run in reverse order, each stage sending the gradient of its input back.
//!   The idle fraction (the *bubble*) falls to `(S-1)/(M+S-1)` for equal stages
//!   ([`theoretical_bubble`]).
//! * **1F1B** ([`OneFOneB`], PipeDream-flush): the same bubble as GPipe, but each
//!   stage starts a micro-batch's backward as soon as it can (a short warm-up of
//!   forwards, then one forward, one backward), so stage `s` holds the activations of
//!   at most `S − s` micro-batches instead of all `M` ([`peak_in_flight`]).
//!
//! The schedule is the seam ([`Schedule`], [`Pipeline::step_with`]): a list of
//! [`Action`]s per stage, checked before any thread starts ([`plan`]: complete, and no
//! deadlock), and replayed on paper by [`simulate`] for the bubble it would have with
//! equal stages. Whatever the schedule, gradients accumulate across micro-batches in
//! each stage's parameters and every stage takes one optimizer step at the end. Each
//! micro-batch's loss is weighted by its share of the batch (`b_m / B`), so the
//! accumulated gradients are those of the mean loss over the whole batch: the result
//! equals the unsplit model's step up to float rounding, whatever `M` and whatever the
//! schedule ([`check::equivalence`]: each of 10 SGD steps to 1e-5 against the unsplit
//! model's step from the same parameters, accumulating over the same micro-batches; against one forward on the whole batch,
//! CPU kernels chosen by row count add batching noise).
//!
//! **Batch norm caveat**: in training mode a batch-norm layer normalises each
//! micro-batch with that micro-batch's statistics, so with batch norm `M > 1` is *not*
//! equivalent to the unsplit model (GPipe accepts this; the equivalence tests use
//! models without batch norm).
//!
//! [`StepReport`] says, per stage, how long it computed (busy) against the wall time of
//! the forward and backward passes, and draws the schedule ([`StepReport::timeline`]).
//!
//! Files by role: `schedule.rs` (the orders, their check and replay), `stage.rs` (one
//! stage thread running its actions), `report.rs` (what a step did), `check.rs` (the
//! equivalence check shared by the tests and lab 5), this file (the pipeline itself).

pub mod check;
mod report;
mod schedule;
mod stage;

pub use report::{Phase, Span, StepReport};
pub use schedule::{
    Action, GPipe, Naive, OneFOneB, Schedule, Timing, peak_in_flight, plan, simulate,
    simulate_timed,
};

use std::time::{Duration, Instant};

use tch::nn::{self, ModuleT, OptimizerConfig};
use tch::{Cuda, Device, Tensor};

use crate::models::Blueprint;
use crate::threads::{inherit_num_threads, panic_message};
use crate::train::LossFn;
use crate::{Error, Result};
use stage::{Failure, Inbox, Input, PipeStage, StageCtx, StageOut, channels, run_stage};

/// How long a stage waits for its neighbour before giving up, unless
/// [`Pipeline::set_timeout`] says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// Devices for `stages` stages: stage 0 on the CPU and the others on the GPUs in
/// turn when CUDA is available (the classic first model-parallel exercise), else every
/// stage on the CPU (each still run by its own thread).
pub fn devices(stages: usize) -> Vec<Device> {
    let gpus = if Cuda::is_available() {
        Cuda::device_count().max(0) as usize
    } else {
        0
    };
    (0..stages)
        .map(|s| {
            if s == 0 || gpus == 0 {
                Device::Cpu
            } else {
                Device::Cuda((s - 1) % gpus)
            }
        })
        .collect()
}

/// The GPipe bubble for `stages` equal stages and `micro_batches` micro-batches: the
/// fraction of each stage's time spent idle, `(S-1)/(M+S-1)`.
pub fn theoretical_bubble(stages: usize, micro_batches: usize) -> f64 {
    let (s, m) = (stages as f64, micro_batches as f64);
    if stages == 0 || micro_batches == 0 {
        return 0.0;
    }
    (s - 1.0) / (m + s - 1.0)
}

/// The sizes of `micro_batches` pieces of a batch of `batch` rows, as equal as
/// possible (the first `batch % micro_batches` pieces one row larger).
pub fn micro_batch_sizes(batch: usize, micro_batches: usize) -> Result<Vec<usize>> {
    if micro_batches == 0 || micro_batches > batch {
        return Err(Error::InvalidArgument(format!(
            "{micro_batches} micro-batches of a batch of {batch}: need 1 ..= {batch}"
        )));
    }
    let (q, r) = (batch / micro_batches, batch % micro_batches);
    Ok((0..micro_batches).map(|k| q + usize::from(k < r)).collect())
}

/// A model cut into stages over devices, trained a batch at a time with any number of
/// micro-batches.
#[derive(Debug)]
pub struct Pipeline {
    stages: Vec<PipeStage>,
    timeout: Duration,
}

impl Pipeline {
    /// Builds each part on its device, in its own VarStore, with its own optimizer
    /// (`opt` with learning rate `lr`). Parts usually come from
    /// [`Blueprint::split_at`], so parameter names match the whole model's.
    pub fn new<C: OptimizerConfig + Clone>(
        parts: Vec<Blueprint>,
        devices: &[Device],
        opt: &C,
        lr: f64,
    ) -> Result<Pipeline> {
        if parts.is_empty() || parts.len() != devices.len() {
            return Err(Error::InvalidArgument(format!(
                "a pipeline needs one device per stage and at least one stage: {} stages, \
                 {} devices",
                parts.len(),
                devices.len()
            )));
        }
        let stages = parts
            .into_iter()
            .zip(devices)
            .map(|(bp, &device)| {
                let vs = nn::VarStore::new(device);
                let module = bp.build(&vs.root());
                let opt = opt.clone().build(&vs, lr)?;
                Ok(PipeStage {
                    device,
                    vs,
                    module,
                    opt,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Pipeline {
            stages,
            timeout: DEFAULT_TIMEOUT,
        })
    }

    /// [`new`](Self::new) with the parts of `blueprint` cut before the layers `at`.
    pub fn split<C: OptimizerConfig + Clone>(
        blueprint: Blueprint,
        at: &[&str],
        devices: &[Device],
        opt: &C,
        lr: f64,
    ) -> Result<Pipeline> {
        Pipeline::new(blueprint.split_at(at)?, devices, opt, lr)
    }

    /// How long a stage waits for a neighbour's activation or gradient.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// The number of stages.
    pub fn len(&self) -> usize {
        self.stages.len()
    }

    /// Always false: a pipeline has at least one stage.
    pub fn is_empty(&self) -> bool {
        self.stages.is_empty()
    }

    /// The stages' devices.
    pub fn devices(&self) -> Vec<Device> {
        self.stages.iter().map(|s| s.device).collect()
    }

    /// The stages' variables, in stage order.
    pub fn var_stores(&self) -> Vec<&nn::VarStore> {
        self.stages.iter().map(|s| &s.vs).collect()
    }

    /// Overwrites every stage's variables with the same-named ones of `whole` (a
    /// model built unsplit, or any store holding all the names).
    pub fn copy_from(&mut self, whole: &nn::VarStore) -> Result<()> {
        for s in &mut self.stages {
            s.vs.copy(whole)?;
        }
        Ok(())
    }

    /// Inference: the batch through every stage in turn, eval mode, no gradients.
    /// Returns the output on the last stage's device.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        tch::no_grad(|| {
            let mut h = x.shallow_clone();
            for s in &self.stages {
                h = s.module.forward_t(&h.f_to_device(s.device)?, false);
            }
            Ok(h)
        })
    }

    /// One training step on `(x, y)` with the batch cut into `micro_batches` pieces
    /// (1 is naive model parallelism), the [`GPipe`] schedule, and one optimizer step per
    /// stage. `loss` must average over its batch.
    pub fn step(
        &mut self,
        x: &Tensor,
        y: &Tensor,
        micro_batches: usize,
        loss: LossFn,
    ) -> Result<StepReport> {
        self.step_with(&GPipe, x, y, micro_batches, loss)
    }

    /// [`step`](Self::step) with the stages running their forward and backward passes
    /// in the order `schedule` says. The schedule is checked first ([`plan`]): a broken
    /// or deadlocking one fails here, naming the stage, before any thread starts.
    pub fn step_with(
        &mut self,
        schedule: &dyn Schedule,
        x: &Tensor,
        y: &Tensor,
        micro_batches: usize,
        loss: LossFn,
    ) -> Result<StepReport> {
        let batch = x.size().first().copied().unwrap_or(0).max(0) as usize;
        let sizes = micro_batch_sizes(batch, micro_batches)?;
        let sizes_i64: Vec<i64> = sizes.iter().map(|&n| n as i64).collect();
        let xs = x.f_split_with_sizes(&sizes_i64, 0)?;
        let last_device = self.stages[self.stages.len() - 1].device;
        let targets = y
            .f_split_with_sizes(&sizes_i64, 0)?
            .into_iter()
            .zip(&sizes)
            .map(|(y, &n)| Ok((y.f_to_device(last_device)?, n as f64 / batch as f64)))
            .collect::<Result<Vec<_>>>()?;
        let n = self.stages.len();
        let mut lists = plan(schedule, n, micro_batches)?.into_iter();
        for s in &mut self.stages {
            s.opt.zero_grad();
        }

        // acts[s]: stage s -> s+1; grads[s]: stage s+1 -> s.
        let (mut act_tx, mut act_rx) = channels(n - 1);
        let (mut grad_tx, mut grad_rx) = channels(n - 1);
        let mut first_input = Some(xs);
        let mut targets = Some(targets);
        let timeout = self.timeout;
        let threads = tch::get_num_threads();
        let start = Instant::now();
        let results: Vec<std::thread::Result<Result<StageOut, Failure>>> =
            std::thread::scope(|scope| {
                let handles: Vec<_> = self
                    .stages
                    .iter_mut()
                    .enumerate()
                    .map(|(k, stage)| {
                        let ctx = StageCtx {
                            index: k,
                            micro_batches,
                            actions: lists.next().unwrap_or_default(),
                            input: match first_input.take() {
                                Some(xs) => Input::Batch(xs),
                                None => Input::Channel(Inbox::new(act_rx.remove(0))),
                            },
                            send_act: (k + 1 < n).then(|| act_tx.remove(0)),
                            recv_grad: (k + 1 < n).then(|| Inbox::new(grad_rx.remove(0))),
                            send_grad: (k > 0).then(|| grad_tx.remove(0)),
                            targets: if k + 1 == n { targets.take() } else { None },
                            loss,
                            start,
                            timeout,
                        };
                        scope.spawn(move || {
                            inherit_num_threads(threads);
                            run_stage(stage, ctx)
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join()).collect()
            });

        let mut outs = Vec::with_capacity(n);
        let mut failures = Vec::new();
        for (k, r) in results.into_iter().enumerate() {
            match r {
                Ok(Ok(out)) => outs.push(out),
                Ok(Err(f)) => failures.push(f),
                Err(payload) => failures.push(Failure::Own(Error::Worker(format!(
                    "stage {k} panicked: {}",
                    panic_message(payload.as_ref())
                )))),
            }
        }
        // The stage that failed first explains more than the neighbours that then
        // found it gone.
        if let Some(i) = failures.iter().position(|f| matches!(f, Failure::Own(_))) {
            return Err(failures.swap_remove(i).into_error());
        }
        if let Some(f) = failures.pop() {
            return Err(f.into_error());
        }
        let spans: Vec<Span> = outs.iter().flat_map(|o| o.spans.iter().cloned()).collect();
        let wall = spans
            .iter()
            .filter(|s| s.phase != Phase::Update)
            .map(|s| s.end)
            .max()
            .unwrap_or_default();
        Ok(StepReport {
            loss: outs.last().map_or(0.0, |o| o.loss),
            stages: n,
            micro_batches,
            wall,
            spans,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::{self, MlpConfig};
    use crate::pipeline::check::tests::mlp;
    use crate::train::cross_entropy;

    /// The classic CPU + GPU split, where a GPU exists (visible skip otherwise).
    #[test]
    fn cpu_plus_gpu_pipeline_equals_the_unsplit_model_or_visible_skip() {
        if !Cuda::is_available() {
            return collectives::testing::skip(
                "cpu_plus_gpu_pipeline_equals_the_unsplit_model_or_visible_skip",
                "no CUDA",
            );
        }
        let devs = devices(2);
        assert_eq!(devs, [Device::Cpu, Device::Cuda(0)]);
        for m in [1, 4, 5] {
            check::equivalence(&GPipe, mlp, &["fc2"], &devs, m, 12).unwrap();
        }
        check::equivalence(&Naive, mlp, &["fc2"], &devs, 3, 12).unwrap();
    }

    /// The MLP split before fc2 and fc3: three stages, all on the CPU.
    fn mlp_on_three_cpu_stages() -> Pipeline {
        Pipeline::split(
            mlp(),
            &["fc2", "fc3"],
            &[Device::Cpu; 3],
            &nn::Sgd::default(),
            0.1,
        )
        .unwrap()
    }

    /// Causality of the GPipe schedule, whatever the timing: each stage runs its
    /// forwards in order then its backwards in reverse order; a forward starts after
    /// the previous stage's forward of that micro-batch ended, a backward after the
    /// next stage's backward of that micro-batch ended.
    #[test]
    fn schedule_follows_gpipe_order() {
        tch::set_num_threads(1);
        let (s_count, m_count) = (3, 4);
        let mut pipe = mlp_on_three_cpu_stages();
        let d = crate::data::synthetic(16, 1).unwrap();
        let r = pipe
            .step(&d.images, &d.labels, m_count, cross_entropy)
            .unwrap();
        assert_eq!((r.stages, r.micro_batches), (s_count, m_count));
        let find = |stage, mb, phase| {
            r.spans
                .iter()
                .find(|s| s.stage == stage && s.micro_batch == mb && s.phase == phase)
                .unwrap()
        };
        for stage in 0..s_count {
            let order: Vec<(Phase, usize)> = r
                .spans
                .iter()
                .filter(|s| s.stage == stage)
                .map(|s| (s.phase, s.micro_batch))
                .collect();
            let want: Vec<(Phase, usize)> = (0..m_count)
                .map(|m| (Phase::Forward, m))
                .chain((0..m_count).rev().map(|m| (Phase::Backward, m)))
                .chain([(Phase::Update, 0)])
                .collect();
            assert_eq!(order, want, "stage {stage}");
            for m in 0..m_count {
                if stage > 0 {
                    assert!(
                        find(stage, m, Phase::Forward).start
                            >= find(stage - 1, m, Phase::Forward).end
                    );
                }
                if stage + 1 < s_count {
                    assert!(
                        find(stage, m, Phase::Backward).start
                            >= find(stage + 1, m, Phase::Backward).end
                    );
                }
            }
        }
        let u = r.utilisation();
        assert!(u.iter().all(|&u| u > 0.0 && u <= 1.0), "{u:?}");
        assert!(r.bubble() >= 0.0 && r.bubble() < 1.0);
        let chart = r.timeline(40);
        assert_eq!(chart.lines().count(), 3, "{chart}");
        assert!(chart.contains('3') && chart.contains('a'), "{chart}");
    }

    /// The naive schedule, run for real: never two stages at work at once, whatever
    /// the timing (each span starts after every earlier span, on any stage, ended).
    #[test]
    fn the_naive_schedule_keeps_one_stage_busy_at_a_time() {
        tch::set_num_threads(1);
        let mut pipe = mlp_on_three_cpu_stages();
        let d = crate::data::synthetic(12, 1).unwrap();
        let r = pipe
            .step_with(&Naive, &d.images, &d.labels, 3, cross_entropy)
            .unwrap();
        let mut work: Vec<&Span> = r
            .spans
            .iter()
            .filter(|s| s.phase != Phase::Update)
            .collect();
        work.sort_by_key(|s| s.start);
        assert_eq!(work.len(), 3 * 3 * 2);
        for pair in work.windows(2) {
            assert!(pair[1].start >= pair[0].end, "{pair:?}");
        }
    }

    /// A schedule whose stages wait for each other fails at once, naming the waits,
    /// instead of after the stages' timeout.
    #[test]
    fn a_deadlocking_schedule_fails_before_any_stage_waits() {
        struct Stuck;
        impl Schedule for Stuck {
            fn name(&self) -> &str {
                "stuck"
            }
            fn actions(&self, stage: usize, _: usize, m: usize) -> Result<Vec<Action>> {
                // Stage 0 runs micro-batch 0 forward and back first; the others want
                // micro-batch 1's activation first, which stage 0 sends only after
                // micro-batch 0's gradient has come back through them.
                if stage == 0 {
                    Naive.actions(stage, 3, m)
                } else {
                    let forwards = (0..m).rev().map(Action::Forward);
                    Ok(forwards.chain((0..m).map(Action::Backward)).collect())
                }
            }
        }
        let mut pipe = mlp_on_three_cpu_stages();
        let d = crate::data::synthetic(8, 1).unwrap();
        let clock = Instant::now();
        let e = pipe
            .step_with(&Stuck, &d.images, &d.labels, 2, cross_entropy)
            .unwrap_err()
            .to_string();
        assert!(clock.elapsed() < Duration::from_secs(1));
        assert!(e.contains("schedule stuck deadlocks"), "{e}");
    }

    #[test]
    fn theoretical_bubble_and_micro_batch_sizes() {
        assert_eq!(theoretical_bubble(1, 4), 0.0);
        assert_eq!(theoretical_bubble(2, 1), 0.5);
        assert_eq!(theoretical_bubble(4, 1), 0.75);
        assert!((theoretical_bubble(4, 8) - 3.0 / 11.0).abs() < 1e-12);
        assert_eq!(micro_batch_sizes(10, 4).unwrap(), [3, 3, 2, 2]);
        assert_eq!(micro_batch_sizes(10, 10).unwrap(), [1; 10]);
        assert!(micro_batch_sizes(10, 0).is_err());
        assert!(micro_batch_sizes(3, 4).is_err());
        assert_eq!(devices(3).len(), 3);
        assert_eq!(devices(3)[0], Device::Cpu);
    }

    #[test]
    fn mismatched_stages_fail_with_the_stage_that_broke_not_a_hang() {
        tch::set_num_threads(1);
        // Stage 1 expects 16 features but stage 0 produces 32: libtorch throws in
        // stage 1's thread while stage 0 waits for its gradient.
        let first = mlp().split_at(&["fc2"]).unwrap().remove(0);
        let second = models::mlp(&MlpConfig {
            hidden: vec![16, 16],
            ..Default::default()
        })
        .split_at(&["fc2"])
        .unwrap()
        .remove(1);
        let mut pipe = Pipeline::new(
            vec![first, second],
            &[Device::Cpu; 2],
            &nn::Sgd::default(),
            0.1,
        )
        .unwrap();
        pipe.set_timeout(Duration::from_secs(20));
        let d = crate::data::synthetic(8, 1).unwrap();
        let clock = Instant::now();
        let e = pipe
            .step(&d.images, &d.labels, 2, cross_entropy)
            .unwrap_err();
        assert!(
            clock.elapsed() < Duration::from_secs(10),
            "took {:?}",
            clock.elapsed()
        );
        assert!(e.to_string().contains("stage 1 panicked"), "{e}");
        let e = Pipeline::new(vec![mlp()], &[], &nn::Sgd::default(), 0.1).unwrap_err();
        assert!(e.to_string().contains("one device per stage"), "{e}");
        let mut pipe =
            Pipeline::new(vec![mlp()], &[Device::Cpu], &nn::Sgd::default(), 0.1).unwrap();
        let e = pipe
            .step(&d.images, &d.labels, 9, cross_entropy)
            .unwrap_err();
        assert!(e.to_string().contains("9 micro-batches"), "{e}");
    }

    #[test]
    fn forward_matches_the_unsplit_model() {
        tch::set_num_threads(1);
        let whole_vs = nn::VarStore::new(Device::Cpu);
        let whole = mlp().build(&whole_vs.root());
        let mut pipe = mlp_on_three_cpu_stages();
        pipe.copy_from(&whole_vs).unwrap();
        let x = crate::data::synthetic(5, 3).unwrap().images;
        let got = pipe.forward(&x).unwrap();
        assert!(got.equal(&whole.forward_t(&x, false)));
    }
}
