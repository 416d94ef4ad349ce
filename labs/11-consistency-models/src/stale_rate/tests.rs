//! Each named mistake, fed to the check, is named; trainers' own rate passes.

use super::*;
use trainers::Result;
use trainers::consistency::staleness_aware_lr;

fn message(f: StalenessLr) -> String {
    match check(f) {
        Ok(said) => panic!("passed: {said}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn trainers_own_rate_passes() {
    let said = check(staleness_aware_lr).unwrap();
    assert!(said.contains("applied it to 90 pushes"), "{said}");
}

#[test]
fn a_division_by_tau_zero_is_named() {
    fn by_tau(lr: f64, current: u64, read: u64) -> Result<f64> {
        Ok(lr / (current - read) as f64)
    }
    let msg = message(by_tau);
    assert!(
        msg.contains("returned inf") && msg.contains("a division by τ = 0"),
        "{msg}"
    );
    assert!(msg.ends_with("hint: divide-by-zero"), "{msg}");
}

#[test]
fn tau_off_by_one_is_named_both_ways() {
    fn plus_one(lr: f64, current: u64, read: u64) -> Result<f64> {
        Ok(lr / (current - read + 1) as f64)
    }
    let msg = message(plus_one);
    assert!(msg.contains("current 6, read 5) returned 0.05"), "{msg}");
    assert!(msg.ends_with("hint: tau-off-by-one"), "{msg}");
    // current − read − 1 goes below zero at τ = 0 (a panic in a debug
    // build, a huge τ in release: either is named).
    fn minus_one(lr: f64, current: u64, read: u64) -> Result<f64> {
        Ok(lr / (current - read - 1).max(1) as f64)
    }
    let msg = message(minus_one);
    assert!(msg.ends_with("hint: tau-off-by-one"), "{msg}");
    fn minus_one_saturating(lr: f64, current: u64, read: u64) -> Result<f64> {
        Ok(lr / (current - read).saturating_sub(1).max(1) as f64)
    }
    let msg = message(minus_one_saturating);
    assert!(msg.contains("current 7, read 5) returned 0.1"), "{msg}");
    assert!(msg.ends_with("hint: tau-off-by-one"), "{msg}");
}

#[test]
fn a_rate_multiplied_by_tau_is_named() {
    fn times(lr: f64, current: u64, read: u64) -> Result<f64> {
        Ok(lr * (current - read).max(1) as f64)
    }
    let msg = message(times);
    assert!(msg.ends_with("hint: multiply-not-divide"), "{msg}");
}

#[test]
fn a_rate_divided_twice_is_named() {
    fn twice(lr: f64, current: u64, read: u64) -> Result<f64> {
        let tau = (current - read).max(1) as f64;
        Ok(lr / tau / tau)
    }
    let msg = message(twice);
    assert!(msg.contains("divided by τ twice"), "{msg}");
    assert!(msg.ends_with("hint: scaled-twice"), "{msg}");
}

#[test]
fn a_version_from_the_future_must_be_an_error() {
    fn saturating(lr: f64, current: u64, read: u64) -> Result<f64> {
        Ok(lr / current.saturating_sub(read).max(1) as f64)
    }
    let msg = message(saturating);
    assert!(msg.contains("return an error"), "{msg}");
}
