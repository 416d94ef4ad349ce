//! Training metrics as JSON lines, and a progress bar, both on rank 0 only.
//!
//! One JSON object per line, so a run can be followed with `tail -f` and read back
//! line by line even if it was killed mid-write:
//!
//! ```text
//! {"kind":"start","wall_s":0.0,"rank":0,"world_size":2}
//! {"kind":"step","epoch":0,"step":50,"loss":0.61,"accuracy":0.78,"samples_per_s":5120.3,"lr":0.05,"wall_s":1.92}
//! {"kind":"epoch","epoch":0,"step":469,"loss":0.52,"accuracy":0.81,"samples_per_s":4980.1,"lr":0.05,"val_loss":0.45,"val_accuracy":0.84,"wall_s":12.4}
//! ```
//!
//! `step` counts optimizer steps since the start of training, `wall_s` seconds since
//! the [`Metrics`] was made; a non-finite number is written as `null`. On every other
//! rank a [`Metrics`] does nothing, so trainers call it unconditionally.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::{Error, Result};

/// One training step's numbers (the caller's rank's batch, or all-reduced: the
/// trainer decides and documents which).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepRecord {
    /// The epoch in progress.
    pub epoch: u64,
    /// Optimizer steps since the start of training (this one included).
    pub step: u64,
    /// The batch's mean loss.
    pub loss: f64,
    /// The batch's accuracy.
    pub accuracy: f64,
    /// Throughput of this step (all ranks' samples if the trainer counts them).
    pub samples_per_s: f64,
    /// The learning rate used.
    pub lr: f64,
}

/// One epoch's numbers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EpochRecord {
    /// The epoch just finished.
    pub epoch: u64,
    /// Optimizer steps since the start of training.
    pub step: u64,
    /// Mean training loss over the epoch.
    pub loss: f64,
    /// Training accuracy over the epoch.
    pub accuracy: f64,
    /// Mean throughput over the epoch.
    pub samples_per_s: f64,
    /// The learning rate at the end of the epoch.
    pub lr: f64,
    /// Validation loss ([`crate::train::evaluate`]), if evaluated.
    pub val_loss: Option<f64>,
    /// Validation accuracy, if evaluated.
    pub val_accuracy: Option<f64>,
}

#[derive(Serialize)]
struct Line<'a, T: Serialize> {
    kind: &'a str,
    #[serde(flatten)]
    record: &'a T,
    wall_s: f64,
}

#[derive(Serialize)]
struct Start {
    rank: usize,
    world_size: usize,
}

/// Writes [`StepRecord`]s and [`EpochRecord`]s as JSON lines and drives a progress
/// bar, on rank 0; inert elsewhere.
#[derive(Debug)]
pub struct Metrics {
    out: Option<(PathBuf, BufWriter<File>)>,
    bar: Option<ProgressBar>,
    rank0: bool,
    show_progress: bool,
    every: u64,
    start: Instant,
}

impl Metrics {
    /// Metrics of `rank` in a world of `world_size`: on rank 0, JSON lines go to
    /// `jsonl` (if given; created, or appended to when `append`, e.g. on resume) and
    /// a progress bar to stderr (indicatif hides it when stderr is not a terminal).
    /// Other ranks open nothing.
    pub fn new(
        rank: usize,
        world_size: usize,
        jsonl: Option<&Path>,
        append: bool,
    ) -> Result<Metrics> {
        let mut m = Metrics {
            out: None,
            bar: None,
            rank0: rank == 0,
            show_progress: rank == 0,
            every: 1,
            start: Instant::now(),
        };
        if rank != 0 {
            return Ok(m);
        }
        if let Some(path) = jsonl {
            let file = OpenOptions::new()
                .create(true)
                .write(true)
                .append(append)
                .truncate(!append)
                .open(path)
                .map_err(|source| Error::Io {
                    path: path.to_path_buf(),
                    source,
                })?;
            m.out = Some((path.to_path_buf(), BufWriter::new(file)));
            m.write("start", &Start { rank, world_size })?;
            m.flush()?;
        }
        Ok(m)
    }

    /// A `Metrics` that records nothing (tests, non-zero ranks).
    pub fn disabled() -> Metrics {
        Metrics {
            out: None,
            bar: None,
            rank0: false,
            show_progress: false,
            every: 1,
            start: Instant::now(),
        }
    }

    /// Writes a step line only every `n` steps (steps whose number is a multiple of
    /// `n`); the progress bar still moves every step. `n = 0` writes no step lines.
    pub fn log_every(mut self, n: u64) -> Metrics {
        self.every = n;
        self
    }

    /// Turns the progress bar off (or back on, on rank 0 only).
    pub fn progress(mut self, on: bool) -> Metrics {
        self.show_progress = on && self.rank0;
        self
    }

    /// Starts an epoch of `steps` steps, of which `done` are already done (resume).
    pub fn begin_epoch(&mut self, epoch: u64, steps: u64, done: u64) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        if !self.show_progress {
            return;
        }
        let bar = ProgressBar::new(steps);
        if let Ok(style) = ProgressStyle::with_template(
            "epoch {prefix:>3} [{bar:30}] {pos}/{len} {msg} ({elapsed} < {eta})",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix(epoch.to_string());
        bar.set_position(done);
        self.bar = Some(bar);
    }

    /// Records a step that ended now: moves the bar and, every `n` steps,
    /// writes a line.
    pub fn step(&mut self, rec: &StepRecord) -> Result<()> {
        self.step_at(rec, Instant::now())
    }

    /// Records a step that ended at `ended` (read back later, as
    /// [`crate::train::pending`] does): its line's `wall_s` is that moment's.
    pub fn step_at(&mut self, rec: &StepRecord, ended: Instant) -> Result<()> {
        if let Some(bar) = &self.bar {
            bar.inc(1);
            bar.set_message(format!(
                "loss {:.4} acc {:5.1}% {:.0} samples/s",
                rec.loss,
                100.0 * rec.accuracy,
                rec.samples_per_s
            ));
        }
        if self.every > 0 && rec.step % self.every == 0 {
            let wall_s = ended.saturating_duration_since(self.start).as_secs_f64();
            self.write_at("step", rec, wall_s)?;
        }
        Ok(())
    }

    /// Records an epoch: writes a line (flushed), finishes the bar and prints a
    /// summary on rank 0.
    pub fn end_epoch(&mut self, rec: &EpochRecord) -> Result<()> {
        self.write("epoch", rec)?;
        self.flush()?;
        if let Some(bar) = self.bar.take() {
            let val = match (rec.val_loss, rec.val_accuracy) {
                (Some(l), Some(a)) => format!(", val loss {l:.4} acc {:.2}%", 100.0 * a),
                _ => String::new(),
            };
            bar.finish_and_clear();
            let _ = writeln!(
                std::io::stderr(),
                "epoch {}: loss {:.4} acc {:.2}%{val}, {:.0} samples/s",
                rec.epoch,
                rec.loss,
                100.0 * rec.accuracy,
                rec.samples_per_s
            );
        }
        Ok(())
    }

    /// Seconds since this `Metrics` was made.
    pub fn wall_s(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// Flushes the JSON lines to the file.
    pub fn flush(&mut self) -> Result<()> {
        if let Some((path, w)) = &mut self.out {
            w.flush().map_err(|source| Error::Io {
                path: path.clone(),
                source,
            })?;
        }
        Ok(())
    }

    fn write<T: Serialize>(&mut self, kind: &str, record: &T) -> Result<()> {
        let wall_s = self.wall_s();
        self.write_at(kind, record, wall_s)
    }

    fn write_at<T: Serialize>(&mut self, kind: &str, record: &T, wall_s: f64) -> Result<()> {
        let Some((path, w)) = &mut self.out else {
            return Ok(());
        };
        let line = Line {
            kind,
            record,
            wall_s,
        };
        let io = |source| Error::Io {
            path: path.clone(),
            source,
        };
        serde_json::to_writer(&mut *w, &line).map_err(|e| io(e.into()))?;
        w.write_all(b"\n").map_err(io)
    }
}

impl Drop for Metrics {
    fn drop(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        // Errors cannot be reported from drop; `end_epoch` and `flush` report them.
        let _ = self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(step: u64) -> StepRecord {
        StepRecord {
            epoch: 0,
            step,
            loss: 0.5,
            accuracy: 0.75,
            samples_per_s: 100.0,
            lr: 0.1,
        }
    }

    #[test]
    fn rank_zero_writes_json_lines_every_n_steps_and_epochs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.jsonl");
        let mut m = Metrics::new(0, 2, Some(&path), false)
            .unwrap()
            .progress(false)
            .log_every(2);
        m.begin_epoch(0, 4, 0);
        for s in 1..=4 {
            m.step(&step(s)).unwrap();
        }
        m.end_epoch(&EpochRecord {
            epoch: 0,
            step: 4,
            loss: f64::NAN,
            accuracy: 0.5,
            samples_per_s: 10.0,
            lr: 0.1,
            val_loss: Some(0.25),
            val_accuracy: None,
        })
        .unwrap();
        drop(m);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let kinds: Vec<&str> = lines.iter().map(|v| v["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["start", "step", "step", "epoch"], "{text}");
        assert_eq!(lines[0]["world_size"], 2);
        assert_eq!(lines[1]["step"], 2);
        assert_eq!(lines[2]["step"], 4);
        assert_eq!(lines[1]["accuracy"], 0.75);
        assert!(lines[1]["wall_s"].as_f64().unwrap() >= 0.0);
        assert!(lines[3]["loss"].is_null(), "NaN is written as null");
        assert_eq!(lines[3]["val_loss"], 0.25);
        assert!(lines[3]["val_accuracy"].is_null());

        // Appending (resume) keeps the old lines.
        let m = Metrics::new(0, 2, Some(&path), true).unwrap();
        drop(m);
        let n = std::fs::read_to_string(&path).unwrap().lines().count();
        assert_eq!(n, 5);
    }

    #[test]
    fn other_ranks_write_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.jsonl");
        let mut m = Metrics::new(1, 2, Some(&path), false).unwrap();
        m.begin_epoch(0, 1, 0);
        m.step(&step(1)).unwrap();
        drop(m);
        assert!(!path.exists());
    }

    #[test]
    fn unwritable_path_is_an_error_naming_it() {
        let e = Metrics::new(0, 1, Some(Path::new("/nonexistent-dir/m.jsonl")), false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent-dir/m.jsonl"), "{e}");
    }
}
