//! The lab's program as a learner runs it.

use std::process::Command;
use std::time::{Duration, Instant};

fn lab() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lab05-model-parallel"));
    cmd.env("RUST_BACKTRACE", "0");
    cmd
}

/// The reference solution's quick run trains with both schedules, says where the
/// stages run, and writes its results file and both charts.
#[test]
fn quick_run_with_the_solution_writes_results_and_charts() {
    let dir = tempfile::tempdir().unwrap();
    let out = lab()
        .arg("--quick")
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
    // Either the GPU split or the printed reason why not: never silent.
    assert!(
        stdout.contains("on the GPU") || stdout.contains("no CUDA GPU"),
        "{stdout}"
    );
    for line in [
        "naive      1",
        "GPipe      4",
        "bubble.svg",
        "step-time.svg",
    ] {
        assert!(stdout.contains(line), "{line:?} missing:\n{stdout}");
    }
    let runs: Vec<_> = std::fs::read_dir(dir.path().join("lab05"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    let results = measure::read_results(&runs[0].join("results.json")).unwrap();
    let names: Vec<&str> = results.figures.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["bubble", "step-time"]);
    for chart in ["bubble.svg", "bubble.png", "step-time.svg", "step-time.png"] {
        assert!(runs[0].join(chart).is_file(), "{chart} missing");
    }
}

/// The lab system's promise: the unsolved starter fails at once with an error
/// naming the TODO, before loading any data.
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
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{text}");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "took {:?}",
        start.elapsed()
    );
    assert!(text.contains("TODO(lab 05): naive"), "{text}");
    assert!(
        !dir.path().join("lab05").exists(),
        "a failed run wrote results"
    );
}
