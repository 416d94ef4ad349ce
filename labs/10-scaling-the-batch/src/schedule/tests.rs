//! The stretch check fed the usual schedule mistakes: each is named, with the
//! key of its hint.

use super::*;

/// The ramp from `start` at step 0 to `base_lr · k` at step `warmup` (`k` as
/// given), reached at step `warmup` or, with `shift`, one step early.
fn ramp_from(start: f64, target: f64, warmup: u64, step: u64, shift: u64) -> f64 {
    let step = step + shift;
    if step >= warmup {
        target
    } else {
        start + (target - start) * step as f64 / warmup as f64
    }
}

/// A schedule that checks its inputs (as a right one does) and then runs
/// `rate(base_lr, k, warmup, step)`.
fn checked(
    base_lr: f64,
    base_batch: usize,
    batch: usize,
    warmup: u64,
    step: u64,
    rate: fn(f64, f64, u64, u64) -> f64,
) -> Result<f64, LabError> {
    if base_lr.is_nan() || base_lr <= 0.0 || base_batch == 0 || batch == 0 {
        return Err(LabError::Wrong("bad input".into()));
    }
    Ok(rate(
        base_lr,
        batch as f64 / base_batch as f64,
        warmup,
        step,
    ))
}

fn from_zero(l: f64, bb: usize, b: usize, w: u64, s: u64) -> Result<f64, LabError> {
    checked(l, bb, b, w, s, |l, k, w, s| ramp_from(0.0, l * k, w, s, 0))
}

fn no_warm_up(l: f64, bb: usize, b: usize, w: u64, s: u64) -> Result<f64, LabError> {
    checked(l, bb, b, w, s, |l, k, _, _| l * k)
}

fn square_root(l: f64, bb: usize, b: usize, w: u64, s: u64) -> Result<f64, LabError> {
    checked(l, bb, b, w, s, |l, k, w, s| {
        ramp_from(l, l * k.sqrt(), w, s, 0)
    })
}

fn upside_down(l: f64, bb: usize, b: usize, w: u64, s: u64) -> Result<f64, LabError> {
    checked(l, bb, b, w, s, |l, k, w, s| ramp_from(l, l / k, w, s, 0))
}

fn counted_from_one(l: f64, bb: usize, b: usize, w: u64, s: u64) -> Result<f64, LabError> {
    checked(l, bb, b, w, s, |l, k, w, s| ramp_from(l, l * k, w, s, 1))
}

fn integer_ratio(l: f64, bb: usize, b: usize, w: u64, s: u64) -> Result<f64, LabError> {
    if bb == 0 || b == 0 || l.is_nan() || l <= 0.0 {
        return Err(LabError::Wrong("bad input".into()));
    }
    let k = (b / bb) as f64;
    Ok(ramp_from(l, l * k, w, s, 0))
}

/// Divides by the warm-up steps before asking whether the warm-up is over.
fn zero_over_zero(l: f64, bb: usize, b: usize, w: u64, s: u64) -> Result<f64, LabError> {
    checked(l, bb, b, w, s, |l, k, w, s| {
        let t = s as f64 / w as f64;
        if t < 1.0 || t.is_nan() {
            l + (l * k - l) * t
        } else {
            l * k
        }
    })
}

fn unchecked(l: f64, bb: usize, b: usize, w: u64, s: u64) -> Result<f64, LabError> {
    Ok(ramp_from(l, l * (b as f64 / bb as f64), w, s, 0))
}

fn message(f: LrAt) -> String {
    check(f).unwrap_err().to_string()
}

#[test]
fn a_warm_up_from_zero_is_named() {
    let msg = message(from_zero);
    assert!(msg.contains("step 0's rate is 0, expected 0.1"), "{msg}");
    assert!(msg.contains("hint: warm-up-from-zero"), "{msg}");
}

#[test]
fn no_warm_up_is_named() {
    let msg = message(no_warm_up);
    assert!(msg.contains("hint: no-warm-up"), "{msg}");
}

#[test]
fn the_square_root_rule_is_named() {
    let msg = message(square_root);
    assert!(msg.contains("hint: linear-not-sqrt"), "{msg}");
}

#[test]
fn an_upside_down_ratio_is_named() {
    let msg = message(upside_down);
    assert!(msg.contains("hint: ratio-upside-down"), "{msg}");
}

#[test]
fn a_ramp_one_step_off_is_named() {
    let msg = message(counted_from_one);
    assert!(msg.contains("step 0's rate is 0.17"), "{msg}");
    assert!(msg.contains("hint: warm-up-off-by-one"), "{msg}");
}

#[test]
fn an_integer_batch_ratio_is_named() {
    let msg = message(integer_ratio);
    assert!(msg.contains("batch 96 (k = 1.5)"), "{msg}");
    assert!(msg.contains("hint: integer-ratio"), "{msg}");
}

#[test]
fn zero_over_zero_warm_up_steps_is_named() {
    let msg = message(zero_over_zero);
    assert!(msg.contains("hint: no-warm-up-steps"), "{msg}");
}

#[test]
fn a_zero_batch_accepted_is_named() {
    let msg = message(unchecked);
    assert!(msg.contains("a base batch of 0 gave Ok(NaN)"), "{msg}");
    assert!(msg.contains("hint: bad-input"), "{msg}");
}

#[test]
fn the_reference_schedule_passes() {
    let said = check(crate::solution::lr_at).unwrap();
    assert!(said.contains("warms up from 0.1 to 0.8"), "{said}");
}

#[test]
fn judged_numbers_a_nan_is_never_near() {
    assert!(!near(f64::NAN, 0.1));
    let mut right: Vec<f64> = (0..=LAST).map(|s| ramp(s as f64, WARMUP as f64)).collect();
    assert_eq!(judge_warmup(&right), None);
    right[3] = f64::NAN;
    assert!(judge_warmup(&right).is_some());
}
