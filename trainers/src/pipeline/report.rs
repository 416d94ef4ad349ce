//! What one pipeline step did, stage by stage: the spans of work, each stage's busy
//! time against the wall time, the bubble, and the schedule drawn as text. A measured
//! step ([`Pipeline::step`](super::Pipeline::step)) and a simulated one
//! ([`simulate`](super::simulate)) are the same kind of report, so they compare
//! line by line.

use std::time::Duration;

use super::theoretical_bubble;

/// What a stage was doing in a [`Span`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// The forward pass of one micro-batch (the last stage includes its loss).
    Forward,
    /// The backward pass of one micro-batch.
    Backward,
    /// The optimizer step (once per step, after all backward passes).
    Update,
}

/// One stretch of work of one stage, in time since the step started.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    /// The stage, from 0.
    pub stage: usize,
    /// The micro-batch, from 0 (0 for [`Phase::Update`]).
    pub micro_batch: usize,
    /// What was done.
    pub phase: Phase,
    /// When it began.
    pub start: Duration,
    /// When it ended.
    pub end: Duration,
}

/// What one pipeline step did and how busy each stage was.
#[derive(Debug, Clone, PartialEq)]
pub struct StepReport {
    /// The mean loss over the whole batch (before the update).
    pub loss: f64,
    /// Number of stages `S`.
    pub stages: usize,
    /// Number of micro-batches `M`.
    pub micro_batches: usize,
    /// From the start of the step to the end of the last backward pass (the optimizer
    /// step is not included).
    pub wall: Duration,
    /// Everything each stage did, in order.
    pub spans: Vec<Span>,
}

impl StepReport {
    /// Each stage's forward + backward compute time (waiting for neighbours and the
    /// optimizer step excluded).
    pub fn busy(&self) -> Vec<Duration> {
        let f = self.busy_in(Phase::Forward);
        let b = self.busy_in(Phase::Backward);
        f.iter().zip(&b).map(|(f, b)| *f + *b).collect()
    }

    /// Each stage's time in one phase, summed over the micro-batches. Stages that are
    /// equal overall may not be equal per phase (the first stage computes no gradient
    /// for its input), and GPipe runs the phases one after the other, so each phase
    /// has its own slowest stage.
    pub fn busy_in(&self, phase: Phase) -> Vec<Duration> {
        let mut busy = vec![Duration::ZERO; self.stages];
        for s in self.spans.iter().filter(|s| s.phase == phase) {
            busy[s.stage] += s.end.saturating_sub(s.start);
        }
        busy
    }

    /// Each stage's busy time divided by the wall time.
    pub fn utilisation(&self) -> Vec<f64> {
        let wall = self.wall.as_secs_f64();
        self.busy()
            .iter()
            .map(|b| {
                if wall > 0.0 {
                    b.as_secs_f64() / wall
                } else {
                    0.0
                }
            })
            .collect()
    }

    /// The measured bubble: one minus the mean utilisation.
    pub fn bubble(&self) -> f64 {
        let u = self.utilisation();
        1.0 - u.iter().sum::<f64>() / u.len().max(1) as f64
    }

    /// [`theoretical_bubble`] for this step's `S` and `M`.
    pub fn theoretical_bubble(&self) -> f64 {
        theoretical_bubble(self.stages, self.micro_batches)
    }

    /// The optimizer step's time, the slowest stage's.
    pub fn update(&self) -> Duration {
        self.spans
            .iter()
            .filter(|s| s.phase == Phase::Update)
            .map(|s| s.end.saturating_sub(s.start))
            .max()
            .unwrap_or_default()
    }

    /// The schedule as text, one row per stage, `width` columns for the wall time:
    /// the digit `m` (mod 10) where the stage ran micro-batch `m`'s forward, the letter
    /// `a + m` where it ran its backward, `.` where it waited.
    pub fn timeline(&self, width: usize) -> String {
        let width = width.max(1);
        let wall = self.wall.as_secs_f64().max(f64::MIN_POSITIVE);
        // Rounded, not truncated: 9 ms of 24 at 24 columns is column 9, not 8.99 → 8.
        let col = |t: Duration| ((t.as_secs_f64() / wall) * width as f64).round() as usize;
        let mut out = String::new();
        for stage in 0..self.stages {
            let mut row = vec!['.'; width];
            for s in self.spans.iter().filter(|s| s.stage == stage) {
                let mark = match s.phase {
                    Phase::Forward => char::from(b'0' + (s.micro_batch % 10) as u8),
                    Phase::Backward => char::from(b'a' + (s.micro_batch % 10) as u8),
                    Phase::Update => continue,
                };
                let (a, b) = (col(s.start).min(width - 1), col(s.end).min(width));
                for c in &mut row[a..b.max(a + 1)] {
                    *c = mark;
                }
            }
            out.push_str(&format!(
                "stage {stage} |{}|\n",
                row.into_iter().collect::<String>()
            ));
        }
        out
    }
}
