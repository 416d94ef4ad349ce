//! The lab's program as a learner runs it.

use labkit::testing::{quick_run, starter_fails};

const LAB: &str = env!("CARGO_BIN_EXE_lab10-scaling-the-batch");

/// The reference solution's quick run trains three configurations (B=64 on
/// one rank; B=256 on two ranks with accumulation, as f32 and as fp16) and
/// draws its three figures.
#[test]
fn quick_run_with_the_solution_trains_each_configuration_and_draws() {
    let run = quick_run(LAB, 10, &[]);
    let curves = run
        .results
        .figures
        .iter()
        .find(|f| f.name == "accuracy-vs-time")
        .expect("no accuracy figure");
    assert_eq!(curves.series.len(), 3, "{curves:?}");
    for s in &curves.series {
        // From the untrained start to better than chance after 6,144 samples.
        let (first, last) = (s.points[0][1], s.points.last().unwrap()[1]);
        assert!(s.points.len() >= 2 && last > first && last > 0.5, "{s:?}");
    }
    assert!(run.stdout.contains("fp16: "), "{}", run.stdout);
    run.assert_figures(&["accuracy-vs-time", "time-to-target", "compression"]);
}

/// The lab system's promise: the unsolved starter fails fast with an error
/// naming the TODO, never a hang.
#[test]
fn the_unsolved_starter_fails_fast_naming_the_todo() {
    starter_fails(LAB, 10, "the compression hook", &[]);
}
