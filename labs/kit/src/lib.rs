//! What every lab of the workshop shares, so each lab's own code is only its lesson.
//!
//! A lab is one package `labs/NN-name/` with the learner's file `src/exercise.rs`, the
//! reference solution (the real code in `collectives`/`trainers` where one exists,
//! reached through a seam), a runnable program and a self-check `tests/check.rs`.
//! Both the program and the check pick the exercise or the solution with
//! [`Variant::from_env`], which `cargo lab N --solution` and the test suite set.
//! What a run measured goes through a [`Run`]: `results/labNN/<UTC time>/`, a
//! results file in the bench's format and its charts.

#![deny(missing_docs)]

pub mod limits;
pub mod plugged;
mod run;
pub mod testing;

use std::fmt;

pub use run::{Run, results_root};

/// The environment variable that selects the reference solution (`1`). Set by
/// `cargo lab N --solution` and by the test suite's `labs` step.
pub const SOLUTION_ENV: &str = "RINGSIDE_LAB_SOLUTION";

/// Whose code a lab runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// The learner's `src/exercise.rs`.
    Exercise,
    /// The reference solution.
    Solution,
}

impl Variant {
    /// [`Variant::Solution`] when `RINGSIDE_LAB_SOLUTION` is `1`, else the exercise.
    pub fn from_env() -> Variant {
        match std::env::var(SOLUTION_ENV).as_deref() {
            Ok("1") => Variant::Solution,
            _ => Variant::Exercise,
        }
    }
}

impl Variant {
    /// The manifest's name for it: `exercise` or `solution` (`lab.variant`).
    pub fn key(self) -> &'static str {
        match self {
            Variant::Exercise => "exercise",
            Variant::Solution => "solution",
        }
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Variant::Exercise => "your exercise",
            Variant::Solution => "the reference solution",
        })
    }
}

/// `message` followed by the `hint: <key>` line that `cargo lab check` reads
/// to show the hint of that name from `labs/info.toml` (xtask's `hints.rs`).
pub fn named(message: impl fmt::Display, key: &str) -> String {
    format!("{message}\nhint: {key}")
}

/// The text of a panic payload caught from a learner's code ("a rank
/// panicked" when it carries none).
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "a rank panicked".into())
}

/// A lab program's exit: success, or its error with the causes on one line of
/// stderr after `prefix` (`"lab 2: "`; empty where the error already names the
/// rank), and exit code 1.
pub fn exit<E: fmt::Display>(result: Result<(), E>, prefix: &str) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{prefix}{e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// What a lab's exercise can fail with.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// A piece of the exercise the learner has not written yet.
    #[error(
        "TODO(lab {lab:02}): {what} is not written yet. Edit {file}, then \
         `cargo lab check {lab}`; `cargo lab hint {lab}` if you are stuck"
    )]
    Todo {
        /// The lab's number.
        lab: u32,
        /// Which piece.
        what: &'static str,
        /// The file to edit.
        file: &'static str,
    },
    /// A piece of a lab's optional stretch goal not written yet: its own
    /// marker, so the test suite tells it from the main exercise's TODO.
    #[error(
        "TODO(lab {lab:02} stretch): {what} is not written yet. Edit {file}, then \
         `cargo lab check {lab} --stretch`; `cargo lab hint {lab} --stretch` if you are stuck"
    )]
    StretchTodo {
        /// The lab's number.
        lab: u32,
        /// Which piece.
        what: &'static str,
        /// The file to edit.
        file: &'static str,
    },
    /// A collective or point-to-point call failed (a peer's error, a timeout).
    #[error(transparent)]
    Collective(#[from] collectives::Error),
    /// The exercise ran but its result is wrong.
    #[error("{0}")]
    Wrong(String),
    /// Writing the results file failed.
    #[error(transparent)]
    Results(#[from] measure::Error),
    /// Drawing the charts failed.
    #[error(transparent)]
    Report(#[from] reports::Error),
}

impl LabError {
    /// As a [`collectives::Error`], for code that runs inside a collective's
    /// harness (the timing loop): a collective error stays itself, anything
    /// else (an unsolved TODO, a wrong result) becomes an invalid-argument error
    /// carrying the message.
    pub fn into_collective(self) -> collectives::Error {
        match self {
            LabError::Collective(e) => e,
            other => collectives::Error::InvalidArgument(other.to_string()),
        }
    }
}

/// Starts or joins the job as `collectives::job::start_rank` does; in the
/// process that launched the ranks (a lab run plainly), exits with the job's
/// code once they are done, so what follows runs only as a rank.
pub fn rank(
    nproc: usize,
    timeout: std::time::Duration,
) -> Result<Box<collectives::rendezvous::env::Rendezvous>, collectives::job::JoinError> {
    match collectives::job::start_rank(nproc, timeout)? {
        Ok(rdv) => Ok(rdv),
        Err(code) => std::process::exit(code),
    }
}

/// Waits for every process of a job (`children[k]` is `{who} k`, its output
/// piped) and returns the first one's standard output; if any failed, an error
/// saying `{what} failed` and each failed one's standard error.
pub fn wait_all(
    children: Vec<std::process::Child>,
    what: &str,
    who: &str,
) -> Result<String, LabError> {
    let mut first = String::new();
    let mut failed = Vec::new();
    for (k, c) in children.into_iter().enumerate() {
        let out = c
            .wait_with_output()
            .map_err(|e| LabError::Wrong(format!("waiting for {who} {k}: {e}")))?;
        if !out.status.success() {
            failed.push(format!(
                "{who} {k}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        if k == 0 {
            first = String::from_utf8_lossy(&out.stdout).into_owned();
        }
    }
    if !failed.is_empty() {
        return Err(LabError::Wrong(format!(
            "{what} failed:\n{}",
            failed.join("\n")
        )));
    }
    Ok(first)
}

/// The error an unsolved piece returns: `todo(1, "all_reduce_by_hand", file!())`.
/// Every rank returns it at once, so an unsolved lab fails fast and never hangs.
/// A piece behind one of `trainers`' seams returns it through [`todo!`].
pub fn todo(lab: u32, what: &'static str, file: &'static str) -> LabError {
    LabError::Todo { lab, what, file }
}

/// The error an unsolved piece of a stretch goal returns:
/// `stretch_todo(6, "the bidirectional ring", file!())`, as [`todo()`] is for
/// the main exercise.
pub fn stretch_todo(lab: u32, what: &'static str, file: &'static str) -> LabError {
    LabError::StretchTodo { lab, what, file }
}

/// The error an unsolved piece behind one of `trainers`' seams returns (the
/// exercise's methods return `trainers::Result`):
/// `Err(labkit::todo!(7, "step 1: broadcast"))` is [`todo()`] with this file's
/// name, carried as `trainers::Error::Seam`, which shows it unchanged
/// (`TODO(lab 07): step 1: broadcast is not written yet. Edit …`) and which
/// `labkit_torch::lab_error` takes back out as the [`LabError`] itself.
///
/// A macro, not a function, for two reasons: `file!()` then names the
/// exercise, and the expansion names `trainers`, which every lab that uses it
/// depends on, while labkit itself does not (the labs without libtorch never
/// link it).
#[macro_export]
macro_rules! todo {
    ($lab:expr, $what:expr $(,)?) => {
        ::trainers::Error::Seam(::std::boxed::Box::new($crate::todo(
            $lab,
            $what,
            ::core::file!(),
        )))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_todo_error_names_the_marker_the_file_and_the_commands() {
        let e = todo(
            3,
            "put the parameters in the shared region",
            "labs/03-x/src/exercise.rs",
        );
        let s = e.to_string();
        for part in [
            "TODO(lab 03)",
            "labs/03-x/src/exercise.rs",
            "cargo lab check 3",
            "cargo lab hint 3",
        ] {
            assert!(s.contains(part), "{s}");
        }
    }
    #[test]
    fn the_stretch_todo_names_its_own_marker_and_the_stretch_commands() {
        let s = stretch_todo(6, "the bidirectional ring", "labs/06-x/src/stretch.rs").to_string();
        for part in [
            "TODO(lab 06 stretch)",
            "labs/06-x/src/stretch.rs",
            "cargo lab check 6 --stretch",
            "cargo lab hint 6 --stretch",
        ] {
            assert!(s.contains(part), "{s}");
        }
        // The gate tells the stretch's TODO from the main exercise's.
        assert!(!s.contains("TODO(lab 06)"), "{s}");
    }
}
