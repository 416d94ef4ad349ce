//! Names the common mistakes of a schedule by reading its lists of actions on a
//! few pipelines: a micro-batch missing or run twice, a backward before its
//! forward, and each schedule run in the other's order. The replay in
//! `check_on_paper` says *that* a stage idles too much or too little; this says
//! *why*.

use trainers::pipeline::Action;

use crate::{ActionsFn, Kind};

/// The pipelines read: (stages, micro-batches). Small enough to print, with
/// more micro-batches than stages so that an order mistake shows.
const SHAPES: [(usize, usize); 3] = [(2, 4), (3, 3), (2, 2)];

/// A list as the learner would write it: `F0 B0 F1 B1`.
pub fn show(list: &[Action]) -> String {
    let one = |a: &Action| match a {
        Action::Forward(m) => format!("F{m}"),
        Action::Backward(m) => format!("B{m}"),
    };
    list.iter().map(one).collect::<Vec<_>>().join(" ")
}

/// An explanation and its `hint: <key>` line.
fn named(what: String, key: &str) -> Option<String> {
    Some(format!("\n{what}\nhint: {key}"))
}

/// What is wrong with one stage's `list` for `m` micro-batches, whatever the
/// schedule: every micro-batch's forward and backward exactly once, forward first.
pub(crate) fn structure(list: &[Action], m: usize, on: &str) -> Option<String> {
    let at = |a: Action| list.iter().position(|&b| b == a);
    let count = |a: Action| list.iter().filter(|&&b| b == a).count();
    if let Some(a) = list
        .iter()
        .find(|a| matches!(a, Action::Forward(k) | Action::Backward(k) if *k >= m))
    {
        return named(
            format!(
                "{on}: your list [{}] runs {a}, but the micro-batches are 0 to {}: an index \
                 off by one.",
                show(list),
                m - 1
            ),
            "micro-batch-missing",
        );
    }
    for k in 0..m {
        for a in [Action::Forward(k), Action::Backward(k)] {
            match count(a) {
                0 => {
                    return named(
                        format!(
                            "{on}: your list [{}] has no {a}: micro-batch {k}'s gradient \
                             would never reach the parameters (or its activation never \
                             reach the next stage).",
                            show(list)
                        ),
                        "micro-batch-missing",
                    );
                }
                1 => {}
                n => {
                    return named(
                        format!(
                            "{on}: your list [{}] runs {a} {n} times: its gradient would be \
                             counted {n} times.",
                            show(list)
                        ),
                        "action-twice",
                    );
                }
            }
        }
        if at(Action::Backward(k)) < at(Action::Forward(k)) {
            return named(
                format!(
                    "{on}: your list [{}] runs backward {k} before forward {k}: a backward \
                     needs the activations its forward saved.",
                    show(list)
                ),
                "backward-before-forward",
            );
        }
    }
    None
}

/// What is wrong with the order of `kind`'s well-formed `list`: the naive
/// schedule must finish a micro-batch before it starts the next; GPipe must run
/// every forward before any backward.
fn order(kind: Kind, list: &[Action], m: usize, on: &str) -> Option<String> {
    let first_backward = list.iter().position(|a| matches!(a, Action::Backward(_)))?;
    let forwards_before = list[..first_backward]
        .iter()
        .filter(|a| matches!(a, Action::Forward(_)))
        .count();
    match kind {
        Kind::Naive if forwards_before > 1 => named(
            format!(
                "{on}: your naive list [{}] starts forward 1 before backward 0 has run: \
                 that overlaps micro-batches, which is GPipe's idea, not the naive \
                 schedule's (one micro-batch all the way forward and back, then the next).",
                show(list)
            ),
            "naive-overlaps",
        ),
        Kind::GPipe if forwards_before < m => named(
            format!(
                "{on}: your GPipe list [{}] runs a backward after only {forwards_before} of \
                 {m} forwards: while this stage waits for that gradient, it could have been \
                 running the next micro-batch's forward.",
                show(list)
            ),
            "gpipe-one-at-a-time",
        ),
        _ => None,
    }
}

/// Names the first mistake found in the lists of `actions` (a schedule of
/// `kind`) on `SHAPES`; `None` when every list is right or cannot be had (an
/// unsolved exercise: its own error says so).
pub fn diagnose(kind: Kind, actions: ActionsFn) -> Option<String> {
    for (stages, m) in SHAPES {
        for stage in 0..stages {
            let list = actions(stage, stages, m).ok()?;
            let on = format!(
                "{} schedule, stage {stage} of {stages}, {m} micro-batches",
                kind.name()
            );
            if let Some(named) = structure(&list, m, &on).or_else(|| order(kind, &list, m, &on)) {
                return Some(named);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests;
