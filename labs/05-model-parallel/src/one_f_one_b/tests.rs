//! The stretch check fed the mistakes a learner makes on the way to 1F1B:
//! each is named, with the key of its hint.

use super::*;
use trainers::pipeline::Naive;

use Action::{Backward as B, Forward as F};

fn failure(f: ActionsFn) -> String {
    match check(f) {
        Ok(said) => panic!("the check passed a wrong 1F1B: {said}"),
        Err(e) => e.to_string(),
    }
}

/// 1F1B with `warm_up(stage, stages)` forwards before the steady state,
/// clamped to the micro-batches as trainers' is.
fn with_warm_up(
    warm_up: fn(usize, usize) -> usize,
    stage: usize,
    stages: usize,
    m: usize,
) -> Vec<Action> {
    let w = warm_up(stage, stages).min(m);
    (0..w)
        .map(F)
        .chain((w..m).flat_map(|k| [F(k), B(k - w)]))
        .chain((m - w..m).map(B))
        .collect()
}

/// The steady state written backward first: the last stage's first action is
/// B0.
fn backward_first(stage: usize, stages: usize, m: usize) -> Result<Vec<Action>, LabError> {
    let w = (stages - stage - 1).min(m);
    Ok((0..w)
        .map(F)
        .chain((w..m).flat_map(|k| [B(k - w), F(k)]))
        .chain((m - w..m).map(B))
        .collect())
}

/// The warm-up counted from the wrong end: stage s warms up with s forwards.
fn reversed_warm_up(stage: usize, stages: usize, m: usize) -> Result<Vec<Action>, LabError> {
    Ok(with_warm_up(|s, _| s, stage, stages, m))
}

/// One forward too many in every warm-up: S − s instead of S − s − 1.
fn warm_up_one_too_long(stage: usize, stages: usize, m: usize) -> Result<Vec<Action>, LabError> {
    Ok(with_warm_up(|s, n| n - s, stage, stages, m))
}

/// Stage 0's warm-up one short on 3 and more stages (the others right).
fn first_stage_warm_up_short(
    stage: usize,
    stages: usize,
    m: usize,
) -> Result<Vec<Action>, LabError> {
    Ok(with_warm_up(
        |s, n| if s == 0 && n > 2 { n - 2 } else { n - s - 1 },
        stage,
        stages,
        m,
    ))
}

/// No warm-up: every stage alternates from the start.
fn no_warm_up(stage: usize, stages: usize, m: usize) -> Result<Vec<Action>, LabError> {
    Ok(with_warm_up(|_, _| 0, stage, stages, m))
}

/// All forwards first: GPipe.
fn gpipe(stage: usize, stages: usize, m: usize) -> Result<Vec<Action>, LabError> {
    GPipe.actions(stage, stages, m).map_err(wrong)
}

/// The warm-up not clamped to the micro-batches: forward 2 of 2 on 4 stages.
fn unclamped(stage: usize, stages: usize, m: usize) -> Result<Vec<Action>, LabError> {
    let w = stages - stage - 1;
    Ok((0..w)
        .map(F)
        .chain((w..m).flat_map(|k| [F(k), B(k - w)]))
        .chain((m.saturating_sub(w)..m).map(B))
        .collect())
}

#[test]
fn a_backward_before_its_forward_is_named() {
    let msg = failure(backward_first);
    assert!(msg.contains("stage 1 of 2, 4 micro-batches"), "{msg}");
    assert!(msg.contains("runs backward 0 before forward 0"), "{msg}");
    assert!(msg.contains("hint: backward-before-forward"), "{msg}");
}

#[test]
fn a_warm_up_that_deadlocks_is_named_not_hung() {
    let clock = std::time::Instant::now();
    let msg = failure(reversed_warm_up);
    assert!(clock.elapsed() < std::time::Duration::from_secs(5));
    assert!(msg.contains("deadlocks"), "{msg}");
    assert!(
        msg.contains("stage 0 runs 1 forward(s) before its first backward, but stage 1 needs 2"),
        "{msg}"
    );
    assert!(msg.contains("hint: warm-up-deadlock"), "{msg}");
}

#[test]
fn a_warm_up_too_long_is_named_with_the_stage_and_count() {
    let msg = failure(warm_up_one_too_long);
    assert!(
        msg.contains("stage 0 holds 3 micro-batches' activations at its peak"),
        "{msg}"
    );
    assert!(
        msg.contains("stage 0 runs 3 forward(s) before its first backward: it holds 3"),
        "{msg}"
    );
    assert!(msg.contains("hint: warm-up-length"), "{msg}");
}

#[test]
fn a_warm_up_too_short_is_named_by_the_bubble() {
    let msg = failure(first_stage_warm_up_short);
    assert!(
        msg.contains("on 3 equal stages with 3 micro-batches"),
        "{msg}"
    );
    assert!(msg.contains("stage 0 runs 2 forward(s)"), "{msg}");
    assert!(msg.contains("(3 would keep them busy)"), "{msg}");
    assert!(msg.contains("hint: warm-up-length"), "{msg}");
}

#[test]
fn no_warm_up_is_named_the_naive_schedule() {
    let msg = failure(no_warm_up);
    assert!(msg.contains("no warm-up"), "{msg}");
    assert!(msg.contains("hint: no-warm-up"), "{msg}");
    // It is the naive schedule exactly.
    for (s, m) in SHAPES {
        for stage in 0..s {
            assert_eq!(
                no_warm_up(stage, s, m).unwrap(),
                Naive.actions(stage, s, m).unwrap()
            );
        }
    }
}

#[test]
fn gpipes_order_is_named_by_its_memory() {
    let msg = failure(gpipe);
    assert!(
        msg.contains(
            "stage 0 holds 4 micro-batches' activations at its peak; 1F1B holds at most S − s = 2"
        ),
        "{msg}"
    );
    assert!(msg.contains("that is GPipe's order"), "{msg}");
    assert!(msg.contains("hint: that-is-gpipe"), "{msg}");
}

#[test]
fn a_warm_up_past_the_last_micro_batch_is_named() {
    let msg = failure(unclamped);
    assert!(msg.contains("stage 0 of 4, 2 micro-batches"), "{msg}");
    assert!(msg.contains("hint: micro-batch-missing"), "{msg}");
}

#[test]
fn trainers_1f1b_passes_and_prints_both_peaks() {
    let said = check(trainers_1f1b).unwrap();
    assert!(
        said.contains("yours [4, 3, 2, 1], GPipe's [8, 8, 8, 8]"),
        "{said}"
    );
}
