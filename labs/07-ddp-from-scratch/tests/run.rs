//! The lab's program as a learner runs it.

use labkit::testing::{quick_run, starter_fails};

const LAB: &str = env!("CARGO_BIN_EXE_lab07-ddp-from-scratch");

/// The reference solution's quick run trains every configuration on 1 and 2
/// ranks, writes the overlapped step's trace and draws its three figures.
#[test]
fn quick_run_with_the_solution_measures_every_step_and_draws() {
    let run = quick_run(LAB, 7, &[]);
    let throughput = run
        .results
        .figures
        .iter()
        .find(|f| f.name == "throughput")
        .expect("no throughput figure");
    // Three steps and trainers' Ddp (PyTorch is left out of --quick), each on
    // 1 and 2 ranks, each a positive rate.
    assert_eq!(throughput.series.len(), 4, "{throughput:?}");
    assert!(
        throughput
            .series
            .iter()
            .all(|s| s.points.len() == 2 && s.points.iter().all(|p| p[1] > 0.0))
    );
    assert!(
        run.stdout
            .contains("PyTorch DDP: skipped, not in a --quick run"),
        "{}",
        run.stdout
    );
    assert!(run.dir.join("trace-overlapped.json").is_file());
    run.assert_figures(&["throughput", "exposed-communication", "bucket-sweep"]);
}

/// The lab system's promise: the unsolved starter fails fast with an error
/// naming the TODO, never a hang.
#[test]
fn the_unsolved_starter_fails_fast_naming_the_todo() {
    starter_fails(LAB, 7, "step 1: broadcast", &[]);
}
