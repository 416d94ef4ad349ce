//! The stretch check fed the usual timing mistakes: each is named, with the
//! key of its hint.

use std::time::Instant;

use collectives::{BufferMut, Input, ReduceOp};

use super::*;

/// Times each call, barrier first; `combine` turns the per-iteration times
/// into the answer (on this rank's times unless `slowest`).
fn timed(
    comm: &dyn Communicator,
    warmup: usize,
    iters: usize,
    call: &mut dyn FnMut() -> collectives::Result<()>,
    slowest: bool,
    time_warmup: bool,
    mean: bool,
) -> Result<f64, LabError> {
    let mut times = Vec::new();
    for k in 0..warmup + iters {
        comm.barrier()?;
        let t0 = Instant::now();
        call()?;
        if k >= warmup || time_warmup {
            times.push(t0.elapsed().as_secs_f64() * 1e6);
        }
    }
    if slowest {
        comm.all_reduce(
            Input::InPlace,
            &mut BufferMut::from_slice(&mut times),
            ReduceOp::Max,
        )?;
    }
    times.sort_by(f64::total_cmp);
    Ok(if mean {
        times.iter().sum::<f64>() / times.len() as f64
    } else {
        times[times.len() / 2]
    })
}

fn own_time(
    c: &dyn Communicator,
    w: usize,
    i: usize,
    f: &mut dyn FnMut() -> collectives::Result<()>,
) -> Result<f64, LabError> {
    timed(c, w, i, f, false, false, false)
}

fn mean(
    c: &dyn Communicator,
    w: usize,
    i: usize,
    f: &mut dyn FnMut() -> collectives::Result<()>,
) -> Result<f64, LabError> {
    timed(c, w, i, f, true, false, true)
}

fn warm_up_timed(
    c: &dyn Communicator,
    w: usize,
    i: usize,
    f: &mut dyn FnMut() -> collectives::Result<()>,
) -> Result<f64, LabError> {
    timed(c, w, i, f, true, true, true)
}

fn no_warm_up(
    c: &dyn Communicator,
    _: usize,
    i: usize,
    f: &mut dyn FnMut() -> collectives::Result<()>,
) -> Result<f64, LabError> {
    timed(c, 0, i, f, true, false, false)
}

fn message(f: TimeCollective) -> String {
    check(f).unwrap_err().to_string()
}

#[test]
fn a_ranks_own_time_is_named() {
    let msg = message(own_time);
    assert!(msg.contains("rank 0 reports 1"), "{msg}");
    assert!(msg.contains("hint: slowest-rank"), "{msg}");
}

#[test]
fn the_mean_is_named() {
    let msg = message(mean);
    assert!(msg.contains("rank 0 reports 5"), "{msg}");
    assert!(msg.contains("hint: median-not-mean"), "{msg}");
}

#[test]
fn timed_or_missing_warm_up_calls_are_named() {
    let msg = message(warm_up_timed);
    assert!(msg.contains("warm-up calls were timed too"), "{msg}");
    assert!(msg.contains("hint: warm-up"), "{msg}");
    let msg = message(no_warm_up);
    assert!(msg.contains("the warm-up calls never ran"), "{msg}");
    assert!(msg.contains("hint: warm-up"), "{msg}");
}

#[test]
fn the_reference_timing_passes() {
    let said = check(crate::solution::time_collective).unwrap();
    assert!(said.contains("the slowest rank's median"), "{said}");
}

#[test]
fn judged_numbers_a_nan_is_never_near() {
    let right = [(30_500.0, WARMUP + ITERS); WORLD];
    assert_eq!(judge(&right), None);
    let mut nan = right;
    nan[1].0 = f64::NAN;
    assert!(judge(&nan).is_some());
}
