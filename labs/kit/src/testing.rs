//! What every lab's `tests/run.rs` checks of its program, run as a learner runs it:
//! the solution's `--quick` run writes one results folder with its results file and
//! charts, and the unsolved starter fails fast, naming its TODO, without a panic.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use measure::ResultsFile;

/// The starter must fail within this long (it should fail at once: this bounds a
/// hang, with room for a loaded machine).
const STARTER_LIMIT: Duration = Duration::from_secs(30);

/// A finished quick run of the reference solution.
pub struct QuickRun {
    /// What the program printed on stdout.
    pub stdout: String,
    /// The run's folder, `<results>/labNN/<time>/`.
    pub dir: PathBuf,
    /// Its results file, read back.
    pub results: ResultsFile,
    // Owns the results folder for as long as the caller looks at it.
    _root: tempfile::TempDir,
}

impl QuickRun {
    /// The distinct labels of the run's records (the series of its charts).
    pub fn labels(&self) -> std::collections::BTreeSet<&str> {
        self.results
            .records
            .iter()
            .map(|r| r.label.as_str())
            .collect()
    }

    /// Panics unless the results file holds exactly these figures, in this order,
    /// each drawn as SVG and PNG.
    pub fn assert_figures(&self, names: &[&str]) {
        let got: Vec<&str> = self
            .results
            .figures
            .iter()
            .map(|f| f.name.as_str())
            .collect();
        assert_eq!(got, names);
        self.assert_charts(names);
    }

    /// Panics unless every named chart was written as SVG and PNG.
    pub fn assert_charts(&self, names: &[&str]) {
        for name in names {
            for ext in ["svg", "png"] {
                let file = self.dir.join(format!("{name}.{ext}"));
                assert!(file.is_file(), "{} missing", file.display());
            }
        }
    }
}

/// The lab's program with backtraces off (the errors read as a learner sees them).
fn program(exe: &str) -> Command {
    let mut cmd = Command::new(exe);
    cmd.env("RUST_BACKTRACE", "0").env_remove("RANK");
    cmd
}

/// Runs lab `lab`'s program `exe` with the reference solution, `--quick` and
/// `args`, into a fresh results folder; panics unless it succeeds and writes exactly
/// one run folder with a readable results file.
pub fn quick_run(exe: &str, lab: u32, args: &[&str]) -> QuickRun {
    let root = tempfile::tempdir().expect("a temporary results folder");
    let out = program(exe)
        .arg("--quick")
        .args(args)
        .env(crate::SOLUTION_ENV, "1")
        .env(measure::RESULTS_DIR_ENV, root.path())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {exe}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let runs: Vec<PathBuf> = std::fs::read_dir(root.path().join(format!("lab{lab:02}")))
        .expect("the lab's results folder")
        .map(|e| e.expect("a results entry").path())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    let dir = runs[0].clone();
    let results = measure::read_results(&dir.join("results.json")).expect("the results file");
    QuickRun {
        stdout,
        dir,
        results,
        _root: root,
    }
}

/// Runs lab `lab`'s program `exe` with the learner's unsolved starter and `args`;
/// panics unless it fails within 30 s, without a panic, naming `TODO(lab NN): what`,
/// and writes no results (a failed run must not leave a figure the book would show).
/// Returns stdout and stderr together.
pub fn starter_fails(exe: &str, lab: u32, what: &str, args: &[&str]) -> String {
    let root = tempfile::tempdir().expect("a temporary results folder");
    let start = Instant::now();
    let out = program(exe)
        .arg("--quick")
        .args(args)
        .env_remove(crate::SOLUTION_ENV)
        .env(measure::RESULTS_DIR_ENV, root.path())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {exe}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "the starter succeeded:\n{text}");
    assert!(
        start.elapsed() < STARTER_LIMIT,
        "the starter took {:?} to fail",
        start.elapsed()
    );
    let marker = format!("TODO(lab {lab:02}): {what}");
    assert!(text.contains(&marker), "{marker} not in:\n{text}");
    assert!(!text.contains("panicked"), "{text}");
    let results = root.path().join(format!("lab{lab:02}"));
    assert!(
        !results.exists(),
        "a failed run wrote {}",
        results.display()
    );
    text
}
