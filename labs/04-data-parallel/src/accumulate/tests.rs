//! The stretch check fed the usual accumulation mistakes: each is named, with
//! the key of its hint.

use super::*;

fn unscaled(
    m: &dyn ModuleT,
    o: &mut nn::Optimizer,
    x: &Tensor,
    y: &Tensor,
    k: usize,
) -> Result<f64> {
    step_with(m, o, x, y, k, Some(Mistake::Unscaled))
}

fn divided_by_count(
    m: &dyn ModuleT,
    o: &mut nn::Optimizer,
    x: &Tensor,
    y: &Tensor,
    k: usize,
) -> Result<f64> {
    step_with(m, o, x, y, k, Some(Mistake::DividedByCount))
}

fn zeroed_each_time(
    m: &dyn ModuleT,
    o: &mut nn::Optimizer,
    x: &Tensor,
    y: &Tensor,
    k: usize,
) -> Result<f64> {
    step_with(m, o, x, y, k, Some(Mistake::ZeroedEachTime))
}

fn stepped_each_time(
    m: &dyn ModuleT,
    o: &mut nn::Optimizer,
    x: &Tensor,
    y: &Tensor,
    k: usize,
) -> Result<f64> {
    step_with(m, o, x, y, k, Some(Mistake::SteppedEachTime))
}

fn never_zeroed(
    m: &dyn ModuleT,
    o: &mut nn::Optimizer,
    x: &Tensor,
    y: &Tensor,
    k: usize,
) -> Result<f64> {
    step_with(m, o, x, y, k, Some(Mistake::NeverZeroed))
}

/// Right, but with the micro-batches' losses summed unweighted in the
/// returned number.
fn mean_of_means(
    m: &dyn ModuleT,
    o: &mut nn::Optimizer,
    x: &Tensor,
    y: &Tensor,
    k: usize,
) -> Result<f64> {
    step_with(m, o, x, y, k, None)?;
    let mut sum = 0.0;
    for (xi, yi) in x.f_chunk(k as i64, 0)?.iter().zip(y.f_chunk(k as i64, 0)?) {
        sum += cross_entropy(&m.forward_t(xi, true), &yi)?.f_double_value(&[])?;
    }
    Ok(sum)
}

/// Right on good input, but 0 micro-batches step on the whole batch.
fn unchecked(
    m: &dyn ModuleT,
    o: &mut nn::Optimizer,
    x: &Tensor,
    y: &Tensor,
    k: usize,
) -> Result<f64> {
    step_with(m, o, x, y, k.max(1).min(x.size()[0] as usize), None)
}

fn message(f: AccumulatedStep) -> String {
    check(f).unwrap_err().to_string()
}

#[test]
fn unscaled_micro_batch_losses_are_named() {
    let msg = message(unscaled);
    assert!(msg.contains("32 rows in 4 micro-batches"), "{msg}");
    assert!(msg.contains("hint: scale-the-loss"), "{msg}");
}

#[test]
fn dividing_by_the_count_with_uneven_micro_batches_is_named() {
    let msg = message(divided_by_count);
    // Right on the even split; wrong only where the rows differ.
    assert!(msg.contains("[8, 8, 8, 6] rows"), "{msg}");
    assert!(msg.contains("hint: weight-by-rows"), "{msg}");
}

#[test]
fn zeroing_before_every_micro_batch_is_named() {
    let msg = message(zeroed_each_time);
    assert!(msg.contains("hint: zero-grad-once"), "{msg}");
}

#[test]
fn a_step_per_micro_batch_is_named() {
    let msg = message(stepped_each_time);
    assert!(msg.contains("hint: step-once"), "{msg}");
}

#[test]
fn gradients_never_zeroed_are_named_on_the_second_step() {
    let msg = message(never_zeroed);
    assert!(msg.contains("step 2 of 2"), "{msg}");
    assert!(msg.contains("hint: zero-grad-first"), "{msg}");
}

#[test]
fn an_unweighted_loss_is_named() {
    let msg = message(mean_of_means);
    assert!(msg.contains("you returned loss"), "{msg}");
    assert!(msg.contains("hint: weight-by-rows"), "{msg}");
}

#[test]
fn zero_micro_batches_accepted_is_named() {
    let msg = message(unchecked);
    assert!(msg.contains("0 micro-batches of 30 rows gave Ok("), "{msg}");
    assert!(msg.contains("hint: bad-micro-batches"), "{msg}");
}

#[test]
fn the_reference_accumulation_passes() {
    let said = check(crate::solution::accumulated_step).unwrap();
    assert!(said.contains("equal the whole-batch steps"), "{said}");
}
