//! The lab's program as a learner runs it.

use labkit::testing::{quick_run, starter_fails};

const LAB: &str = env!("CARGO_BIN_EXE_lab05-model-parallel");

/// The reference solution's quick run trains with both schedules, says where the
/// stages run, and writes its results file and both charts.
#[test]
fn quick_run_with_the_solution_writes_results_and_charts() {
    let run = quick_run(LAB, 5, &[]);
    let stdout = &run.stdout;
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
    run.assert_figures(&["bubble", "step-time"]);
}

/// The lab system's promise: the unsolved starter fails at once with an error
/// naming the TODO, before loading any data.
#[test]
fn the_unsolved_starter_fails_fast_naming_the_todo() {
    starter_fails(LAB, 5, "naive", &[]);
}
