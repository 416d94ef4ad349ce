//! The lab's program as a learner runs it: it starts its own worker processes.

use labkit::testing::{quick_run, starter_fails};

const LAB: &str = env!("CARGO_BIN_EXE_lab03-hogwild");

/// The reference solution's quick run trains with 1, 2 and 4 workers and writes its
/// results file (both figures, one line per worker count) and charts.
#[test]
fn quick_run_with_the_solution_writes_results_and_charts() {
    let run = quick_run(LAB, 3, &["--sharing", "file-system"]);
    for w in ["1 worker(s)", "2 worker(s)", "4 worker(s)"] {
        assert!(run.stdout.contains(w), "{}", run.stdout);
    }
    let figure = |name: &str| {
        run.results
            .figures
            .iter()
            .find(|f| f.name == name)
            .unwrap_or_else(|| panic!("no {name} figure"))
    };
    let loss = figure("loss-vs-time");
    assert_eq!(loss.series.len(), 3, "{loss:?}");
    assert!(loss.series.iter().all(|s| !s.points.is_empty()), "{loss:?}");
    // Better than chance (10%) after 6,000 images, for every worker count.
    let acc = figure("test-accuracy");
    assert!(acc.series[0].points.iter().all(|p| p[1] > 50.0), "{acc:?}");
    run.assert_charts(&["loss-vs-time", "test-accuracy"]);
}

/// The lab system's promise: the unsolved starter fails fast with an error
/// naming the TODO, never a hang.
#[test]
fn the_unsolved_starter_fails_fast_naming_the_todo() {
    starter_fails(LAB, 3, "fill", &[]);
}
