//! The lab's program as a learner runs it.

use labkit::testing::{quick_run, starter_fails};

const LAB: &str = env!("CARGO_BIN_EXE_lab02-baseline");

/// The reference solution's quick run trains, says where the time goes and
/// writes its results file and both charts.
#[test]
fn quick_run_with_the_solution_writes_results_and_charts() {
    let run = quick_run(LAB, 2, &["--threads", "1"]);
    let stdout = &run.stdout;
    assert!(stdout.contains("the bottleneck is"), "{stdout}");
    // No GPU is never silent: either it trained on cuda:0 or it says why not.
    assert!(
        stdout.contains("cuda:0 skipped: ") || stdout.contains("cuda:0: 30 steps"),
        "{stdout}"
    );
    run.assert_figures(&["phases", "loss"]);
}

/// The unsolved starter fails at once, naming the TODO.
#[test]
fn the_unsolved_starter_fails_fast_naming_the_todo() {
    starter_fails(LAB, 2, "forward_backward", &[]);
}
