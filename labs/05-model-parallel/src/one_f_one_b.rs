//! The check of lab 5's stretch goal, the 1F1B schedule (`cargo lab check 5
//! --stretch`). The criteria are the schedule's promises: complete lists that
//! fit together ([`plan`]), GPipe's bubble on equal stages ([`check::bubble`]),
//! at most `S − s` micro-batches held on stage `s` ([`peak_in_flight`]), and
//! training equal to the unsplit model ([`check::equivalence`]). When one
//! fails, `diagnose` reads the lists for the mistake behind it: the number of
//! forwards each stage runs before its first backward (its warm-up, plus the
//! first forward of the steady state) tells a deadlock, no warm-up, a warm-up
//! of the wrong length and GPipe's order apart.

#[cfg(test)]
mod tests;

use labkit::{LabError, named};
use tch::Device;
use trainers::pipeline::{
    Action, GPipe, OneFOneB, Schedule, check, peak_in_flight, plan, theoretical_bubble,
};

use crate::diagnose::{show, structure};
use crate::{ActionsFn, mlp, wrong};

/// The pipelines the check replays: (stages, micro-batches), with fewer, as
/// many and more micro-batches than stages.
const SHAPES: [(usize, usize); 8] = [
    (2, 4),
    (3, 3),
    (4, 2),
    (2, 1),
    (1, 3),
    (3, 8),
    (4, 5),
    (4, 8),
];

/// Trainers' own 1F1B as an [`ActionsFn`]: the stretch goal's solution.
pub fn trainers_1f1b(
    stage: usize,
    stages: usize,
    micro_batches: usize,
) -> Result<Vec<Action>, LabError> {
    OneFOneB
        .actions(stage, stages, micro_batches)
        .map_err(wrong)
}

/// A learner's 1F1B in the pipeline's slot.
struct Yours(ActionsFn);

impl Schedule for Yours {
    fn name(&self) -> &str {
        "1F1B (yours)"
    }

    fn actions(
        &self,
        stage: usize,
        stages: usize,
        micro_batches: usize,
    ) -> trainers::Result<Vec<Action>> {
        (self.0)(stage, stages, micro_batches).map_err(|e| trainers::Error::Pipeline(e.to_string()))
    }
}

/// How many forwards `list` runs before its first backward.
fn forwards_first(list: &[Action]) -> usize {
    list.iter()
        .take_while(|a| matches!(a, Action::Forward(_)))
        .count()
}

/// What 1F1B's stage `stage` of `stages` runs before its first backward: its
/// warm-up and the steady state's first forward, `S − s`, or every forward
/// when there are fewer micro-batches.
fn want_first(stage: usize, stages: usize, m: usize) -> usize {
    (stages - stage).min(m)
}

/// Names the mistake in `lists` (every stage's list of one pipeline of `m`
/// micro-batches, each complete) that made a criterion fail, or nothing.
fn diagnose(lists: &[Vec<Action>], m: usize) -> Option<String> {
    let stages = lists.len();
    let first: Vec<usize> = lists.iter().map(|l| forwards_first(l)).collect();
    let want: Vec<usize> = (0..stages).map(|s| want_first(s, stages, m)).collect();
    let on = format!("on {stages} stages with {m} micro-batches");
    let lines = || {
        lists
            .iter()
            .enumerate()
            .map(|(s, l)| format!("\n  stage {s}: {}", show(l)))
            .collect::<String>()
    };
    if let Some(s) = (0..stages.saturating_sub(1)).find(|&s| first[s] < first[s + 1]) {
        return Some(named(
            format!(
                "{on}, stage {s} runs {} forward(s) before its first backward, but stage {} \
                 needs {} activations from it before its own first backward: stage {s} \
                 waits for a gradient that stage {} sends only after those activations. \
                 Your lists:{}",
                first[s],
                s + 1,
                first[s + 1],
                s + 1,
                lines()
            ),
            "warm-up-deadlock",
        ));
    }
    if first == want {
        return None;
    }
    if first.iter().all(|&f| f == m) {
        return Some(named(
            format!(
                "{on}, every stage runs all {m} forwards before its first backward: that \
                 is GPipe's order. It idles as little, but stage 0 holds all {m} \
                 micro-batches' activations where 1F1B holds {}. Your lists:{}",
                want[0],
                lines()
            ),
            "that-is-gpipe",
        ));
    }
    if first.iter().all(|&f| f == 1) {
        return Some(named(
            format!(
                "{on}, every stage runs a backward right after its first forward: no \
                 warm-up. Stage 0 then waits for micro-batch 0's gradient to come back \
                 through every stage before it starts micro-batch 1: that is the naive \
                 schedule, idle (S − 1)/S of the time. Your lists:{}",
                lines()
            ),
            "no-warm-up",
        ));
    }
    let s = (0..stages).find(|&s| first[s] != want[s])?;
    let effect = if first[s] > want[s] {
        format!(
            "it holds {} micro-batches' activations where {} would do",
            first[s], want[s]
        )
    } else {
        format!(
            "it then waits for a gradient while it could still be sending forwards, \
             and the stages after it idle ({} would keep them busy)",
            want[s]
        )
    };
    Some(named(
        format!(
            "{on}, stage {s} runs {} forward(s) before its first backward: {effect}. Your \
             lists:{}",
            first[s],
            lines()
        ),
        "warm-up-length",
    ))
}

/// The stretch goal's check: on `SHAPES`, `f`'s lists are complete and fit
/// together, idle as GPipe on equal stages, and hold at most `S − s`
/// micro-batches on stage `s`; then ringside's pipeline trains the MLP with
/// them like the unsplit model. Returns what passed, with the peaks beside
/// GPipe's.
pub fn check(f: ActionsFn) -> Result<String, LabError> {
    // The learner's unsolved TODO comes back as itself, not wrapped.
    f(0, 2, 1)?;
    let yours = Yours(f);
    for (stages, m) in SHAPES {
        let mut lists = Vec::with_capacity(stages);
        for stage in 0..stages {
            let list = f(stage, stages, m)?;
            let on = format!("1F1B, stage {stage} of {stages}, {m} micro-batches");
            if let Some(why) = structure(&list, m, &on) {
                return Err(LabError::Wrong(why.trim_start().to_owned()));
            }
            lists.push(list);
        }
        let named = || diagnose(&lists, m).map_or_else(String::new, |n| format!("\n{n}"));
        plan(&yours, stages, m).map_err(|e| LabError::Wrong(format!("{e}{}", named())))?;
        check::bubble(
            &yours,
            stages,
            m,
            theoretical_bubble(stages, m),
            "GPipe's (S-1)/(M+S-1)",
        )
        .map_err(|e| LabError::Wrong(format!("{e}{}", named())))?;
        for (s, list) in lists.iter().enumerate() {
            let peak = peak_in_flight(list);
            if peak > stages - s {
                return Err(LabError::Wrong(format!(
                    "on {stages} stages with {m} micro-batches, stage {s} holds {peak} \
                     micro-batches' activations at its peak; 1F1B holds at most S − s = {} \
                     there.{}",
                    stages - s,
                    named()
                )));
            }
        }
    }
    // Training: the MLP of trainers' own pipeline tests, on CPU stages.
    for m in [1, 2, 5, 12] {
        check::equivalence(&yours, mlp, &["fc2"], &[Device::Cpu; 2], m, 12).map_err(wrong)?;
    }
    for m in [2, 4, 7] {
        check::equivalence(&yours, mlp, &["fc2", "fc3"], &[Device::Cpu; 3], m, 10)
            .map_err(wrong)?;
    }
    Ok(format!(
        "complete, no deadlock, GPipe's bubble and the unsplit model's training on \
         {} pipelines; peak micro-batches held per stage on 4 stages with 8 \
         micro-batches: yours {:?}, GPipe's {:?}",
        SHAPES.len(),
        peaks(f, 4, 8)?,
        (0..4)
            .map(|s| GPipe.actions(s, 4, 8).map(|l| peak_in_flight(&l)))
            .collect::<trainers::Result<Vec<_>>>()
            .map_err(wrong)?,
    ))
}

/// Each stage's [`peak_in_flight`] under `f`.
fn peaks(f: ActionsFn, stages: usize, m: usize) -> Result<Vec<usize>, LabError> {
    (0..stages)
        .map(|s| f(s, stages, m).map(|l| peak_in_flight(&l)))
        .collect()
}
