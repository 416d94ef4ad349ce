//! The lab's program as a learner runs it.

use labkit::testing::{quick_run, starter_fails};

const LAB: &str = env!("CARGO_BIN_EXE_lab04-data-parallel");

/// The reference solution's quick run trains on every replica count, shows the
/// checkpoint gotcha and its fix, and writes its results file and chart.
#[test]
fn quick_run_with_the_solution_writes_results_and_charts() {
    let run = quick_run(LAB, 4, &[]);
    for part in [
        "1 CPU replica:",
        "4 CPU replicas:",
        "missing key(s) [`conv1.bias`",
        "unexpected key(s) [`module.conv1.bias`",
        "with the `module.` prefix removed on load it loads",
    ] {
        assert!(
            run.stdout.contains(part),
            "{part:?} not in:\n{}",
            run.stdout
        );
    }
    let fig = &run.results.figures[0];
    assert_eq!(fig.name, "step-time");
    assert!(fig.categories.len() >= 3, "{:?}", fig.categories);
    assert_eq!(fig.problem(), None);
    run.assert_charts(&["step-time"]);
}

/// The lab system's promise: the unsolved starter fails fast with an error naming
/// the TODO, never a hang or a panic.
#[test]
fn the_unsolved_starter_fails_fast_naming_the_todo() {
    starter_fails(LAB, 4, "replicate is not written yet", &[]);
}
