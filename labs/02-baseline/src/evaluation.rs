//! The check of lab 2's stretch goal, evaluating a model
//! (`cargo lab check 2 --stretch`). The model has BatchNorm and dropout, so
//! training mode gives other numbers and moves the running statistics; the
//! 50 examples go in batches of 16 (16, 16, 16 and 2), and their labels are
//! chosen from the model's own eval-mode predictions so that the last batch
//! is all right and the others a quarter right: the mean of the batches'
//! means, and a set without its last batch, are far from the whole set's
//! numbers, and each is named.

#[cfg(test)]
mod tests;

use labkit::LabError;
use labkit::named;
use labkit_torch::lab_error;
use tch::nn::{self, ModuleT};
use tch::{Device, Kind, Reduction, Tensor};
use trainers::{Error, Result};

/// An evaluation, as `stretch::evaluate` (so a test can hand in mistaken
/// ones): (model, inputs, labels, batch size) → (mean loss, accuracy).
pub type Evaluate = fn(&dyn ModuleT, &Tensor, &Tensor, usize) -> Result<(f64, f64)>;

/// Examples in the check's set.
const ROWS: i64 = 50;
/// The batch size asked for: 16, 16, 16 and 2.
const BATCH: usize = 16;
/// The loss's relative tolerance: batched and whole-set forwards round
/// differently in the last bits; every mistake is 1e-3 and more away.
const LOSS_TOL: f64 = 1e-5;

/// The check's model: `fc 784→32, BatchNorm, ReLU, dropout 0.5, fc 32→10`,
/// from weights drawn with seed 0.
fn model(vs: &nn::VarStore) -> nn::SequentialT {
    let p = vs.root();
    trainers::seed::seeded(0, || {
        nn::seq_t()
            .add(nn::linear(&p / "fc1", 784, 32, Default::default()))
            .add(nn::batch_norm1d(&p / "bn", 32, Default::default()))
            .add_fn(|x| x.relu())
            .add_fn_t(|x, train| x.dropout(0.5, train))
            .add(nn::linear(&p / "fc2", 32, 10, Default::default()))
    })
}

/// The check's inputs, from a sine (the same numbers on every machine), and
/// labels: each example's eval-mode prediction for row 48 on and every
/// fourth row before, the next class for the rest (12 + 2 right of 50).
fn data(model: &dyn ModuleT) -> Result<(Tensor, Tensor)> {
    let x = Tensor::f_arange(ROWS * 784, (Kind::Float, Device::Cpu))?
        .f_mul_scalar(0.37)?
        .f_sin()?
        .f_reshape([ROWS, 784])?;
    let predicted = tch::no_grad(|| model.forward_t(&x, false)).f_argmax(1, false)?;
    let rows = Tensor::f_arange(ROWS, (Kind::Int64, Device::Cpu))?;
    let right = rows
        .f_remainder(4)?
        .f_eq(0)?
        .f_logical_or(&rows.f_ge(48)?)?;
    let wrong = predicted.f_add_scalar(1)?.f_remainder(10)?;
    let y = predicted.f_where_self(&right, &wrong)?;
    Ok((x, y))
}

/// Mean loss and accuracy of `logits` against `y`, in f64.
fn metrics(logits: &Tensor, y: &Tensor) -> Result<(f64, f64)> {
    let loss = logits
        .f_cross_entropy_loss::<Tensor>(y, None, Reduction::None, -100, 0.0)?
        .f_to_kind(Kind::Double)?
        .f_mean(Kind::Double)?
        .f_double_value(&[])?;
    let hits = logits
        .f_argmax(1, false)?
        .f_eq_tensor(y)?
        .f_to_kind(Kind::Double)?
        .f_mean(Kind::Double)?
        .f_double_value(&[])?;
    Ok((loss, hits))
}

/// The eval-mode metrics of each batch of `batch` rows (the last smaller),
/// with its rows.
fn per_batch(
    model: &dyn ModuleT,
    x: &Tensor,
    y: &Tensor,
    batch: usize,
) -> Result<Vec<(f64, f64, i64)>> {
    let rows = x.size()[0];
    let mut out = Vec::new();
    for from in (0..rows).step_by(batch.max(1)) {
        let len = (batch as i64).min(rows - from);
        let xb = x.f_narrow(0, from, len)?;
        let logits = tch::no_grad(|| model.forward_t(&xb, false));
        let (l, a) = metrics(&logits, &y.f_narrow(0, from, len)?)?;
        out.push((l, a, len));
    }
    Ok(out)
}

/// A mistake: the mean of the batches' means.
pub(crate) fn mean_of_batch_means(
    model: &dyn ModuleT,
    x: &Tensor,
    y: &Tensor,
    batch: usize,
) -> Result<(f64, f64)> {
    let b = per_batch(model, x, y, batch)?;
    let n = b.len() as f64;
    Ok((
        b.iter().map(|p| p.0).sum::<f64>() / n,
        b.iter().map(|p| p.1).sum::<f64>() / n,
    ))
}

/// A mistake: only the full batches (as `chunks_exact`, or a loop that stops
/// when a whole batch no longer fits).
pub(crate) fn full_batches_only(
    model: &dyn ModuleT,
    x: &Tensor,
    y: &Tensor,
    batch: usize,
) -> Result<(f64, f64)> {
    let b = per_batch(model, x, y, batch)?;
    let full: Vec<_> = b.iter().filter(|p| p.2 == batch as i64).collect();
    let n: i64 = full.iter().map(|p| p.2).sum();
    Ok((
        full.iter().map(|p| p.0 * p.2 as f64).sum::<f64>() / n as f64,
        full.iter().map(|p| p.1 * p.2 as f64).sum::<f64>() / n as f64,
    ))
}

/// The largest change of any of `vs`'s variables since `before`.
fn moved(vs: &nn::VarStore, before: &[(String, Tensor)]) -> Result<f64> {
    let now = vs.variables();
    let mut max = 0f64;
    for (name, t) in before {
        if let Some(n) = now.get(name) {
            max = max.max(n.f_sub(t)?.f_abs()?.f_max()?.f_double_value(&[])?);
        }
    }
    Ok(max)
}

/// The stretch goal's check (see the module docs). Returns what passed.
pub fn check(f: Evaluate) -> std::result::Result<String, LabError> {
    run(f).map_err(|e| match e {
        Fail::Wrong(why) => LabError::Wrong(why),
        Fail::Run(e) => lab_error(e),
    })
}

/// Why the check stopped: a wrong evaluation, named, or one that could not
/// run (the learner's error, an unsolved TODO, libtorch).
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

fn run(f: Evaluate) -> std::result::Result<String, Fail> {
    tch::set_num_threads(1);
    let vs = nn::VarStore::new(Device::Cpu);
    let model = model(&vs);
    let (x, y) = data(&model)?;
    let (want_loss, want_acc) = tch::no_grad(|| metrics(&model.forward_t(&x, false), &y))?;
    let before: Vec<(String, Tensor)> = vs
        .variables()
        .into_iter()
        .map(|(n, t)| (n, t.copy()))
        .collect();
    let (loss, acc) = f(&model, &x, &y, BATCH)?;
    let head = format!(
        "{ROWS} examples in batches of {BATCH} (16, 16, 16, 2), on fc–BatchNorm–ReLU–dropout–fc: \
         you returned loss {loss:.6}, accuracy {acc:.4}; the whole set's are {want_loss:.6} and \
         {want_acc:.4}"
    );
    let drift = moved(&vs, &before)?;
    if drift > 0.0 {
        return Err(Fail::Wrong(named(
            format!(
                "{head}: the model's variables moved (by up to {drift:.2e}): BatchNorm updates \
                 its running statistics in training mode, and dropout is on"
            ),
            "eval-mode",
        )));
    }
    let near = |(l, a): (f64, f64), (wl, wa): (f64, f64)| {
        (l - wl).abs() <= LOSS_TOL * wl.abs().max(1.0) && (a - wa).abs() < 0.5 / ROWS as f64
    };
    if !near((loss, acc), (want_loss, want_acc)) {
        let candidates: [(Evaluate, &str, &str); 2] = [
            (
                mean_of_batch_means,
                "weight-by-rows",
                "that is the mean of the 4 batches' means, where the batch of 2 counts as \
                 much as a batch of 16",
            ),
            (
                full_batches_only,
                "last-batch",
                "that is the first 48 examples only: the last, smaller batch was left out",
            ),
        ];
        for (g, key, why) in candidates {
            if near((loss, acc), g(&model, &x, &y, BATCH)?) {
                return Err(Fail::Wrong(named(format!("{head}: {why}"), key)));
            }
        }
        return Err(Fail::Wrong(head));
    }
    let empty = x.f_narrow(0, 0, 0)?;
    let no_labels = y.f_narrow(0, 0, 0)?;
    let fewer = y.f_narrow(0, 0, ROWS - 1)?;
    let bad: [(&Tensor, &Tensor, usize, &str); 3] = [
        (&x, &y, 0, "a batch size of 0"),
        (&empty, &no_labels, BATCH, "an empty set"),
        (&x, &fewer, BATCH, "50 inputs with 49 labels"),
    ];
    for (bx, by, batch, what) in bad {
        if let Ok(got) = f(&model, bx, by, batch) {
            return Err(Fail::Wrong(named(
                format!("{what} gave Ok({got:?}): it must be an error saying why"),
                "bad-input",
            )));
        }
    }
    Ok(format!(
        "{ROWS} examples in batches of {BATCH}: loss {loss:.4} and accuracy {acc:.2} are the \
         whole set's in eval mode, the running statistics stayed put, bad input is an error"
    ))
}
