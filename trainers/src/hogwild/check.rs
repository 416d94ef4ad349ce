//! One check of a set of [`Pieces`], shared by trainers' own tests and lab 3's
//! self-check: it trains, and a worker killed with SIGKILL leaves no shared memory
//! behind.

use super::*;

/// What [`check_pieces`] saw.
#[derive(Debug, Clone, PartialEq)]
pub struct PiecesChecked {
    /// The training run's evaluation loss before and after.
    pub loss: (f64, f64),
    /// The run with a killed worker: how that worker ended, in the parent's words.
    pub killed: String,
}

/// Checks `pieces` with `config` (at least 2 workers and 6 steps), in two runs:
///
/// 1. **it trains**: every worker attaches and does all its steps, the shared
///    parameters change (the parent never writes them after the start, so any change
///    is the workers' updates landing in the region), and the evaluation loss falls
///    below 0.7 × its initial value;
/// 2. **a SIGKILL leaks nothing**: worker 1 kills itself (SIGKILL: no destructor,
///    no clean-up) after 5 steps; the parent must report it, the other workers finish,
///    and no file of the run's region is left in [`SHM_DIR`] (file-system sharing
///    unlinks it once every worker attached or died; descriptor sharing never names
///    one).
///
/// `launcher` starts a program whose first act is [`worker_from_env_with`] with the
/// same `pieces`. The error says what failed, with the run's own error (a learner's
/// `TODO` included) where a run failed.
pub fn check_pieces(
    config: &HogwildConfig,
    launcher: &WorkerProgram,
    pieces: &dyn Pieces,
) -> std::result::Result<PiecesChecked, String> {
    let sharing = config.sharing.name();
    if config.workers < 2 || config.steps < 6 {
        return Err(format!(
            "check_pieces needs 2 or more workers of 6 or more steps, got {} of {}",
            config.workers, config.steps
        ));
    }
    let report = run_with(config, launcher, pieces).map_err(|e| format!("{sharing}: {e}"))?;
    for w in &report.workers {
        if !w.attached || w.steps != config.steps as u64 {
            return Err(format!(
                "{sharing}: worker {} attached: {}, steps counted in shared memory: {} of {}",
                w.rank, w.attached, w.steps, config.steps
            ));
        }
    }
    if !(report.final_loss.is_finite() && report.max_change.is_finite()) {
        return Err(format!(
            "{sharing}: the shared parameters diverged (loss {}, largest change {}): \
             does the update step against the gradient, and by lr times it?",
            report.final_loss, report.max_change
        ));
    }
    if report.max_change == 0.0 {
        return Err(format!(
            "{sharing}: the workers trained, but not one shared parameter changed: \
             their updates did not reach the shared region"
        ));
    }
    // Both finite here (checked above).
    if report.final_loss >= 0.7 * report.initial_loss {
        return Err(format!(
            "{sharing}: the loss of the shared parameters went from {:.4} to {:.4}; \
             it should fall below 0.7 × the start",
            report.initial_loss, report.final_loss
        ));
    }
    left_behind(&report).map_err(|e| format!("{sharing}, a clean run: {e}"))?;

    let mut killing = config.clone();
    killing.kill_worker = Some(KillWorker {
        rank: 1,
        after_steps: 5,
    });
    let killed = run_report_with(&killing, launcher, pieces)
        .map_err(|e| format!("{sharing}, worker 1 killed: {e}"))?;
    let dead = &killed.workers[1];
    if dead.failure.as_deref() != Some("was killed by signal 9 (SIGKILL)") || dead.steps != 5 {
        return Err(format!(
            "{sharing}: worker 1 should have died by SIGKILL after 5 steps: {dead:?}"
        ));
    }
    if let Some(w) = killed
        .workers
        .iter()
        .find(|w| w.rank != 1 && w.failure.is_some())
    {
        return Err(format!(
            "{sharing}: worker {} should have finished beside the killed one: {w:?}",
            w.rank
        ));
    }
    left_behind(&killed).map_err(|e| format!("{sharing}, worker 1 killed: {e}"))?;
    Ok(PiecesChecked {
        loss: (report.initial_loss, report.final_loss),
        killed: format!(
            "worker 1 (pid {}) {} after {} steps",
            dead.pid,
            dead.failure.as_deref().unwrap_or_default(),
            dead.steps
        ),
    })
}

/// An error if the run's shared-memory file still exists.
fn left_behind(report: &HogwildReport) -> std::result::Result<(), String> {
    let path = Path::new(SHM_DIR).join(&report.region_name);
    if path.exists() {
        return Err(format!("{} was left behind", path.display()));
    }
    Ok(())
}
