//! The lab's program as a learner runs it: plainly, spawning its own ranks.

use labkit::testing::{quick_run, starter_fails};

const LAB: &str = env!("CARGO_BIN_EXE_lab06-collectives-from-scratch");

/// The reference solution's quick run passes conformance on the job's ranks,
/// times every algorithm (and Gloo, which needs no launcher), fits and draws.
#[test]
fn quick_run_with_the_solution_times_every_algorithm_and_draws() {
    let run = quick_run(LAB, 6, &["--nproc", "3"]);
    assert!(
        run.stdout.contains("conformance cases pass"),
        "{}",
        run.stdout
    );
    let labels = run.labels();
    for want in [
        "solution's ring",
        "reference ring",
        "recursive doubling",
        "tree",
        "solution's tree broadcast",
        "reference tree broadcast",
        "gloo",
    ] {
        assert!(labels.contains(want), "no {want:?} in {labels:?}");
    }
    assert!(
        run.results
            .records
            .iter()
            .all(|r| r.world == 3 && r.median_us > 0.0)
    );
    // Without mpirun the MPI row is skipped with the command that adds it.
    assert!(
        run.stdout.contains("mpi: skipped, needs an MPI launcher"),
        "{}",
        run.stdout
    );
    run.assert_figures(&["alpha-beta", "predicted-latency"]);
    run.assert_charts(&["latency-all_reduce", "latency-broadcast"]);
}

/// The lab system's promise: the unsolved starter fails fast with an error
/// naming the TODO, never a hang.
#[test]
fn the_unsolved_starter_fails_fast_naming_the_todo() {
    starter_fails(
        LAB,
        6,
        "reduce_scatter",
        &["--nproc", "3", "--timeout", "20"],
    );
}
