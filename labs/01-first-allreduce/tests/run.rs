//! The lab's program as a learner runs it: plainly, spawning its own ranks.

use std::process::Command;
use std::time::{Duration, Instant};

fn lab() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lab01-first-allreduce"));
    cmd.env_remove("RANK").env("RUST_BACKTRACE", "0");
    cmd
}

/// The reference solution's quick run checks itself, times both versions and
/// writes its results file and charts.
#[test]
fn quick_run_with_the_solution_writes_results_and_charts() {
    let dir = tempfile::tempdir().unwrap();
    let out = lab()
        .args(["--nproc", "3", "--quick"])
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
    assert!(stdout.contains("by hand and all_reduce agree"), "{stdout}");
    let runs: Vec<_> = std::fs::read_dir(dir.path().join("lab01"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    let results = measure::read_results(&runs[0].join("results.json")).unwrap();
    let labels: std::collections::BTreeSet<&str> =
        results.records.iter().map(|r| r.label.as_str()).collect();
    assert_eq!(labels.len(), 2, "{labels:?}");
    assert!(
        results
            .records
            .iter()
            .all(|r| r.world == 3 && r.median_us > 0.0)
    );
    for chart in ["latency-all_reduce.svg", "latency-all_reduce.png"] {
        assert!(runs[0].join(chart).is_file(), "{chart} missing");
    }
}

/// The lab system's promise: the unsolved starter fails fast with an error
/// naming the TODO, never a hang.
#[test]
fn the_unsolved_starter_fails_fast_naming_the_todo() {
    let dir = tempfile::tempdir().unwrap();
    let start = Instant::now();
    let out = lab()
        .args(["--nproc", "3", "--quick", "--timeout", "20"])
        .env_remove(labkit::SOLUTION_ENV)
        .env(measure::RESULTS_DIR_ENV, dir.path())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{text}");
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "took {:?}",
        start.elapsed()
    );
    // Every rank fails the same way; the launcher stops the others after the
    // first, so at least one rank's line must be there, naming the TODO.
    assert!(
        text.lines()
            .any(|l| l.contains("] rank ") && l.contains("TODO(lab 01): all_reduce_by_hand")),
        "{text}"
    );
}
