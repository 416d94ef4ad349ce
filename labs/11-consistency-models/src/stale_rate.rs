//! The check of lab 11's stretch goal, the asynchronous parameter server's
//! staleness-aware learning rate (`cargo lab check 11 --stretch`): first a
//! table of (current, read) versions against the rule, each wrong answer
//! compared with what the likely mistakes give; then trainers' asynchronous
//! server runs with the rate plugged in, and its log of pushes must show the
//! rule applied to every push.

#[cfg(test)]
mod tests;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use labkit::{LabError, named, panic_message};
use trainers::consistency::check::job;
use trainers::consistency::{Bounded, Consistency, StalenessLr, train};
use trainers::data;

use crate::lab_error;

/// The server's rate in the table.
const LR: f64 = 0.1;

/// (current, read): τ of 0, 0, 1, 2, 4, 8 and 3. τ = 0 first, so that a
/// division by it is what the check meets first.
const TABLE: [(u64, u64); 7] = [(0, 0), (5, 5), (6, 5), (7, 5), (9, 5), (12, 4), (1000, 997)];

/// The rule: `lr / max(1, τ)`.
fn want(lr: f64, tau: u64) -> f64 {
    lr / tau.max(1) as f64
}

/// `lr / τ` and `lr · (1 / τ)` differ in the last bit or so: rounding, not a
/// mistake.
fn close(got: f64, want: f64) -> bool {
    (got - want).abs() <= 1e-12 * want.abs()
}

/// `f(lr, current, read)`, a panic caught as its message.
fn call(f: StalenessLr, lr: f64, current: u64, read: u64) -> Result<f64, String> {
    match catch_unwind(AssertUnwindSafe(|| f(lr, current, read))) {
        Ok(Ok(x)) => Ok(x),
        Ok(Err(e)) => Err(lab_error(e).to_string()),
        Err(p) => Err(format!("panicked: {}", panic_message(p.as_ref()))),
    }
}

/// What is wrong with `got` for `(current, read)`, named.
fn judge(current: u64, read: u64, got: f64) -> Option<String> {
    let tau = current - read;
    let right = want(LR, tau);
    if close(got, right) {
        return None;
    }
    let head = format!(
        "staleness_lr(lr {LR}, current {current}, read {read}) returned {got}, where τ = \
         {tau} gives {right}"
    );
    let t = tau as f64;
    let is = |x: f64| close(got, x);
    Some(if !got.is_finite() {
        named(
            format!(
                "{head}: a division by τ = 0. Nobody pushed in between: the gradient is fresh, \
                 and keeps the whole rate"
            ),
            "divide-by-zero",
        )
    } else if is(LR / (t + 1.0)) || (tau >= 2 && is(LR / (t - 1.0))) {
        named(
            format!(
                "{head}, which is τ off by one: τ is current − read, the pushes applied since \
                 the worker read"
            ),
            "tau-off-by-one",
        )
    } else if is(LR * t) || is(LR * t.max(1.0)) {
        named(
            format!("{head}: the rate was multiplied by τ; a staler gradient must move less"),
            "multiply-not-divide",
        )
    } else if is(LR / (t * t)) {
        named(
            format!("{head}: the rate was divided by τ twice"),
            "scaled-twice",
        )
    } else {
        head
    })
}

/// The table, then the server. Returns what passed.
pub fn check(f: StalenessLr) -> Result<String, LabError> {
    for (current, read) in TABLE {
        let got = match call(f, LR, current, read) {
            Ok(got) => got,
            Err(e) if e.contains("overflow") && current == read => {
                return Err(LabError::Wrong(named(
                    format!(
                        "staleness_lr(lr {LR}, current {current}, read {read}) {e}: τ went \
                         below zero where nobody pushed in between (τ = 0). Off by one: τ is \
                         current − read"
                    ),
                    "tau-off-by-one",
                )));
            }
            // An unsolved TODO, or an error the contract does not allow.
            Err(e) => return Err(LabError::Wrong(e)),
        };
        if let Some(why) = judge(current, read, got) {
            return Err(LabError::Wrong(why));
        }
    }
    if let Ok(got) = call(f, LR, 3, 5) {
        return Err(LabError::Wrong(format!(
            "staleness_lr(lr {LR}, current 3, read 5) returned {got}: a worker cannot have \
             read version 5 of a server at version 3; return an error"
        )));
    }

    // The server: 3 workers, the last 3× slower, 30 steps each.
    let data = data::synthetic(3 * 16 * 30, 11).map_err(lab_error)?;
    let mut j = job(Consistency::AsyncPs, Arc::new(Bounded));
    j.staleness_lr = Some(f);
    let base = j.lr / j.workers as f64;
    let trained = catch_unwind(AssertUnwindSafe(|| train(&j, &data)))
        .map_err(|p| {
            LabError::Wrong(format!(
                "the server, calling your rate, panicked: {}",
                panic_message(p.as_ref())
            ))
        })?
        .map_err(lab_error)?;
    let pushes = &trained.pushes;
    if pushes.len() != 90 {
        return Err(LabError::Wrong(format!(
            "{} pushes logged for 3 workers of 30 steps",
            pushes.len()
        )));
    }
    for p in pushes {
        let tau = p.current - p.read;
        if !close(p.lr, want(base, tau)) {
            return Err(LabError::Wrong(format!(
                "the server applied worker {}'s push (read version {}, applied at {}: τ = \
                 {tau}) with lr {}, where the rule gives {}",
                p.worker,
                p.read,
                p.current,
                p.lr,
                want(base, tau)
            )));
        }
    }
    let taus: Vec<u64> = pushes.iter().map(|p| p.current - p.read).collect();
    let stale = taus.iter().filter(|&&t| t >= 2).count();
    Ok(format!(
        "your rate is right for τ = 0 to 8 and refuses a version from the future; the \
         asynchronous server applied it to 90 pushes of 3 workers beside a 3× straggler (τ up \
         to {}, {stale} pushes with τ ≥ 2 at a reduced rate), each at the rate its versions \
         call for",
        taus.iter().max().copied().unwrap_or(0)
    ))
}
