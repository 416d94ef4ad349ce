//! The lab's program as a learner runs it.

use labkit::testing::{quick_run, starter_fails};

const LAB: &str = env!("CARGO_BIN_EXE_lab11-consistency-models");

/// The reference solution's quick run trains the four models without and
/// with a straggler and draws its three figures.
#[test]
fn quick_run_with_the_solution_trains_every_model_and_draws() {
    let run = quick_run(LAB, 11, &[]);
    for fig in ["accuracy-no-straggler", "accuracy-with-straggler"] {
        let f = run
            .results
            .figures
            .iter()
            .find(|f| f.name == fig)
            .expect(fig);
        assert_eq!(f.series.len(), 4, "{f:?}");
    }
    run.assert_figures(&[
        "accuracy-no-straggler",
        "accuracy-with-straggler",
        "wall-time",
    ]);
}

/// The lab system's promise: the unsolved starter fails fast with an error
/// naming the TODO, never a hang.
#[test]
fn the_unsolved_starter_fails_fast_naming_the_todo() {
    starter_fails(LAB, 11, "the staleness bound", &[]);
}
