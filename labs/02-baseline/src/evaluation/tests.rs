//! The stretch check fed the usual evaluation mistakes: each is named, with
//! the key of its hint.

use super::*;

/// Right but in training mode: dropout on, BatchNorm by the batch (and its
/// running statistics moved).
fn training_mode(model: &dyn ModuleT, x: &Tensor, y: &Tensor, batch: usize) -> Result<(f64, f64)> {
    let rows = x.size()[0];
    let mut tally = trainers::train::Tally::new();
    for from in (0..rows).step_by(batch) {
        let len = (batch as i64).min(rows - from);
        let logits = model.forward_t(&x.f_narrow(0, from, len)?, true);
        tally.add_batch(&logits, &y.f_narrow(0, from, len)?)?;
    }
    Ok((tally.loss(), tally.accuracy()))
}

/// Right on good input, but without checking it: a batch of 0 is the whole
/// set, and the rows are never compared.
fn unchecked(model: &dyn ModuleT, x: &Tensor, y: &Tensor, batch: usize) -> Result<(f64, f64)> {
    let rows = x.size()[0].min(y.size()[0]);
    let batch = if batch == 0 {
        rows.max(1) as usize
    } else {
        batch
    };
    crate::solution::evaluate(
        model,
        &x.f_narrow(0, 0, rows)?,
        &y.f_narrow(0, 0, rows)?,
        batch,
    )
    .or(Ok((f64::NAN, f64::NAN)))
}

fn message(f: Evaluate) -> String {
    check(f).unwrap_err().to_string()
}

#[test]
fn training_mode_is_named() {
    let msg = message(training_mode);
    assert!(msg.contains("the model's variables moved"), "{msg}");
    assert!(msg.contains("hint: eval-mode"), "{msg}");
}

#[test]
fn the_mean_of_batch_means_is_named() {
    let msg = message(mean_of_batch_means);
    assert!(msg.contains("hint: weight-by-rows"), "{msg}");
}

#[test]
fn a_last_batch_left_out_is_named() {
    let msg = message(full_batches_only);
    assert!(msg.contains("accuracy 0.2500"), "{msg}");
    assert!(msg.contains("hint: last-batch"), "{msg}");
}

#[test]
fn bad_input_accepted_is_named() {
    let msg = message(unchecked);
    assert!(msg.contains("a batch size of 0 gave Ok("), "{msg}");
    assert!(msg.contains("hint: bad-input"), "{msg}");
}

#[test]
fn the_reference_evaluation_passes() {
    let said = check(crate::solution::evaluate).unwrap();
    assert!(said.contains("accuracy 0.28"), "{said}");
}
