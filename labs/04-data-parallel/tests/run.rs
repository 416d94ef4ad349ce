//! The lab's program as a learner runs it.

use std::process::Command;
use std::time::{Duration, Instant};

fn lab() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lab04-data-parallel"));
    cmd.env("RUST_BACKTRACE", "0");
    cmd
}

/// The reference solution's quick run trains on every replica count, shows the
/// checkpoint gotcha and its fix, and writes its results file and chart.
#[test]
fn quick_run_with_the_solution_writes_results_and_charts() {
    let dir = tempfile::tempdir().unwrap();
    let out = lab()
        .args(["--quick"])
        .env(labkit::SOLUTION_ENV, "1")
        .env(measure::RESULTS_DIR_ENV, dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for part in [
        "1 CPU replica:",
        "4 CPU replicas:",
        "missing key(s) [`conv1.bias`",
        "unexpected key(s) [`module.conv1.bias`",
        "with the `module.` prefix removed on load it loads",
    ] {
        assert!(stdout.contains(part), "{part:?} not in:\n{stdout}");
    }
    let runs: Vec<_> = std::fs::read_dir(dir.path().join("lab04"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    let results = measure::read_results(&runs[0].join("results.json")).unwrap();
    let fig = &results.figures[0];
    assert_eq!(fig.name, "step-time");
    assert!(fig.categories.len() >= 3, "{:?}", fig.categories);
    assert_eq!(fig.problem(), None);
    for chart in ["step-time.svg", "step-time.png"] {
        assert!(runs[0].join(chart).is_file(), "{chart} missing");
    }
}

/// The lab system's promise: the unsolved starter fails fast with an error naming
/// the TODO, never a hang or a panic.
#[test]
fn the_unsolved_starter_fails_fast_naming_the_todo() {
    let dir = tempfile::tempdir().unwrap();
    let start = Instant::now();
    let out = lab()
        .args(["--quick"])
        .env_remove(labkit::SOLUTION_ENV)
        .env(measure::RESULTS_DIR_ENV, dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "{:?}",
        start.elapsed()
    );
    assert!(
        stderr.contains("TODO(lab 04): replicate is not written yet"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}
