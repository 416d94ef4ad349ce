//! What a launch reports: every rank's outcome and the rank whose failure
//! ended the job (which rank *that* one was waiting for is [`super::blame`]).

use std::fmt;

use super::exit::{Exit, Stopped, signal_name};

/// What became of one rank.
#[derive(Clone, Debug)]
pub struct RankOutcome {
    /// Global rank.
    pub rank: usize,
    /// Rank on this node.
    pub local_rank: usize,
    /// Its process id.
    pub pid: u32,
    /// How it ended.
    pub exit: Exit,
    /// Set if the launcher stopped it (after another rank failed or an interrupt).
    pub stopped: Option<Stopped>,
    /// Its last stderr lines (at most [`super::TAIL_LINES`]).
    pub stderr_tail: Vec<String>,
}

impl RankOutcome {
    /// "rank 1 (pid 4242) was killed by signal 9 (SIGKILL)".
    pub fn describe(&self) -> String {
        format!("rank {} (pid {}) {}", self.rank, self.pid, self.exit)
    }
}

/// The result of a launch: every rank's outcome and what ended the job.
#[derive(Clone, Debug)]
pub struct LaunchReport {
    /// One entry per local rank, in local-rank order.
    pub ranks: Vec<RankOutcome>,
    /// Index into `ranks` of the rank whose failure ended the job.
    pub failed: Option<usize>,
    /// The signal (SIGINT, SIGTERM, SIGHUP) that made the launcher stop the job.
    pub interrupted: Option<i32>,
}

impl LaunchReport {
    /// Whether every rank exited with code 0.
    pub fn success(&self) -> bool {
        self.exit_code() == 0
    }

    /// The rank whose failure ended the job.
    pub fn failure(&self) -> Option<&RankOutcome> {
        self.failed.and_then(|i| self.ranks.get(i))
    }

    /// The launcher's exit code: 128 + signal if interrupted (130 for
    /// Ctrl-C), else the failed rank's code (128 + signal if a signal killed
    /// it), else 0.
    pub fn exit_code(&self) -> i32 {
        if let Some(sig) = self.interrupted {
            return 128 + sig;
        }
        if let Some(f) = self.failure() {
            let c = f.exit.shell_code();
            // A code of 0 cannot mark a failure; keep the launcher's exit non-zero.
            return if c == 0 { 1 } else { c };
        }
        if self.ranks.iter().all(|r| r.exit.success()) {
            0
        } else {
            1
        }
    }
}

impl fmt::Display for LaunchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(sig) = self.interrupted {
            writeln!(f, "interrupted by {}; stopped all ranks", signal_name(sig))?;
        }
        if let Some(r) = self.failure() {
            if let Some((culprit, _)) = self.blamed() {
                writeln!(
                    f,
                    "rank {} stopped responding: rank {} gave up waiting for it and exited \
                     first (its error below); rank {} was still running when stopped",
                    culprit.rank, r.rank, culprit.rank
                )?;
            }
            writeln!(f, "{}", r.describe())?;
            if r.stderr_tail.is_empty() {
                writeln!(f, "rank {} wrote nothing to stderr", r.rank)?;
            } else {
                writeln!(
                    f,
                    "last {} stderr lines of rank {}:",
                    r.stderr_tail.len(),
                    r.rank
                )?;
                for line in &r.stderr_tail {
                    writeln!(f, "  | {line}")?;
                }
            }
        }
        if let Some(table) = self.hang_table() {
            write!(f, "{table}")?;
        }
        let stopped: Vec<String> = self
            .ranks
            .iter()
            .filter_map(|r| match r.stopped {
                Some(Stopped::Terminated) => Some(format!("{} (SIGTERM)", r.rank)),
                Some(Stopped::Killed) => Some(format!("{} (SIGKILL)", r.rank)),
                None => None,
            })
            .collect();
        if !stopped.is_empty() {
            writeln!(f, "stopped ranks: {}", stopped.join(", "))?;
        }
        if self.failed.is_none() && self.interrupted.is_none() {
            if self.success() {
                writeln!(f, "all {} ranks exited successfully", self.ranks.len())?;
            } else {
                for r in self.ranks.iter().filter(|r| !r.exit.success()) {
                    writeln!(f, "{}", r.describe())?;
                }
            }
        }
        Ok(())
    }
}
