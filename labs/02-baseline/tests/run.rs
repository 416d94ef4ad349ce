//! The lab's program as a learner runs it.

use std::process::Command;
use std::time::{Duration, Instant};

fn lab() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lab02-baseline"));
    cmd.env("RUST_BACKTRACE", "0");
    cmd
}

/// The reference solution's quick run trains, says where the time goes and
/// writes its results file and both charts.
#[test]
fn quick_run_with_the_solution_writes_results_and_charts() {
    let dir = tempfile::tempdir().unwrap();
    let out = lab()
        .args(["--quick", "--threads", "1"])
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
    assert!(stdout.contains("the bottleneck is"), "{stdout}");
    // No GPU is never silent: either it trained on cuda:0 or it says why not.
    assert!(
        stdout.contains("cuda:0 skipped: ") || stdout.contains("cuda:0: 30 steps"),
        "{stdout}"
    );
    let runs: Vec<_> = std::fs::read_dir(dir.path().join("lab02"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    let results = measure::read_results(&runs[0].join("results.json")).unwrap();
    let names: Vec<&str> = results.figures.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["phases", "loss"]);
    for chart in ["phases.svg", "phases.png", "loss.svg", "loss.png"] {
        assert!(runs[0].join(chart).is_file(), "{chart} missing");
    }
}

/// The unsolved starter fails at once, naming the TODO.
#[test]
fn the_unsolved_starter_fails_fast_naming_the_todo() {
    let dir = tempfile::tempdir().unwrap();
    let start = Instant::now();
    let out = lab()
        .arg("--quick")
        .env_remove(labkit::SOLUTION_ENV)
        .env(measure::RESULTS_DIR_ENV, dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "took {:?}",
        start.elapsed()
    );
    assert!(
        stderr.contains("TODO(lab 02): forward_backward"),
        "{stderr}"
    );
}
