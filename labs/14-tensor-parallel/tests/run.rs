//! The lab's program as a learner runs it.

use labkit::testing::{quick_run, starter_fails};

const LAB: &str = env!("CARGO_BIN_EXE_lab14-tensor-parallel");

/// The reference solution's quick run checks 2–4 ranks, measures both splits
/// at two batches on 2 ranks, and draws its three figures; tensor
/// parallelism's bytes grow with the batch, data parallelism's do not.
#[test]
fn quick_run_with_the_solution_measures_both_splits_and_draws() {
    let run = quick_run(LAB, 14, &[]);
    assert!(
        run.stdout.contains("4 ranks: first logits within"),
        "{}",
        run.stdout
    );
    let bytes = run
        .results
        .figures
        .iter()
        .find(|f| f.name == "bytes-per-step")
        .expect("no bytes figure");
    assert_eq!(bytes.series.len(), 2, "{bytes:?}");
    for s in &bytes.series {
        let (small, large) = (s.points[0][1], s.points[1][1]);
        if s.name.starts_with("tensor") {
            // 32 → 128 images: four times the activations all-reduced.
            assert_eq!(large, 4.0 * small, "{s:?}");
        } else {
            assert_eq!(large, small, "{s:?}");
        }
    }
    run.assert_figures(&["bytes-per-step", "step-time", "memory-per-rank"]);
}

/// The lab system's promise: the unsolved starter fails fast with an error
/// naming the TODO, never a hang.
#[test]
fn the_unsolved_starter_fails_fast_naming_the_todo() {
    starter_fails(LAB, 14, "the row-parallel forward", &[]);
}
