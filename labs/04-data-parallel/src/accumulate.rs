//! The check of lab 4's stretch goal, gradient accumulation
//! (`cargo lab check 4 --stretch`): one optimizer step from gradients summed
//! over micro-batches must be the step on the whole batch. The learner's
//! `accumulated_step` runs on trainers' smooth check model (the main check's)
//! from known weights, twice in a row per case, and each step is compared
//! with the whole-batch step from the same parameters. The usual mistakes are
//! computed here too, from the same parameters, so a wrong step is named by
//! the mistake it equals.

#[cfg(test)]
mod tests;

use labkit::LabError;
use labkit_torch::lab_error;
use tch::nn::{self, ModuleT, OptimizerConfig};
use tch::{Device, Kind, Tensor};
use trainers::data_parallel::check::smooth_mlp;
use trainers::parity::store_diff;
use trainers::train::cross_entropy;
use trainers::{Error, Result};

/// An accumulation step, as `stretch::accumulated_step` (so a test can hand in
/// mistaken ones): (model, its optimizer, inputs, labels, micro-batches) →
/// the whole batch's mean loss.
pub type AccumulatedStep =
    fn(&dyn ModuleT, &mut nn::Optimizer, &Tensor, &Tensor, usize) -> Result<f64>;

/// The learning rate of every step (plain SGD, so a step is `lr · gradient`
/// and a wrong gradient shows in the parameters at once).
const LR: f64 = 0.1;
/// max |Δparam| allowed between the accumulated and the whole-batch step:
/// `LR` times the rounding of a sum of a few f32 gradients, with room (the
/// mistakes are 1e-3 and more away).
const PARAM_TOL: f64 = 1e-6;
/// (batch rows, micro-batches): an even split, then 30 rows in 4 (8, 8, 8, 6),
/// where a micro-batch's share is not 1/4.
const CASES: [(i64, usize); 2] = [(32, 4), (30, 4)];
/// Steps in a row per case: the second finds the first's gradients in place.
const STEPS: usize = 2;

/// A known mistake, as the check computes it to name the learner's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mistake {
    /// Each micro-batch's mean loss backpropagated as it is: k times the gradient.
    Unscaled,
    /// Each micro-batch's loss divided by the number of micro-batches, whatever
    /// its rows: right only when they split evenly.
    DividedByCount,
    /// Gradients zeroed before every micro-batch: only the last one's count.
    ZeroedEachTime,
    /// The optimizer stepped after every micro-batch: k small steps.
    SteppedEachTime,
    /// Gradients never zeroed: the previous step's are added in.
    NeverZeroed,
}

impl Mistake {
    /// Every mistake, in the order they are named.
    pub(crate) const ALL: [Mistake; 5] = [
        Mistake::Unscaled,
        Mistake::DividedByCount,
        Mistake::ZeroedEachTime,
        Mistake::SteppedEachTime,
        Mistake::NeverZeroed,
    ];

    /// The key of its hint and what it did.
    fn named(self) -> (&'static str, &'static str) {
        match self {
            Mistake::Unscaled => (
                "scale-the-loss",
                "each micro-batch's mean loss was backpropagated unscaled, so the summed \
                 gradient is k times the batch's",
            ),
            Mistake::DividedByCount => (
                "weight-by-rows",
                "each micro-batch's loss was divided by the number of micro-batches; with \
                 micro-batches of 8, 8, 8 and 6 rows a row of the last counts more than the others",
            ),
            Mistake::ZeroedEachTime => (
                "zero-grad-once",
                "the gradients were zeroed before each micro-batch, so only the last \
                 micro-batch's reached the step",
            ),
            Mistake::SteppedEachTime => (
                "step-once",
                "the optimizer stepped after every micro-batch: k small steps, not one",
            ),
            Mistake::NeverZeroed => (
                "zero-grad-first",
                "the gradients were not zeroed before the first micro-batch, so the previous \
                 step's were added in",
            ),
        }
    }
}

/// The whole batch's mean loss and the parameters after one step, right or
/// with `mistake`: the reference the check compares with, and the mistakes it
/// names. Micro-batches are `x.chunk(k)`'s (8, 8, 8, 6 for 30 rows in 4).
pub(crate) fn step_with(
    model: &dyn ModuleT,
    opt: &mut nn::Optimizer,
    x: &Tensor,
    y: &Tensor,
    k: usize,
    mistake: Option<Mistake>,
) -> Result<f64> {
    let rows = x.size().first().copied().unwrap_or(0);
    if k == 0 || k as i64 > rows {
        return Err(Error::InvalidArgument(format!(
            "{k} micro-batches of a batch of {rows} rows"
        )));
    }
    if mistake != Some(Mistake::NeverZeroed) {
        opt.zero_grad();
    }
    let mut total = 0.0;
    for (xi, yi) in x.f_chunk(k as i64, 0)?.iter().zip(y.f_chunk(k as i64, 0)?) {
        if mistake == Some(Mistake::ZeroedEachTime) {
            opt.zero_grad();
        }
        let share = xi.size()[0] as f64 / rows as f64;
        let l = cross_entropy(&model.forward_t(xi, true), &yi)?;
        total += share * l.f_double_value(&[])?;
        let scale = match mistake {
            Some(Mistake::Unscaled) => 1.0,
            Some(Mistake::DividedByCount) => 1.0 / k as f64,
            _ => share,
        };
        l.f_mul_scalar(scale)?.f_backward()?;
        if mistake == Some(Mistake::SteppedEachTime) {
            opt.step();
        }
    }
    if mistake != Some(Mistake::SteppedEachTime) {
        opt.step();
    }
    Ok(total)
}

/// The check's batch of `rows` rows: Fashion-MNIST-shaped inputs from a sine
/// (no random generator, so the same numbers on every machine) and labels
/// 0 to 9 in turn.
fn batch(rows: i64) -> Result<(Tensor, Tensor)> {
    let x = Tensor::f_arange(rows * 784, (Kind::Float, Device::Cpu))?
        .f_mul_scalar(0.37)?
        .f_sin()?
        .f_reshape([rows, 1, 28, 28])?;
    let y = Tensor::f_arange(rows, (Kind::Int64, Device::Cpu))?.f_remainder(10)?;
    Ok((x, y))
}

/// A model with its optimizer, from weights drawn with seed 0.
struct Trained {
    vs: nn::VarStore,
    model: Box<dyn ModuleT>,
    opt: nn::Optimizer,
}

impl Trained {
    fn new() -> Result<Trained> {
        let vs = nn::VarStore::new(Device::Cpu);
        let model = trainers::seed::seeded(0, || smooth_mlp().build(&vs.root()));
        let opt = nn::Sgd::default().build(&vs, LR)?;
        Ok(Trained {
            vs,
            model: Box::new(model),
            opt,
        })
    }
}

/// Why the check stopped: a wrong step, named, or a step that could not run
/// (the learner's error, an unsolved TODO, libtorch).
enum Fail {
    Wrong(String),
    Run(Error),
}

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        Fail::Run(e)
    }
}

impl From<tch::TchError> for Fail {
    fn from(e: tch::TchError) -> Fail {
        Fail::Run(e.into())
    }
}

/// The stretch goal's check (see the module docs). Returns what passed.
pub fn check(f: AccumulatedStep) -> std::result::Result<String, LabError> {
    run(f).map_err(|e| match e {
        Fail::Wrong(why) => LabError::Wrong(why),
        Fail::Run(e) => lab_error(e),
    })
}

fn run(f: AccumulatedStep) -> std::result::Result<String, Fail> {
    tch::set_num_threads(1);
    let mut worst = 0f64;
    for (rows, k) in CASES {
        let (x, y) = batch(rows)?;
        let mut yours = Trained::new()?;
        let mut reference = Trained::new()?;
        // The parameters before the previous step, to replay its gradients.
        let mut previous: Option<Trained> = None;
        for step in 0..STEPS {
            let what = format!(
                "{rows} rows in {k} micro-batches ({:?} rows), step {} of {STEPS} in a row",
                x.f_chunk(k as i64, 0)?
                    .iter()
                    .map(|c| c.size()[0])
                    .collect::<Vec<_>>(),
                step + 1
            );
            // The reference starts from your parameters, with its own
            // gradients from its previous step (as yours have).
            reference.vs.copy(&yours.vs)?;
            let mut before = Trained::new()?;
            before.vs.copy(&yours.vs)?;
            let loss = f(yours.model.as_ref(), &mut yours.opt, &x, &y, k)?;
            let want = step_with(
                reference.model.as_ref(),
                &mut reference.opt,
                &x,
                &y,
                k,
                None,
            )?;
            let diff = store_diff(&yours.vs, &reference.vs)?;
            if diff.is_nan() || diff > PARAM_TOL {
                return Err(Fail::Wrong(name_mistake(
                    &what,
                    diff,
                    (previous.as_ref(), &before),
                    &yours.vs,
                    (&x, &y, k),
                )?));
            }
            worst = worst.max(diff);
            if (loss - want).abs() > 1e-5 * want.abs().max(1.0) || loss.is_nan() {
                return Err(Fail::Wrong(format!(
                    "{what}: you returned loss {loss}, the batch's mean loss is {want}: each \
                     micro-batch's mean counts by its share of the rows\nhint: weight-by-rows"
                )));
            }
            let moved = store_diff(&yours.vs, &before.vs)?;
            if moved <= 1e-4 {
                return Err(Fail::Wrong(format!(
                    "{what}: the parameters moved by at most {moved:e}: did the optimizer step?"
                )));
            }
            previous = Some(before);
        }
    }
    for k in [0, 31] {
        let (x, y) = batch(30)?;
        let mut t = Trained::new()?;
        if let Ok(loss) = f(t.model.as_ref(), &mut t.opt, &x, &y, k) {
            return Err(Fail::Wrong(format!(
                "{k} micro-batches of 30 rows gave Ok({loss}): that cannot be split (a \
                 micro-batch of no rows has no mean loss); it must be an error saying why\n\
                 hint: bad-micro-batches"
            )));
        }
    }
    Ok(format!(
        "{STEPS} steps in a row of 32 rows in 4 micro-batches and of 30 rows in 4 (8, 8, 8, 6) \
         equal the whole-batch steps (max |Δparam| {worst:.1e} ≤ {PARAM_TOL:e}); 0 or 31 \
         micro-batches of 30 rows are errors"
    ))
}

/// What a step that left parameters `got` (max |Δ| `diff` from the right
/// ones) did wrong: the mistake whose step from `before` gives `got` (with
/// the gradients the step from `previous` left, for a missing zero_grad), or
/// the difference alone.
fn name_mistake(
    what: &str,
    diff: f64,
    (previous, before): (Option<&Trained>, &Trained),
    got: &nn::VarStore,
    (x, y, k): (&Tensor, &Tensor, usize),
) -> Result<String> {
    let head = format!(
        "{what}: max |your parameters − the whole-batch step's| = {diff:e}, more than \
         {PARAM_TOL:e}"
    );
    for mistake in Mistake::ALL {
        let mut m = Trained::new()?;
        if mistake == Mistake::NeverZeroed {
            // Leftover gradients show from the second step on: replay the
            // previous step, whose gradients stay in place (`copy` writes the
            // numbers only).
            let Some(previous) = previous else { continue };
            m.vs.copy(&previous.vs)?;
            step_with(m.model.as_ref(), &mut m.opt, x, y, k, None)?;
        }
        m.vs.copy(&before.vs)?;
        step_with(m.model.as_ref(), &mut m.opt, x, y, k, Some(mistake))?;
        if store_diff(&m.vs, got)? <= PARAM_TOL {
            let (key, why) = mistake.named();
            return Ok(format!("{head}: {why}\nhint: {key}"));
        }
    }
    Ok(head)
}
