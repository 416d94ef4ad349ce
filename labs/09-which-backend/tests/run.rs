//! The lab's program as a learner runs it (quick: no mpirun, so MPI is left out
//! with its reason).

use labkit::testing::{quick_run, starter_fails};

const LAB: &str = env!("CARGO_BIN_EXE_lab09-which-backend");

/// The solution's quick run measures every collective and DDP with the
/// reference backend (shm and tcp) and Gloo, and writes the table and charts.
#[test]
fn quick_run_with_the_solution_writes_the_decision_table() {
    let run = quick_run(LAB, 9, &[]);
    let labels = run.labels();
    assert_eq!(
        labels.into_iter().collect::<Vec<_>>(),
        ["gloo", "reference-shm", "reference-tcp"]
    );
    // Every collective, for each of the three.
    assert_eq!(
        run.results
            .records
            .iter()
            .map(|r| r.collective)
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        10
    );
    assert!(
        run.stdout.contains("mpi: skipped, needs an MPI launcher"),
        "{}",
        run.stdout
    );
    let table = std::fs::read_to_string(run.dir.join("table.md")).unwrap();
    for row in [
        "CPU tensors, ≤ 64 KiB",
        "DDP training, CPU",
        "GPU tensors",
        "across hosts",
    ] {
        assert!(table.contains(row), "{table}");
    }
    assert!(run.dir.join("table.json").is_file());
    run.assert_figures(&["all_reduce-relative", "ddp-throughput"]);
}

/// The lab system's promise: the unsolved starter fails fast with an error
/// naming the TODO, before measuring anything.
#[test]
fn the_unsolved_starter_fails_fast_naming_the_todo() {
    starter_fails(LAB, 9, "guesses", &[]);
}
