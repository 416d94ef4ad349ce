//! The checks of a pipeline schedule that trainers' own tests and lab 5's self-check
//! share, so that both judge a schedule by the same rule:
//!
//! * [`equivalence`]: training through the pipeline gives the unsplit model's result
//!   (the schedule changes the time, never the arithmetic);
//! * [`bubble`]: replayed with equal stages, the schedule idles as much as its rule
//!   says (so a "GPipe" that runs one micro-batch at a time does not pass for one).

use std::time::Duration;

use tch::Device;
use tch::nn::{self, ModuleT, OptimizerConfig};

use super::{Pipeline, Schedule, micro_batch_sizes, simulate};
use crate::models::Blueprint;
use crate::parity::{tensor_diff, worst};
use crate::train::cross_entropy;
use crate::{Error, Result};

/// SGD steps [`equivalence`] compares.
pub const STEPS: usize = 10;

/// The largest |Δloss| and |Δparam| of one step from the same parameters that
/// [`equivalence`] accepts: float rounding of the same sums in another order (CPU
/// against GPU kernels, a stage boundary in between, gradients accumulated over the
/// micro-batches in the schedule's order), far below what a wrong gradient does to a
/// parameter in one step at learning rate 0.01 (a micro-batch's gradient dropped or
/// counted twice moves parameters by ~1e-3).
pub const TOLERANCE: f64 = 1e-5;

/// What [`equivalence`] measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Equivalence {
    /// The largest |Δloss| over the steps, pipeline against the unsplit model.
    pub loss_diff: f64,
    /// The largest |Δparam| after any step.
    pub param_diff: f64,
    /// The largest change of any parameter over the steps: proof that it trained.
    pub moved: f64,
}

/// Trains `blueprint` cut before the layers `at`, one stage per device of `devices`,
/// with `schedule` and `micro_batches` micro-batches of a batch of `batch`, for
/// [`STEPS`] SGD steps (learning rate 0.01) on synthetic data, and compares each step
/// with the same step of the model unsplit on the CPU **from the same parameters**
/// (copied from the stages before every step) on the same batch. Fails, saying by
/// how much, when a loss or a parameter differs by more than [`TOLERANCE`], or when
/// the parameters did not move.
///
/// Each step, not a free-running 10-step trajectory: the CNN's ReLU and max-pool
/// gradients jump where an input sits within rounding of a kink or a tie, so two
/// trajectories that differ only in rounding drift apart by an amount that depends
/// on the CPU and on how MKL splits its work under load (seen: 3.7e-5 at step 7 of
/// a run beside the whole test suite, 1e-7 on an idle machine).
///
/// The unsplit model accumulates its gradient over the same micro-batches, each loss
/// weighted by `b_m / B`: the same mathematics as one forward on the whole batch, and
/// the same shapes as the pipeline's forwards. On different shapes libtorch's CPU sgemm
/// rounds differently (it picks its kernel by row count), and a ReLU input within
/// rounding of 0 then takes the other branch, which 10 steps amplify by a CPU-dependent
/// amount (the DataParallel test failed that way in CI).
///
/// Sets libtorch to one thread on the calling thread (the stage threads inherit it),
/// so that both sides sum in one order on any machine.
pub fn equivalence(
    schedule: &dyn Schedule,
    blueprint: fn() -> Blueprint,
    at: &[&str],
    devices: &[Device],
    micro_batches: usize,
    batch: usize,
) -> Result<Equivalence> {
    tch::set_num_threads(1);
    let what = || {
        format!(
            "schedule {} on {} stages, {micro_batches} micro-batches of a batch of {batch}",
            schedule.name(),
            at.len() + 1
        )
    };
    let data = crate::data::synthetic(batch * STEPS, 8)?;
    let whole_vs = nn::VarStore::new(Device::Cpu);
    let whole = blueprint().build(&whole_vs.root());
    let start = nn::VarStore::new(Device::Cpu);
    let _ = blueprint().build(&start.root());
    let mut start = start;
    start.copy(&whole_vs)?;
    // lr 0.01: at 0.1 the CNN diverges on this data (loss ~26) and amplifies
    // summation-order differences past any fixed tolerance.
    let mut pipe = Pipeline::split(blueprint(), at, devices, &nn::Sgd::default(), 0.01)?;
    pipe.set_timeout(Duration::from_secs(30));
    pipe.copy_from(&whole_vs)?;
    let mut opt = nn::Sgd::default().build(&whole_vs, 0.01)?;
    let sizes = micro_batch_sizes(batch, micro_batches)?;
    let mut loss_diff: f64 = 0.0;
    let mut param_diff: f64 = 0.0;
    for step in 0..STEPS {
        sync_from(&whole_vs, &pipe)?;
        let idx: Vec<usize> = (step * batch..(step + 1) * batch).collect();
        let (x, y) = data.batch(&idx)?;
        let r = pipe.step_with(schedule, &x, &y, micro_batches, cross_entropy)?;
        opt.zero_grad();
        let mut want = 0.0;
        let mut from = 0;
        for &n in &sizes {
            let (xm, ym) = (
                x.f_narrow(0, from, n as i64)?,
                y.f_narrow(0, from, n as i64)?,
            );
            let l = cross_entropy(&whole.forward_t(&xm, true), &ym)?
                .f_mul_scalar(n as f64 / batch as f64)?;
            want += l.f_double_value(&[])?;
            l.f_backward()?;
            from += n as i64;
        }
        opt.step();
        let d = (want - r.loss).abs();
        loss_diff = loss_diff.max(d);
        if d > TOLERANCE || !r.loss.is_finite() {
            return Err(Error::Pipeline(format!(
                "{}: step {step}'s loss is {} through the pipeline, {want} unsplit \
                 (|Δ| = {d:.2e} > {TOLERANCE:e})",
                what(),
                r.loss
            )));
        }
        let d = stages_diff(&whole_vs, &pipe)?;
        param_diff = param_diff.max(d);
        if d > TOLERANCE || d.is_nan() {
            return Err(Error::Pipeline(format!(
                "{}: after step {step} a parameter differs from the unsplit model's by \
                 {d:.2e} > {TOLERANCE:e}",
                what()
            )));
        }
    }
    let mut moved: f64 = 0.0;
    let now = whole_vs.variables();
    for (name, t) in start.variables() {
        let d = t
            .f_sub(&now[&name])?
            .f_abs()?
            .f_max()?
            .f_double_value(&[])?;
        moved = moved.max(d);
    }
    if moved <= 1e-3 {
        return Err(Error::Pipeline(format!(
            "{}: the model did not train (no parameter moved more than {moved:.1e})",
            what()
        )));
    }
    Ok(Equivalence {
        loss_diff,
        param_diff,
        moved,
    })
}

/// The largest |Δ| between the pipeline's parameters and the same-named ones of
/// `whole`, checking that the stages hold every parameter exactly once.
/// Copies the stages' parameters into the unsplit model's.
fn sync_from(whole: &nn::VarStore, pipe: &Pipeline) -> Result<()> {
    let whole = whole.variables();
    tch::no_grad(|| -> Result<()> {
        for vs in pipe.var_stores() {
            for (name, t) in vs.variables() {
                if let Some(w) = whole.get(&name) {
                    w.shallow_clone().f_copy_(&t.f_to_device(Device::Cpu)?)?;
                }
            }
        }
        Ok(())
    })
}

fn stages_diff(whole: &nn::VarStore, pipe: &Pipeline) -> Result<f64> {
    let whole = whole.variables();
    let mut seen = 0;
    let mut diff: f64 = 0.0;
    for vs in pipe.var_stores() {
        for (name, t) in vs.variables() {
            let Some(w) = whole.get(&name) else {
                return Err(Error::Pipeline(format!(
                    "a stage holds {name}, which the unsplit model does not have"
                )));
            };
            seen += 1;
            diff = worst(diff, tensor_diff(&name, &t, w)?);
        }
    }
    if seen != whole.len() {
        return Err(Error::Pipeline(format!(
            "the stages hold {seen} parameters, the unsplit model {}",
            whole.len()
        )));
    }
    Ok(diff)
}

/// Replays one step of `schedule` on `stages` equal stages (forward 1 ms, backward
/// 2 ms, as a backward costs about twice a forward) and checks that each stage idles
/// the share `want` of the time, the prediction of `rule` (e.g. `"(S-1)/(M+S-1)"`).
/// The error draws the schedule as it ran, one column per millisecond. Returns the
/// replayed bubble.
pub fn bubble(
    schedule: &dyn Schedule,
    stages: usize,
    micro_batches: usize,
    want: f64,
    rule: &str,
) -> Result<f64> {
    let r = simulate(
        schedule,
        stages,
        micro_batches,
        Duration::from_millis(1),
        Duration::from_millis(2),
    )?;
    let got = r.bubble();
    if (got - want).abs() > 1e-9 {
        let columns = r.wall.as_millis().clamp(1, 200) as usize;
        return Err(Error::Pipeline(format!(
            "schedule {} on {stages} equal stages with {micro_batches} micro-batches keeps \
             each stage idle {:.1}% of the time; {rule} says {:.1}%. Replayed, forward 1 ms, \
             backward 2 ms (digit m: forward of micro-batch m, letter: its backward, \
             a = 0; '.': idle):\n{}",
            schedule.name(),
            100.0 * got,
            100.0 * want,
            r.timeline(columns)
        )));
    }
    Ok(got)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::models::{self, MlpConfig};
    use crate::pipeline::{GPipe, Naive, OneFOneB, theoretical_bubble};

    /// The small MLP of the pipeline's tests (also `pipeline::tests`).
    pub(in crate::pipeline) fn mlp() -> Blueprint {
        models::mlp(&MlpConfig {
            hidden: vec![32, 16],
            ..Default::default()
        })
    }

    #[test]
    fn any_micro_batch_count_equals_the_unsplit_model_after_10_sgd_steps() {
        // 12 rows: 1 (naive), 2 and 4 divide it; 5 gives 3+3+2+2+2; 12 is one row each.
        for m in [1, 2, 4, 5, 12] {
            equivalence(&GPipe, mlp, &["fc2"], &[Device::Cpu; 2], m, 12).unwrap();
        }
        for m in [1, 3, 7] {
            equivalence(&GPipe, mlp, &["fc2", "fc3"], &[Device::Cpu; 3], m, 10).unwrap();
        }
    }

    #[test]
    fn the_naive_schedule_equals_the_unsplit_model_too() {
        for m in [1, 3] {
            equivalence(&Naive, mlp, &["fc2", "fc3"], &[Device::Cpu; 3], m, 10).unwrap();
        }
    }

    /// 1F1B runs the backwards in another order than GPipe (oldest first, between
    /// the forwards): the gradients add up in another order, the result is the same.
    #[test]
    fn one_f_one_b_equals_the_unsplit_model_too() {
        for m in [1, 2, 5, 12] {
            equivalence(&OneFOneB, mlp, &["fc2"], &[Device::Cpu; 2], m, 12).unwrap();
        }
        for m in [2, 3, 7] {
            equivalence(&OneFOneB, mlp, &["fc2", "fc3"], &[Device::Cpu; 3], m, 10).unwrap();
        }
    }

    #[test]
    fn split_cnn_pipeline_equals_the_unsplit_cnn() {
        let e = equivalence(
            &GPipe,
            models::cnn,
            &["conv2", "fc1"],
            &[Device::Cpu; 3],
            3,
            8,
        )
        .unwrap();
        assert!(e.loss_diff <= TOLERANCE && e.param_diff <= TOLERANCE && e.moved > 1e-3);
    }

    #[test]
    fn bubbles_of_gpipe_and_naive_follow_their_rules() {
        for (s, m) in [(2, 1), (2, 4), (3, 8), (4, 2)] {
            let g = bubble(&GPipe, s, m, theoretical_bubble(s, m), "(S-1)/(M+S-1)").unwrap();
            assert!(g < 1.0);
            let naive = (s - 1) as f64 / s as f64;
            bubble(&Naive, s, m, naive, "(S-1)/S").unwrap();
            bubble(&OneFOneB, s, m, theoretical_bubble(s, m), "(S-1)/(M+S-1)").unwrap();
        }
        let e = bubble(&Naive, 2, 4, theoretical_bubble(2, 4), "(S-1)/(M+S-1)")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("idle 50.0%") && e.contains("says 20.0%") && e.contains("stage 1 |"),
            "{e}"
        );
    }
}
