//! The MPI backend's own cases: the quick conformance suite under a real
//! `mpirun` at world 4 and without `MPI_IN_PLACE`, as a singleton without a
//! launcher, and the error when ringside's own spawning is mixed with MPI. The
//! full suite under `mpirun` at worlds 1-3 is a row of `conformance.rs`.
//!
//! `mpirun` comes with the project's set-up (openmpi-bin), so a missing one is
//! a failure, not a skip. The binary must be built with the `mpi` feature.

mod common;

use std::process::{Command, Output};
use std::time::Duration;

use common::conformance::{Job, Launch, Turns, take_turn};

/// `ringside` with a clean launcher environment (no inherited RANK & co.).
fn ringside(cmd: &mut Command) -> &mut Command {
    common::clean_launch_env(cmd)
}

fn run(cmd: &mut Command, limit: Duration) -> (Output, String, String) {
    // MPI ranks busy-poll: this job takes its turn with the suite's.
    let _turn = take_turn();
    let child = cmd.spawn().unwrap_or_else(|e| {
        panic!("could not start {cmd:?}: {e} (mpirun comes from openmpi-bin, see the set-up)")
    });
    let (out, _) = common::finish(child, limit);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !stderr.contains("not compiled in"),
        "this ringside was built without the mpi backend; build with \
         `--features collectives/mpi`:\n{stderr}"
    );
    (out, stdout, stderr)
}

/// The quick suite under `mpirun` at `world`, with `env` forwarded to every rank.
fn quick_under_mpirun(world: usize, env: &[(&str, &str)]) {
    Job {
        quick: true,
        env,
        ..Job::full("mpi", "auto", world, Launch::Mpirun, Turns::InTurn)
    }
    .passes();
}

#[test]
fn quick_conformance_under_mpirun_world_4() {
    quick_under_mpirun(4, &[]);
}

/// The stand-in for libraries whose `MPI_IN_PLACE` we do not know (copies of
/// the input instead), exercised on OpenMPI.
#[test]
fn quick_conformance_without_mpi_in_place_world_3() {
    quick_under_mpirun(3, &[("RINGSIDE_MPI_NO_IN_PLACE", "1")]);
}

/// Without a launcher, MPI starts as a singleton world of one.
#[test]
fn runs_as_an_mpi_singleton_without_a_launcher() {
    Job {
        quick: true,
        ..Job::full("mpi", "auto", 1, Launch::Ringside, Turns::InTurn)
    }
    .passes();
}

/// Ranks spawned by ringside itself are separate MPI worlds of one: connect
/// must say so instead of running collectives that can never complete.
#[test]
fn ringside_spawned_ranks_are_told_mpi_disagrees() {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ringside"));
    cmd.args(["conformance", "--backend", "mpi", "--nproc", "2", "--quick"]);
    let (out, stdout, stderr) = run(ringside(&mut cmd), Duration::from_secs(120));
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("MPI says this process is rank 0 of 1")
            && stderr.contains("do not mix launchers"),
        "{stderr}"
    );
}

/// One rank frozen by SIGSTOP under mpirun hung the job forever, while `--help`
/// promised "seconds any single wait may take": the watchdog now reports the waiting
/// call on the live rank and ends the job with MPI_Abort.
#[test]
fn frozen_rank_under_mpirun_aborts_the_job_after_the_timeout() {
    frozen_rank_aborts("multiple");
}

/// At `single` OpenMPI takes no locks, and the watchdog's `MPI_Abort` comes from
/// a thread of its own: the job must still end.
#[test]
fn frozen_rank_aborts_the_job_at_thread_level_single() {
    frozen_rank_aborts("single");
}

/// Every collective at `single`, where ringside holds no lock of its own either.
#[test]
fn quick_conformance_at_thread_level_single_world_2() {
    quick_under_mpirun(2, &[("RINGSIDE_MPI_THREAD_LEVEL", "single")]);
}

/// Rank 1 of a 2-rank bench under mpirun is frozen by SIGSTOP at MPI thread
/// level `level`; the other must report and end the job within the timeout.
fn frozen_rank_aborts(level: &str) {
    frozen_rank_aborts_in(level, "bench --backend mpi -b 1M -e 1M -n 1000000 -w 1");
}

/// `sweep --beside-bare` times OpenMPI's call bare, outside ringside's call
/// path: a frozen peer must still end the job at the timeout, whichever of
/// the two calls the other rank is waiting in.
#[test]
fn frozen_rank_aborts_a_sweep_beside_the_bare_call() {
    frozen_rank_aborts_in(
        "single",
        "sweep --backend mpi --beside-bare -b 8 -e 8 -n 100000000 -w 1",
    );
}

/// Rank 1 of `ringside ARGS --timeout 3` under mpirun is frozen by SIGSTOP
/// after a second, at MPI thread level `level`.
fn frozen_rank_aborts_in(level: &str, args: &str) {
    let bin = env!("CARGO_BIN_EXE_ringside");
    // Rank 1 runs ringside in the background and stops it after a second, in
    // the middle of its iterations.
    let script = format!(
        "{bin} {args} --timeout 3 & pid=$!; \
         if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then sleep 1; kill -STOP $pid; fi; wait $pid"
    );
    let mut cmd = Command::new("mpirun");
    cmd.args(["--allow-run-as-root", "--oversubscribe", "-np", "2"])
        .args(["-x", "MASTER_PORT", "-x", "RUST_BACKTRACE"])
        .args(["-x", "RINGSIDE_MPI_THREAD_LEVEL"])
        .env("RUST_BACKTRACE", "0")
        .env("RINGSIDE_MPI_THREAD_LEVEL", level)
        .args(["sh", "-c", &script]);
    let started = std::time::Instant::now();
    let (out, stdout, stderr) = run(ringside(&mut cmd), Duration::from_secs(90));
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("past the timeout of 3.0 s") && stderr.contains("MPI_Abort"),
        "{stderr}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );
}

/// The parent of process `pid` (field 4 of its stat), if it still runs.
fn parent_of(pid: u32) -> Option<u32> {
    collectives::testing::proc_stat_field(&format!("/proc/{pid}/stat"), 4)?
        .parse()
        .ok()
}

/// The busy loops of `--load` running now below process `root`.
fn loops_below(root: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c == b"sh\0-c\0while :; do :; done\0")
        })
        .filter(|&pid| {
            let mut p = pid;
            for _ in 0..8 {
                match parent_of(p) {
                    Some(q) if q == root => return true,
                    Some(q) if q > 1 => p = q,
                    _ => return false,
                }
            }
            false
        })
        .collect()
}

/// `cargo xtask tour --load 2` runs the tour under mpirun, where no rank
/// started the busy loops: it timed an idle machine and said two loops ran
/// beside it (and `bench --load` under mpirun refused to run). Now the first
/// rank on the host starts them: exactly two, once.
#[test]
fn load_under_mpirun_runs_its_loops_once_per_host() {
    let _turn = take_turn();
    let mut cmd = Command::new("mpirun");
    cmd.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "--bind-to",
        "none",
    ])
    .args(["-np", "2", "-x", "MASTER_PORT"])
    .arg(env!("CARGO_BIN_EXE_ringside"))
    .args(["bench", "--backend", "reference-tcp", "--load", "2"])
    .args(["-b", "4", "-e", "4M", "-n", "200"]);
    let child = ringside(&mut cmd)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("mpirun comes from openmpi-bin, see the set-up");
    let root = child.id();
    let watcher = std::thread::spawn(move || {
        let mut seen = std::collections::BTreeSet::new();
        let mut most = 0;
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while std::time::Instant::now() < deadline {
            let now = loops_below(root);
            most = most.max(now.len());
            seen.extend(now);
            if parent_of(root).is_none() {
                break; // mpirun has ended (or is a zombie: no stat parse needed)
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        (seen, most)
    });
    let (out, _) = common::finish(child, Duration::from_secs(120));
    let (seen, most) = watcher.join().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("--load 2: 2 busy loops"), "{stdout}");
    assert_eq!(
        (seen.len(), most),
        (2, 2),
        "busy loops seen below mpirun: {seen:?}\n{stdout}\n{stderr}"
    );
}

/// `sweep --beside-bare` times OpenMPI's `MPI_Allreduce` called bare in
/// ringside's own processes, in turn with ringside's call: per size, one
/// checked record of each, under the names the `peers` runner files them by
/// (`mpi-bare`, `ringside-mpi-beside`).
#[test]
fn sweep_beside_bare_prints_both_calls_checked() {
    let mut cmd = Command::new("mpirun");
    cmd.args(["--allow-run-as-root", "--oversubscribe", "-np", "2"])
        .args(["-x", "MASTER_PORT"])
        .arg(env!("CARGO_BIN_EXE_ringside"))
        .args(["sweep", "--backend", "mpi", "--beside-bare", "--jsonl"])
        .args(["-b", "8", "-e", "64", "-n", "200", "--timeout", "30"]);
    let (out, stdout, stderr) = run(ringside(&mut cmd), Duration::from_secs(90));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let records: Vec<measure::Record> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    for bytes in [8, 16, 32, 64] {
        for label in ["ringside-mpi-beside", "mpi-bare"] {
            let of: Vec<_> = records
                .iter()
                .filter(|r| r.bytes == bytes && r.label == label)
                .collect();
            assert_eq!(of.len(), 1, "{label} at {bytes} B:\n{stdout}");
            let r = of[0];
            assert_eq!((r.wrong, r.iters, r.world), (0, 200, 2), "{r:?}");
            assert!(r.median_us > 0.0 && r.min_us <= r.median_us, "{r:?}");
        }
    }
}

/// Only MPI has a bare call to time beside ringside's: another backend is
/// refused before any rank starts, naming the flag it needs.
#[test]
fn beside_bare_needs_the_mpi_backend() {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ringside"));
    cmd.args(["sweep", "--nproc", "2", "--beside-bare", "-e", "8"])
        .env("RUST_BACKTRACE", "0");
    let (out, stdout, stderr) = run(ringside(&mut cmd), Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("--beside-bare") && stderr.contains("needs --backend mpi"),
        "{stderr}"
    );
}
