//! The schedule of a pipeline: which micro-batch's forward or backward pass each stage
//! runs, in which order. It is the one piece of [`Pipeline`](super::Pipeline) that can be
//! swapped ([`Pipeline::step_with`](super::Pipeline::step_with)): the stages, the
//! messages between them, the gradient accumulation and the optimizer step stay the same
//! whatever the order, and so does the result (the gradients of the whole batch).
//! Only the time changes, and that is the lesson: [`Naive`] keeps one stage busy at a
//! time, [`GPipe`] lets them overlap.
//!
//! Before any stage starts, [`plan`] checks a schedule: every stage runs each
//! micro-batch's forward once and its backward once, after its forward, and the stages'
//! orders fit together. A stage blocks only when it waits for a neighbour (sends never
//! block), so replaying the orders with made-up durations ([`simulate`]) finds a
//! deadlock before it happens, and names who waits for whom, instead of every thread
//! waiting for its timeout.

use std::fmt;
use std::time::Duration;

use super::{Phase, Span, StepReport};
use crate::{Error, Result};

/// One thing a stage does in a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// The forward pass of micro-batch `m` (from 0): take its input (the batch's piece on
    /// the first stage, the previous stage's activation on the others), run the stage's
    /// layers, send the activation on (or, on the last stage, compute the loss).
    Forward(usize),
    /// The backward pass of micro-batch `m`: take the gradient of the stage's output (the
    /// loss on the last stage, else the next stage's gradient), backpropagate through the
    /// stage's layers (gradients add up in its parameters) and send the gradient of the
    /// stage's input back to the previous stage.
    Backward(usize),
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Forward(m) => write!(f, "forward {m}"),
            Action::Backward(m) => write!(f, "backward {m}"),
        }
    }
}

/// A pipeline schedule: for each stage, the order of its forward and backward passes
/// over the micro-batches of one step.
///
/// Every stage's list must hold `Forward(m)` and `Backward(m)` once for each micro-batch
/// `m < micro_batches`, the forward first; [`plan`] checks that and that the stages'
/// lists do not deadlock. The optimizer step comes after the list, once per step.
pub trait Schedule: Sync {
    /// The schedule's name, for reports and errors (`"GPipe"`).
    fn name(&self) -> &str;

    /// Stage `stage`'s actions (stages count from 0; there are `stages` of them) for one
    /// step of `micro_batches` micro-batches, in the order the stage runs them.
    fn actions(&self, stage: usize, stages: usize, micro_batches: usize) -> Result<Vec<Action>>;
}

/// Naive model parallelism: each micro-batch goes all the way forward and all the way
/// back before the next one starts, so at any moment exactly one stage works.
///
/// With one micro-batch this is the classic split ("part of the model on the CPU, part
/// on the GPU"): each stage is idle `(S-1)/S` of the time. More micro-batches
/// accumulate gradients, which saves activation memory but not time: the idle share
/// stays `(S-1)/S`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Naive;

// ANCHOR: naive
impl Schedule for Naive {
    fn name(&self) -> &str {
        "naive"
    }

    fn actions(&self, _stage: usize, _stages: usize, micro_batches: usize) -> Result<Vec<Action>> {
        // Every stage runs the same order: micro-batch m's forward, then its backward,
        // which on every stage but the last waits for the next stage's gradient, so the
        // forward of m + 1 cannot start anywhere until m is back at stage 0.
        Ok((0..micro_batches)
            .flat_map(|m| [Action::Forward(m), Action::Backward(m)])
            .collect())
    }
}
// ANCHOR_END: naive

/// GPipe (Huang et al., 2019): every stage runs the forward passes of all micro-batches
/// in order, then their backward passes in reverse order.
///
/// While stage `s` runs micro-batch `m`'s forward, stage `s + 1` runs `m − 1`'s, so the
/// stages overlap except while the pipeline fills and drains: each stage is idle
/// `(S-1)/(M+S-1)` of the time for equal stages ([`theoretical_bubble`]). The price
/// is memory: every stage keeps the activations of all `M` micro-batches until their
/// backward passes.
///
/// [`theoretical_bubble`]: super::theoretical_bubble
#[derive(Debug, Clone, Copy, Default)]
pub struct GPipe;

// ANCHOR: gpipe
impl Schedule for GPipe {
    fn name(&self) -> &str {
        "GPipe"
    }

    fn actions(&self, _stage: usize, _stages: usize, micro_batches: usize) -> Result<Vec<Action>> {
        // All forwards first: each activation is sent on as soon as it is computed, so
        // the next stage starts micro-batch 0 while this one runs micro-batch 1. Then all
        // backwards, last micro-batch first: the last stage's last forward is the first
        // loss ready, and its gradient flows back while the others wait their turn.
        let forwards = (0..micro_batches).map(Action::Forward);
        let backwards = (0..micro_batches).rev().map(Action::Backward);
        Ok(forwards.chain(backwards).collect())
    }
}
// ANCHOR_END: gpipe

/// 1F1B, "one forward, one backward" (PipeDream-flush, Narayanan et al., 2021; the
/// non-interleaved schedule of Megatron-LM): each stage runs a few forwards to fill
/// the pipeline (the *warm-up*), then alternates one forward with one backward (the
/// *steady state*), then runs the backwards left over (the *cool-down*).
///
/// The warm-up is as long as the pipeline behind the stage is deep: stage `s` runs
/// `S − s − 1` forwards before its first "one forward, one backward" pair, so that
/// its first backward's gradient is on its way back by the time it asks for it. The
/// bubble is GPipe's, `(S-1)/(M+S-1)` for equal stages: the same fill and drain, only
/// reordered. What changes is memory: a stage holds a micro-batch's activations from
/// its forward until its backward, and here at most `S − s` micro-batches are in
/// flight on stage `s` ([`peak_in_flight`]), against GPipe's `M`.
#[derive(Debug, Clone, Copy, Default)]
pub struct OneFOneB;

// ANCHOR: one_f_one_b
impl Schedule for OneFOneB {
    fn name(&self) -> &str {
        "1F1B"
    }

    fn actions(&self, stage: usize, stages: usize, micro_batches: usize) -> Result<Vec<Action>> {
        // The warm-up: as many forwards as there are stages after this one, so that
        // when this stage first waits for a gradient, the micro-batch it sent first has
        // reached the last stage and is on its way back. Fewer when there are fewer
        // micro-batches than that.
        let warm_up = stages.saturating_sub(stage + 1).min(micro_batches);
        let forwards = (0..warm_up).map(Action::Forward);
        // The steady state: each new forward is followed by the backward of the oldest
        // micro-batch still held, so the number held stays at warm_up + 1.
        let steady = (warm_up..micro_batches)
            .flat_map(|m| [Action::Forward(m), Action::Backward(m - warm_up)]);
        // The cool-down: the backwards of the micro-batches still held, oldest first.
        let cool_down = (micro_batches - warm_up..micro_batches).map(Action::Backward);
        Ok(forwards.chain(steady).chain(cool_down).collect())
    }
}
// ANCHOR_END: one_f_one_b

/// The most micro-batches whose activations a stage running `actions` holds at once:
/// a forward saves its micro-batch's activations for the backward, which frees them.
/// `M` for GPipe, 1 for the naive schedule, at most `S − s` on stage `s` for 1F1B.
/// (Counts micro-batches, not bytes: every micro-batch of one stage saves the same
/// tensors, give or take a smaller last one.)
pub fn peak_in_flight(actions: &[Action]) -> usize {
    let mut held: usize = 0;
    let mut peak = 0;
    for a in actions {
        match a {
            Action::Forward(_) => {
                held += 1;
                peak = peak.max(held);
            }
            // saturating: a list with a backward before its forward is for `plan` to
            // reject, not for this count to underflow on.
            Action::Backward(_) => held = held.saturating_sub(1),
        }
    }
    peak
}

/// Every stage's actions of `schedule` for one step of `micro_batches` micro-batches
/// on `stages` stages, checked: each list holds each micro-batch's forward and backward
/// once, the forward first, and the lists run to the end together (no stage waits for
/// an activation or gradient that its neighbour never sends, or sends only after
/// waiting for this stage).
pub fn plan(
    schedule: &dyn Schedule,
    stages: usize,
    micro_batches: usize,
) -> Result<Vec<Vec<Action>>> {
    if stages == 0 || micro_batches == 0 {
        return Err(Error::InvalidArgument(format!(
            "a schedule needs at least one stage and one micro-batch: {stages} stages, \
             {micro_batches} micro-batches"
        )));
    }
    let name = schedule.name();
    let lists = (0..stages)
        .map(|s| {
            let actions = schedule.actions(s, stages, micro_batches)?;
            complete(name, s, micro_batches, &actions)?;
            Ok(actions)
        })
        .collect::<Result<Vec<_>>>()?;
    replay(
        name,
        &lists,
        micro_batches,
        Duration::from_nanos(1),
        Duration::from_nanos(2),
    )?;
    Ok(lists)
}

/// One step of `schedule` replayed on paper: every forward pass takes `forward`, every
/// backward `backward`, messages are instant, and each action starts as soon as its
/// stage is free and its input has arrived. The report's bubble is the schedule's
/// bubble for equal stages; its [`timeline`](StepReport::timeline) draws the schedule.
pub fn simulate(
    schedule: &dyn Schedule,
    stages: usize,
    micro_batches: usize,
    forward: Duration,
    backward: Duration,
) -> Result<StepReport> {
    let lists = plan(schedule, stages, micro_batches)?;
    replay(schedule.name(), &lists, micro_batches, forward, backward)
}

/// What each piece of a step costs, measured, for [`simulate_timed`]: unequal stages,
/// a time per action, and the costs between the passes that [`simulate`] leaves out.
pub struct Timing<'a> {
    /// How long stage `s` computes `action` (a forward or backward pass).
    pub pass: &'a dyn Fn(usize, Action) -> Duration,
    /// From the end of a pass to the start of the neighbour's pass that waits for its
    /// output: the message, the receiving thread's wake-up and the copy to its device.
    pub handover: Duration,
    /// Between two passes of one stage whose input is already there (taking it from
    /// the inbox, sending the previous output on).
    pub between: Duration,
    /// From the start of the step to each stage's first pass (the stage threads start).
    pub start: Duration,
}

/// One step of `schedule` replayed with measured costs: each action starts when its
/// stage is free (plus [`Timing::between`]) and its input has arrived (plus
/// [`Timing::handover`] when a neighbour sent it), and lasts [`Timing::pass`]. The
/// schedule's own dependency structure decides the wall time, so unequal stages and
/// per-micro-batch costs give the bubble they really give, not `(S-1)/(M+S-1)`.
pub fn simulate_timed(
    schedule: &dyn Schedule,
    stages: usize,
    micro_batches: usize,
    timing: &Timing<'_>,
) -> Result<StepReport> {
    let lists = plan(schedule, stages, micro_batches)?;
    replay_timed(schedule.name(), &lists, micro_batches, timing)
}

/// Checks that `actions` holds `Forward(m)` and `Backward(m)` exactly once for each
/// `m < micro_batches`, each backward after its forward.
fn complete(name: &str, stage: usize, micro_batches: usize, actions: &[Action]) -> Result<()> {
    let bad = |what: String| {
        Err(Error::Pipeline(format!(
            "schedule {name}, stage {stage} ({}): {what}",
            describe(actions)
        )))
    };
    let mut forward_at = vec![None; micro_batches];
    let mut backward_at = vec![None; micro_batches];
    for (i, &a) in actions.iter().enumerate() {
        let (Action::Forward(m) | Action::Backward(m)) = a;
        if m >= micro_batches {
            return bad(format!(
                "{a} is out of range: there are {micro_batches} micro-batches, 0 to {}",
                micro_batches - 1
            ));
        }
        let slot = match a {
            Action::Forward(_) => &mut forward_at[m],
            Action::Backward(_) => &mut backward_at[m],
        };
        if slot.is_some() {
            return bad(format!("{a} comes twice"));
        }
        *slot = Some(i);
    }
    for m in 0..micro_batches {
        match (forward_at[m], backward_at[m]) {
            (None, _) => return bad(format!("forward {m} is missing")),
            (_, None) => return bad(format!("backward {m} is missing")),
            (Some(f), Some(b)) if b < f => {
                return bad(format!(
                    "backward {m} comes before forward {m} (it needs the forward's saved \
                     activations)"
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Runs complete action lists against each other: an action starts when its stage is
/// free and its input is there (a forward needs the previous stage's forward of the same
/// micro-batch, a backward the next stage's backward; the last stage's backward needs
/// only its own forward, which [`complete`] put earlier). Stops with an error naming
/// every stage's wait when no stage can go on.
fn replay(
    name: &str,
    lists: &[Vec<Action>],
    micro_batches: usize,
    forward: Duration,
    backward: Duration,
) -> Result<StepReport> {
    let pass = |_: usize, a: Action| match a {
        Action::Forward(_) => forward,
        Action::Backward(_) => backward,
    };
    let timing = Timing {
        pass: &pass,
        handover: Duration::ZERO,
        between: Duration::ZERO,
        start: Duration::ZERO,
    };
    replay_timed(name, lists, micro_batches, &timing)
}

/// [`replay`] with every cost of [`Timing`].
fn replay_timed(
    name: &str,
    lists: &[Vec<Action>],
    micro_batches: usize,
    timing: &Timing<'_>,
) -> Result<StepReport> {
    let stages = lists.len();
    let mut next = vec![0; stages];
    let mut free = vec![timing.start; stages];
    // When stage s finished micro-batch m's forward / backward.
    let mut forward_end = vec![vec![None; micro_batches]; stages];
    let mut backward_end = vec![vec![None; micro_batches]; stages];
    let mut spans = Vec::with_capacity(stages * 2 * micro_batches);
    while next.iter().zip(lists).any(|(&n, l)| n < l.len()) {
        let mut moved = false;
        for s in 0..stages {
            while let Some(&action) = lists[s].get(next[s]) {
                // When the input is there; a neighbour's output also crosses over.
                let (ready, m, phase) = match action {
                    Action::Forward(m) if s == 0 => (Some(Duration::ZERO), m, Phase::Forward),
                    Action::Forward(m) => (
                        forward_end[s - 1][m].map(|t| t + timing.handover),
                        m,
                        Phase::Forward,
                    ),
                    Action::Backward(m) if s + 1 == stages => {
                        (forward_end[s][m], m, Phase::Backward)
                    }
                    Action::Backward(m) => (
                        backward_end[s + 1][m].map(|t| t + timing.handover),
                        m,
                        Phase::Backward,
                    ),
                };
                let Some(ready) = ready else { break };
                let free_at = if next[s] == 0 {
                    free[s]
                } else {
                    free[s] + timing.between
                };
                let start = free_at.max(ready);
                let end = start + (timing.pass)(s, action);
                match phase {
                    Phase::Forward => forward_end[s][m] = Some(end),
                    _ => backward_end[s][m] = Some(end),
                }
                spans.push(Span {
                    stage: s,
                    micro_batch: m,
                    phase,
                    start,
                    end,
                });
                free[s] = end;
                next[s] += 1;
                moved = true;
            }
        }
        if !moved {
            let waits: Vec<String> = (0..stages)
                .filter_map(|s| {
                    let action = lists[s].get(next[s])?;
                    Some(match *action {
                        Action::Forward(m) => format!(
                            "stage {s} waits for micro-batch {m}'s activation from stage {}",
                            s - 1
                        ),
                        Action::Backward(m) => format!(
                            "stage {s} waits for micro-batch {m}'s gradient from stage {}",
                            s + 1
                        ),
                    })
                })
                .collect();
            return Err(Error::Pipeline(format!(
                "schedule {name} deadlocks on {stages} stages with {micro_batches} \
                 micro-batches: {}",
                waits.join("; ")
            )));
        }
    }
    spans.sort_by_key(|s| (s.stage, s.start));
    Ok(StepReport {
        loss: 0.0,
        stages,
        micro_batches,
        wall: free.iter().copied().max().unwrap_or_default(),
        spans,
    })
}

/// `F0 F1 B1 B0`: a list of actions in short, for error messages.
fn describe(actions: &[Action]) -> String {
    let short: Vec<String> = actions
        .iter()
        .map(|a| match a {
            Action::Forward(m) => format!("F{m}"),
            Action::Backward(m) => format!("B{m}"),
        })
        .collect();
    if short.is_empty() {
        "no actions".to_owned()
    } else {
        short.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::theoretical_bubble;

    /// A schedule from a fixed list per stage, to test what [`plan`] rejects.
    struct Fixed(Vec<Vec<Action>>);

    impl Schedule for Fixed {
        fn name(&self) -> &str {
            "fixed"
        }
        fn actions(&self, stage: usize, _: usize, _: usize) -> Result<Vec<Action>> {
            Ok(self.0[stage].clone())
        }
    }

    use Action::{Backward as B, Forward as F};

    #[test]
    fn gpipe_and_naive_orders() {
        assert_eq!(
            GPipe.actions(1, 2, 3).unwrap(),
            [F(0), F(1), F(2), B(2), B(1), B(0)]
        );
        assert_eq!(Naive.actions(0, 2, 2).unwrap(), [F(0), B(0), F(1), B(1)]);
        assert_eq!(plan(&GPipe, 3, 4).unwrap().len(), 3);
    }

    /// The idle share of equal stages, replayed: `(S-1)/(M+S-1)` for GPipe, `(S-1)/S`
    /// for the naive schedule whatever `M`, with forward and backward of any lengths.
    #[test]
    fn simulated_bubbles_match_the_formulas() {
        let (f, b) = (Duration::from_millis(3), Duration::from_millis(5));
        for s in 1..=4 {
            for m in [1, 2, 3, 8] {
                let g = simulate(&GPipe, s, m, f, b).unwrap();
                assert!(
                    (g.bubble() - theoretical_bubble(s, m)).abs() < 1e-9,
                    "S={s} M={m}"
                );
                let n = simulate(&Naive, s, m, f, b).unwrap();
                let want = (s - 1) as f64 / s as f64;
                assert!((n.bubble() - want).abs() < 1e-9, "S={s} M={m}");
                assert_eq!(n.wall, (f + b) * (s * m) as u32);
            }
        }
        // F = 3 ms, B = 5 ms, one column per ms: stage 1 starts when micro-batch 0's
        // activation arrives, stage 0 idles until micro-batch 1's gradient comes back.
        let chart = simulate(&GPipe, 2, 2, f, b).unwrap().timeline(24);
        assert_eq!(
            chart,
            "stage 0 |000111........bbbbbaaaaa|\nstage 1 |...000111bbbbbaaaaa.....|\n"
        );
    }

    /// Measured costs replayed by hand: stage 0 forward 1 ms, backward 2; stage 1
    /// forward 3, backward 4; 1 ms per hand-over. GPipe at M = 2: stage 1 runs F0
    /// 2–5, F1 5–8, B1 8–12, B0 12–16; stage 0 runs B1 13–15 and B0 17–19. A gap of
    /// 1 ms between a stage's passes makes it 22; a start 1 ms late shifts all by 1.
    #[test]
    fn timed_replay_follows_the_dependencies_of_unequal_stages() {
        let ms = Duration::from_millis;
        let pass = |s: usize, a: Action| match (s, a) {
            (0, Action::Forward(_)) => ms(1),
            (0, Action::Backward(_)) => ms(2),
            (_, Action::Forward(_)) => ms(3),
            (_, Action::Backward(_)) => ms(4),
        };
        let timing = |between, start| Timing {
            pass: &pass,
            handover: ms(1),
            between: ms(between),
            start: ms(start),
        };
        let r = simulate_timed(&GPipe, 2, 2, &timing(0, 0)).unwrap();
        assert_eq!(r.wall, ms(19));
        let at = |r: &StepReport, stage, m, phase| {
            let s = r
                .spans
                .iter()
                .find(|s| (s.stage, s.micro_batch, s.phase) == (stage, m, phase))
                .unwrap();
            (s.start, s.end)
        };
        assert_eq!(at(&r, 1, 1, Phase::Forward), (ms(5), ms(8)));
        assert_eq!(at(&r, 0, 1, Phase::Backward), (ms(13), ms(15)));
        assert_eq!(at(&r, 0, 0, Phase::Backward), (ms(17), ms(19)));
        // Busy 2·(1+2) + 2·(3+4) = 20 ms of 2 · 19.
        assert!((r.bubble() - (1.0 - 20.0 / 38.0)).abs() < 1e-9);
        assert_eq!(
            simulate_timed(&GPipe, 2, 2, &timing(1, 0)).unwrap().wall,
            ms(22)
        );
        assert_eq!(
            simulate_timed(&GPipe, 2, 2, &timing(0, 1)).unwrap().wall,
            ms(20)
        );
    }

    #[test]
    fn one_f_one_b_orders() {
        // 3 stages, 4 micro-batches: stage 0 warms up with 2 forwards, stage 2 none.
        assert_eq!(
            OneFOneB.actions(0, 3, 4).unwrap(),
            [F(0), F(1), F(2), B(0), F(3), B(1), B(2), B(3)]
        );
        assert_eq!(
            OneFOneB.actions(1, 3, 4).unwrap(),
            [F(0), F(1), B(0), F(2), B(1), F(3), B(2), B(3)]
        );
        assert_eq!(
            OneFOneB.actions(2, 3, 4).unwrap(),
            [F(0), B(0), F(1), B(1), F(2), B(2), F(3), B(3)]
        );
        // Fewer micro-batches than the warm-up wants: all forwards, then all backwards.
        assert_eq!(OneFOneB.actions(0, 4, 2).unwrap(), [F(0), F(1), B(0), B(1)]);
    }

    /// Every stage runs every micro-batch's forward and backward once, each backward
    /// after its forward, and the stages fit together (`plan` checks all three), on
    /// every shape up to 6 stages and 9 micro-batches.
    #[test]
    fn one_f_one_b_is_complete_and_never_deadlocks() {
        for s in 1..=6 {
            for m in 1..=9 {
                let lists = plan(&OneFOneB, s, m).unwrap();
                for list in &lists {
                    assert_eq!(list.len(), 2 * m, "S={s} M={m}");
                }
            }
        }
    }

    /// 1F1B idles exactly as GPipe does on equal stages, forward and backward of any
    /// lengths: the same fill and drain, reordered.
    #[test]
    fn one_f_one_b_has_gpipes_bubble() {
        for (f, b) in [(1, 2), (3, 5), (2, 2)] {
            let (f, b) = (Duration::from_millis(f), Duration::from_millis(b));
            for s in 1..=5 {
                for m in [1, 2, 3, 4, 8, 13] {
                    let r = simulate(&OneFOneB, s, m, f, b).unwrap();
                    let g = simulate(&GPipe, s, m, f, b).unwrap();
                    assert!(
                        (r.bubble() - theoretical_bubble(s, m)).abs() < 1e-9,
                        "S={s} M={m}: {}",
                        r.bubble()
                    );
                    assert_eq!(r.wall, g.wall, "S={s} M={m}");
                }
            }
        }
    }

    /// The point of 1F1B: stage s holds at most S − s micro-batches' activations
    /// (exactly min(S − s, M)), where GPipe holds all M on every stage.
    #[test]
    fn one_f_one_b_holds_at_most_s_minus_s_micro_batches() {
        for s in 1..=6 {
            for m in 1..=9 {
                for stage in 0..s {
                    let ours = peak_in_flight(&OneFOneB.actions(stage, s, m).unwrap());
                    assert_eq!(ours, (s - stage).min(m), "S={s} M={m} stage {stage}");
                    assert_eq!(peak_in_flight(&GPipe.actions(stage, s, m).unwrap()), m);
                    assert_eq!(peak_in_flight(&Naive.actions(stage, s, m).unwrap()), 1);
                }
            }
        }
        assert_eq!(peak_in_flight(&[]), 0);
        assert_eq!(peak_in_flight(&[B(0), F(0)]), 1);
    }

    #[test]
    fn incomplete_schedules_are_named() {
        let cases = [
            (vec![vec![F(0)]], "backward 0 is missing"),
            (vec![vec![B(0), F(0)]], "backward 0 comes before forward 0"),
            (vec![vec![F(0), F(0), B(0)]], "forward 0 comes twice"),
            (
                vec![vec![F(0), B(0), F(1), B(1)]],
                "forward 1 is out of range",
            ),
            (vec![vec![]], "forward 0 is missing"),
        ];
        for (lists, want) in cases {
            let e = plan(&Fixed(lists), 1, 1).unwrap_err().to_string();
            assert!(e.contains(want) && e.contains("stage 0"), "{e}");
        }
    }

    /// Stages may run different orders (stage 0 GPipe's, stage 1 the naive one) as long
    /// as they fit together. Here they do not: stage 0 waits for micro-batch 0's
    /// gradient, stage 1 for micro-batch 1's activation, which stage 0 would send only
    /// after that gradient.
    #[test]
    fn deadlocks_are_found_before_any_thread_waits() {
        let fine = Fixed(vec![
            vec![F(0), F(1), B(1), B(0)],
            vec![F(0), B(0), F(1), B(1)],
        ]);
        assert!(plan(&fine, 2, 2).is_ok());
        let stuck = Fixed(vec![
            vec![F(0), B(0), F(1), B(1)],
            vec![F(1), F(0), B(1), B(0)],
        ]);
        let e = plan(&stuck, 2, 2).unwrap_err().to_string();
        assert!(
            e.contains("deadlocks")
                && e.contains("stage 0 waits for micro-batch 0's gradient from stage 1")
                && e.contains("stage 1 waits for micro-batch 1's activation from stage 0"),
            "{e}"
        );
        assert!(plan(&GPipe, 0, 1).is_err() && plan(&GPipe, 1, 0).is_err());
    }
}
