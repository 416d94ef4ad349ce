//! The lab's program as a learner runs it: plainly, spawning its own ranks.

use labkit::testing::{quick_run, starter_fails};

const LAB: &str = env!("CARGO_BIN_EXE_lab01-first-allreduce");

/// The reference solution's quick run checks itself, times both versions and
/// writes its results file and charts.
#[test]
fn quick_run_with_the_solution_writes_results_and_charts() {
    let run = quick_run(LAB, 1, &["--nproc", "3"]);
    assert!(
        run.stdout.contains("by hand and all_reduce agree"),
        "{}",
        run.stdout
    );
    let records = &run.results.records;
    let labels = run.labels();
    assert_eq!(labels.len(), 2, "{labels:?}");
    assert!(records.iter().all(|r| r.world == 3 && r.median_us > 0.0));
    run.assert_charts(&["latency-all_reduce"]);
}

/// The lab system's promise: the unsolved starter fails fast with an error
/// naming the TODO, never a hang.
#[test]
fn the_unsolved_starter_fails_fast_naming_the_todo() {
    let text = starter_fails(
        LAB,
        1,
        "all_reduce_by_hand",
        &["--nproc", "3", "--timeout", "20"],
    );
    // Every rank fails the same way; the launcher stops the others after the
    // first, so at least one rank's line must be there, naming the TODO.
    assert!(
        text.lines()
            .any(|l| l.contains("] rank ") && l.contains("TODO(lab 01): all_reduce_by_hand")),
        "{text}"
    );
}
