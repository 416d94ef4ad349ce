//! The lab's program as a learner runs it: it starts its own worker processes.

use std::process::Command;
use std::time::{Duration, Instant};

fn lab() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lab03-hogwild"));
    cmd.env("RUST_BACKTRACE", "0");
    cmd
}

/// The reference solution's quick run trains with 1, 2 and 4 workers and writes its
/// results file (both figures, one line per worker count) and charts.
#[test]
fn quick_run_with_the_solution_writes_results_and_charts() {
    let dir = tempfile::tempdir().unwrap();
    let out = lab()
        .args(["--quick", "--sharing", "file-system"])
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
    for w in ["1 worker(s)", "2 worker(s)", "4 worker(s)"] {
        assert!(stdout.contains(w), "{stdout}");
    }
    let runs: Vec<_> = std::fs::read_dir(dir.path().join("lab03"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    let results = measure::read_results(&runs[0].join("results.json")).unwrap();
    let loss = results
        .figures
        .iter()
        .find(|f| f.name == "loss-vs-time")
        .expect("the loss figure");
    assert_eq!(loss.series.len(), 3, "{loss:?}");
    assert!(loss.series.iter().all(|s| !s.points.is_empty()), "{loss:?}");
    let acc = results
        .figures
        .iter()
        .find(|f| f.name == "test-accuracy")
        .expect("the accuracy figure");
    // Better than chance (10%) after 6,000 images, for every worker count.
    assert!(acc.series[0].points.iter().all(|p| p[1] > 50.0), "{acc:?}");
    for chart in [
        "loss-vs-time.svg",
        "loss-vs-time.png",
        "test-accuracy.svg",
        "test-accuracy.png",
    ] {
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
        start.elapsed() < Duration::from_secs(15),
        "took {:?}",
        start.elapsed()
    );
    assert!(text.contains("TODO(lab 03): fill"), "{text}");
}
