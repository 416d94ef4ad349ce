//! Hogwild with real worker processes: this test binary re-runs itself with
//! `--exact hogwild_worker`, and that test becomes the worker when
//! `RINGSIDE_HOGWILD_WORKER` is set (in the normal run it does nothing).

use std::path::Path;
use std::time::Duration;

use trainers::hogwild::{self, HogwildConfig, KillWorker, Reference, Sharing, WorkerProgram};

/// The worker's entry point. Run by the parent of the other tests; a no-op otherwise.
#[test]
fn hogwild_worker() {
    if let Some(report) = hogwild::worker_from_env() {
        report.unwrap();
    }
}

fn launcher() -> WorkerProgram {
    WorkerProgram::current_exe_with([
        "hogwild_worker",
        "--exact",
        "--nocapture",
        "--test-threads=1",
        "-q",
    ])
    .unwrap()
}

fn config(sharing: Sharing) -> HogwildConfig {
    HogwildConfig {
        workers: 2,
        steps: 40,
        batch: 16,
        lr: 0.05,
        hidden: vec![32],
        samples: 256,
        sharing,
        timeout: Duration::from_secs(60),
        ..Default::default()
    }
}

fn trains_with_two_processes(sharing: Sharing) {
    tch::set_num_threads(1);
    // The property lab 3's self-check asks of a learner's pieces, on trainers' own.
    let checked = hogwild::check_pieces(&config(sharing), &launcher(), &Reference)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(checked.killed.contains("SIGKILL"), "{checked:?}");
    let report = hogwild::run(&config(sharing), &launcher()).unwrap();
    assert_eq!(report.workers.len(), 2);
    for w in &report.workers {
        // Each worker's step counter lives in the shared region: the parent sees both.
        assert_eq!(w.steps, 40, "{w:?}");
        assert!(w.attached && w.failure.is_none(), "{w:?}");
        assert_ne!(w.pid, std::process::id());
    }
    // The parent never writes the parameters after the start: any change is the
    // workers' SGD writing into the shared pages.
    assert!(report.max_change > 1e-3, "{report:?}");
    assert!(
        report.final_loss < 0.7 * report.initial_loss,
        "loss {} -> {}",
        report.initial_loss,
        report.final_loss
    );
    if let Some(path) = &report.shm_path {
        assert!(!path.exists(), "{} was left behind", path.display());
    }
    // The parent's samples of the workers' slots: every step in the curve, the
    // losses those of real batches.
    let last = report.curve.last().expect("a loss curve");
    assert_eq!(last.steps, 80, "{:?}", report.curve);
    assert!(
        report
            .curve
            .iter()
            .all(|p| p.loss.is_finite() && p.loss > 0.0 && p.seconds > 0.0),
        "{:?}",
        report.curve
    );
    assert!((0.0..=1.0).contains(&report.final_accuracy));
}

#[test]
fn two_processes_train_through_a_passed_file_descriptor() {
    trains_with_two_processes(Sharing::FileDescriptor);
}

#[test]
fn two_processes_train_through_a_named_shm_file() {
    trains_with_two_processes(Sharing::FileSystem);
}

#[test]
fn a_worker_killed_mid_run_is_reported_and_nothing_is_left_in_dev_shm() {
    tch::set_num_threads(1);
    for sharing in [Sharing::FileSystem, Sharing::FileDescriptor] {
        // after_steps 0: dies before attaching (the parent must not wait for it to
        // attach before unlinking); 5: dies mid-training.
        for after_steps in [0, 5] {
            let mut c = config(sharing);
            c.kill_worker = Some(KillWorker {
                rank: 1,
                after_steps,
            });
            let report = hogwild::run_report(&c, &launcher()).unwrap();
            let dead = &report.workers[1];
            assert_eq!(
                dead.failure.as_deref(),
                Some("was killed by signal 9 (SIGKILL)"),
                "{sharing:?} {after_steps}: {dead:?}"
            );
            // Its updates up to its death are in the shared memory.
            assert_eq!(dead.steps, after_steps as u64);
            assert_eq!(dead.attached, after_steps > 0);
            let alive = &report.workers[0];
            assert_eq!((alive.failure.as_deref(), alive.steps), (None, 40));
            let e = report.clone().into_result().unwrap_err().to_string();
            assert!(e.contains("worker 1") && e.contains("SIGKILL"), "{e}");
            if let Some(path) = &report.shm_path {
                assert!(!path.exists(), "{} was left behind", path.display());
            }
        }
    }
}

/// A parent killed before it could unlink leaves its file; the next run removes it
/// because its owner pid is dead, and leaves files of live owners alone.
#[test]
fn stale_files_of_dead_owners_are_removed() {
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = gone.id();
    gone.wait().unwrap();
    let dir = Path::new(hogwild::SHM_DIR);
    let stale = dir.join(format!("{}{dead_pid}-7", hogwild::SHM_PREFIX));
    let live = dir.join(format!(
        "{}{}-999999",
        hogwild::SHM_PREFIX,
        std::process::id()
    ));
    std::fs::write(&stale, b"left by a killed parent").unwrap();
    std::fs::write(&live, b"in use").unwrap();
    let removed = hogwild::remove_stale_shm().unwrap();
    let live_kept = live.exists();
    std::fs::remove_file(&live).unwrap();
    assert!(removed.contains(&stale), "{removed:?}");
    assert!(!stale.exists());
    assert!(live_kept, "a live owner's file was removed");
}

#[test]
fn a_program_that_is_not_a_worker_fails_clearly() {
    // `false` ignores the environment and fails without attaching.
    let l = WorkerProgram {
        program: "false".into(),
        args: vec![],
    };
    let e = hogwild::run(&config(Sharing::FileSystem), &l)
        .unwrap_err()
        .to_string();
    assert!(e.contains("exited with code 1"), "{e}");
}

/// Workers that cannot finish in time are killed and reported, not waited for.
#[test]
fn workers_past_the_timeout_are_killed_and_reported() {
    let mut c = config(Sharing::FileSystem);
    c.steps = 1_000_000;
    c.timeout = Duration::from_millis(1500);
    let clock = std::time::Instant::now();
    let report = hogwild::run_report(&c, &launcher()).unwrap();
    assert!(
        clock.elapsed() < Duration::from_secs(20),
        "{:?}",
        clock.elapsed()
    );
    for w in &report.workers {
        assert_eq!(
            w.failure.as_deref(),
            Some("did not finish in time and was killed"),
            "{w:?}"
        );
    }
    if let Some(path) = &report.shm_path {
        assert!(!path.exists(), "{} was left behind", path.display());
    }
}

/// Local SGD (`local_steps` = 5): each worker trains a private copy and adds its
/// delta into the shared parameters every 5 steps; both workers' deltas land, so the
/// shared model trains as Hogwild's does.
#[test]
fn local_steps_push_deltas_that_train_the_shared_model() {
    tch::set_num_threads(1);
    let config = HogwildConfig {
        local_steps: 5,
        ..config(Sharing::FileDescriptor)
    };
    let report = hogwild::run(&config, &launcher()).unwrap();
    for w in &report.workers {
        assert_eq!(w.steps, 40, "{w:?}");
        assert!(w.attached && w.failure.is_none(), "{w:?}");
    }
    assert!(
        report.final_loss < 0.7 * report.initial_loss,
        "loss {} -> {}",
        report.initial_loss,
        report.final_loss
    );
}
