//! The stretch check fed the mistakes a learner makes on the way to
//! SyncBatchNorm's running statistics: each is named, with the key of its
//! hint.

use super::*;
use trainers::sync_bn::update_running;

fn message(f: Update) -> String {
    check(f).unwrap_err().to_string()
}

/// `running ← (1 − a)·running + a·batch` with `unbias` applied to the
/// variance, with or without autograd, written into the buffers or not.
fn update(
    rm: &Tensor,
    rv: &Tensor,
    mean: &Tensor,
    var: &Tensor,
    a: f64,
    unbias: f64,
    in_place: bool,
) -> trainers::Result<()> {
    let m = rm.f_mul_scalar(1.0 - a)?.f_add(&mean.f_mul_scalar(a)?)?;
    let v = rv
        .f_mul_scalar(1.0 - a)?
        .f_add(&var.f_mul_scalar(a * unbias)?)?;
    if in_place {
        rm.shallow_clone().f_copy_(&m)?;
        rv.shallow_clone().f_copy_(&v)?;
    }
    Ok(())
}

fn into_a_copy(rm: &Tensor, rv: &Tensor, m: &Tensor, v: &Tensor, n: f64) -> trainers::Result<()> {
    tch::no_grad(|| update(&rm.copy(), &rv.copy(), m, v, 0.1, n / (n - 1.0), true))
}
fn biased(rm: &Tensor, rv: &Tensor, m: &Tensor, v: &Tensor, _: f64) -> trainers::Result<()> {
    tch::no_grad(|| update(rm, rv, m, v, 0.1, 1.0, true))
}
fn swapped(rm: &Tensor, rv: &Tensor, m: &Tensor, v: &Tensor, n: f64) -> trainers::Result<()> {
    tch::no_grad(|| update(rm, rv, m, v, 0.9, n / (n - 1.0), true))
}
fn in_the_graph(rm: &Tensor, rv: &Tensor, m: &Tensor, v: &Tensor, n: f64) -> trainers::Result<()> {
    update(rm, rv, m, v, 0.1, n / (n - 1.0), true)
}
/// Unbiased over one rank's 8 rows instead of all n: right on the probe
/// (n = 4 there), wrong where the batch is 2 ranks' rows.
fn local_rows(rm: &Tensor, rv: &Tensor, m: &Tensor, v: &Tensor, n: f64) -> trainers::Result<()> {
    let rows = if n > 4.0 { 8.0 } else { n };
    tch::no_grad(|| update(rm, rv, m, v, 0.1, rows / (rows - 1.0), true))
}

#[test]
fn statistics_written_into_a_copy_are_named() {
    let msg = message(into_a_copy);
    assert!(msg.contains("unchanged"), "{msg}");
    assert!(msg.contains("hint: in-place"), "{msg}");
}

#[test]
fn a_biased_running_variance_is_named() {
    let msg = message(biased);
    assert!(msg.contains("hint: unbiased-variance"), "{msg}");
}

#[test]
fn momentum_the_wrong_way_round_is_named() {
    let msg = message(swapped);
    assert!(msg.contains("hint: momentum-weight"), "{msg}");
}

#[test]
fn buffers_that_join_the_graph_are_named() {
    let msg = message(in_the_graph);
    assert!(msg.contains("running mean requires a gradient"), "{msg}");
    assert!(msg.contains("hint: outside-autograd"), "{msg}");
}

#[test]
fn one_ranks_row_count_is_caught_against_libtorch() {
    let msg = message(local_rows);
    assert!(msg.contains("on 2 ranks of 8 rows (n = 16)"), "{msg}");
    assert!(msg.contains("running variance"), "{msg}");
}

#[test]
fn a_nan_is_never_close() {
    assert!(!close(&[f32::NAN], &[1.0]));
    assert!(close(&[1.0], &[1.0]));
}

#[test]
fn trainers_update_passes() {
    let said = check(update_running).unwrap();
    assert!(said.contains("2 ranks"), "{said}");
}
