//! The lab's program as a learner runs it.

use labkit::testing::{quick_run, starter_fails};

const LAB: &str = env!("CARGO_BIN_EXE_lab12-ddp-recipes");

/// The reference solution's quick run trains local BN, local BN with the
/// buffer broadcast and SyncBN on 4 ranks, runs the save/barrier/load recipe
/// and the one-device inference, checkpoints both ways with PyTorch, and draws
/// its four figures; rank 0's metrics of the SyncBN run are in the folder. SyncBN's ranks
/// keep identical running statistics; local BN's do not.
#[test]
fn quick_run_with_the_solution_trains_each_bn_mode_and_draws() {
    let run = quick_run(LAB, 12, &[]);
    assert!(
        run.stdout
            .contains("all 4 ranks hold rank 0's weights to the bit"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("(the same: yes)"), "{}", run.stdout);
    // Exact by construction on any CPU: the resumed and the uninterrupted run
    // are in one process, one libtorch thread each, the same ops in the same
    // order on the same shapes (the reductions follow the communicator's fixed
    // ring order), so only a lost piece of state could make them differ.
    assert!(run.stdout.contains("(bit-identical)"), "{}", run.stdout);
    // Both directions of the PyTorch interop (the test suite's set-up makes
    // the venv; without it the lab says "skipped" and this fails).
    assert_eq!(
        run.stdout.matches(": the same").count(),
        2,
        "{}",
        run.stdout
    );
    let spread = run
        .results
        .figures
        .iter()
        .find(|f| f.name == "running-mean-spread")
        .expect("no spread figure");
    let last = |name: &str| {
        let s = spread
            .series
            .iter()
            .find(|s| s.name.starts_with(name))
            .expect(name);
        s.points.last().unwrap()[1]
    };
    assert!(last("local BN") > 0.0, "{spread:?}");
    assert_eq!(last("SyncBN"), 0.0, "{spread:?}");
    assert!(run.dir.join("metrics.jsonl").is_file());
    run.assert_figures(&[
        "running-mean-spread",
        "test-accuracy",
        "inference",
        "training-loss",
    ]);
}

/// The lab system's promise: the unsolved starter fails fast with an error
/// naming the TODO, never a hang.
#[test]
fn the_unsolved_starter_fails_fast_naming_the_todo() {
    starter_fails(LAB, 12, "SyncBatchNorm's statistics", &[]);
}
