//! Each named mistake, fed to the check as a learner would write it.

use super::*;
use crate::check_on_paper_with;
use labkit::LabError;
use trainers::pipeline::{GPipe, Naive, Schedule};

fn failure(kind: Kind, f: ActionsFn) -> String {
    match check_on_paper_with(kind, f) {
        Ok(()) => panic!("the check passed a wrong {} schedule", kind.name()),
        Err(e) => e.to_string(),
    }
}

fn naive_ok(s: usize, n: usize, m: usize) -> Result<Vec<Action>, LabError> {
    Naive
        .actions(s, n, m)
        .map_err(|e| LabError::Wrong(e.to_string()))
}

fn gpipe_ok(s: usize, n: usize, m: usize) -> Result<Vec<Action>, LabError> {
    GPipe
        .actions(s, n, m)
        .map_err(|e| LabError::Wrong(e.to_string()))
}

/// The loop stops one early: `0..micro_batches - 1`.
fn naive_off_by_one(_: usize, _: usize, m: usize) -> Result<Vec<Action>, LabError> {
    Ok((0..m - 1)
        .flat_map(|k| [Action::Forward(k), Action::Backward(k)])
        .collect())
}

/// The naive schedule written as GPipe: every forward first.
fn naive_as_gpipe(s: usize, n: usize, m: usize) -> Result<Vec<Action>, LabError> {
    gpipe_ok(s, n, m)
}

/// GPipe written as the naive schedule: one micro-batch at a time.
fn gpipe_as_naive(s: usize, n: usize, m: usize) -> Result<Vec<Action>, LabError> {
    naive_ok(s, n, m)
}

/// GPipe with the two halves swapped: every backward first.
fn gpipe_backwards_first(_: usize, _: usize, m: usize) -> Result<Vec<Action>, LabError> {
    Ok((0..m)
        .map(Action::Backward)
        .chain((0..m).map(Action::Forward))
        .collect())
}

#[test]
fn trainers_own_schedules_pass_and_name_nothing() {
    check_on_paper_with(Kind::Naive, naive_ok).unwrap();
    check_on_paper_with(Kind::GPipe, gpipe_ok).unwrap();
    assert_eq!(diagnose(Kind::Naive, naive_ok), None);
    assert_eq!(diagnose(Kind::GPipe, gpipe_ok), None);
}

#[test]
fn a_micro_batch_left_out_is_named() {
    let e = failure(Kind::Naive, naive_off_by_one);
    assert!(
        e.contains("naive schedule, stage 0 of 2, 4 micro-batches: your list [F0 B0 F1 B1 F2 B2] has no forward 3"),
        "{e}"
    );
    assert!(e.ends_with("hint: micro-batch-missing"), "{e}");
}

#[test]
fn a_naive_schedule_that_overlaps_micro_batches_is_named() {
    let e = failure(Kind::Naive, naive_as_gpipe);
    assert!(e.contains("starts forward 1 before backward 0"), "{e}");
    assert!(e.ends_with("hint: naive-overlaps"), "{e}");
}

#[test]
fn a_gpipe_that_runs_one_micro_batch_at_a_time_is_named() {
    let e = failure(Kind::GPipe, gpipe_as_naive);
    assert!(
        e.contains(
            "your GPipe list [F0 B0 F1 B1 F2 B2 F3 B3] runs a backward after only 1 of 4 forwards"
        ),
        "{e}"
    );
    assert!(e.ends_with("hint: gpipe-one-at-a-time"), "{e}");
}

#[test]
fn a_backward_before_its_forward_is_named() {
    let e = failure(Kind::GPipe, gpipe_backwards_first);
    assert!(e.contains("runs backward 0 before forward 0"), "{e}");
    assert!(e.ends_with("hint: backward-before-forward"), "{e}");
}
