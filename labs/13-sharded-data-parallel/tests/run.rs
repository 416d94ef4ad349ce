//! The lab's program as a learner runs it.

use labkit::testing::{quick_run, starter_fails};

const LAB: &str = env!("CARGO_BIN_EXE_lab13-sharded-data-parallel");

/// The reference solution's quick run checks every stage against DDP, then
/// measures DDP and the three stages on 2 ranks (a child process each) and
/// draws its four figures: the counted state shrinks stage by stage.
#[test]
fn quick_run_with_the_solution_measures_every_stage_and_draws() {
    let run = quick_run(LAB, 13, &[]);
    assert!(
        run.stdout.contains("3 ranks: max |Δ| from DDP"),
        "{}",
        run.stdout
    );
    let memory = run
        .results
        .figures
        .iter()
        .find(|f| f.name == "memory-per-rank")
        .expect("no memory figure");
    assert_eq!(memory.categories.len(), 4, "{memory:?}");
    let totals: Vec<f64> = (0..4)
        .map(|i| memory.series.iter().map(|s| s.points[i][1]).sum())
        .collect();
    assert!(totals.windows(2).all(|w| w[1] < w[0]), "{totals:?}");
    run.assert_figures(&[
        "memory-per-rank",
        "rss-per-rank",
        "bytes-per-step",
        "step-time",
    ]);
}

/// The lab system's promise: the unsolved starter fails fast with an error
/// naming the TODO, never a hang.
#[test]
fn the_unsolved_starter_fails_fast_naming_the_todo() {
    starter_fails(LAB, 13, "the sharded gradient path", &[]);
}
