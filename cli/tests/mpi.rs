//! The MPI backend under a real `mpirun`: the full conformance suite at worlds
//! 1-3 (and the quick one at 4), as a singleton without a launcher, and the
//! error when ringside's own spawning is mixed with MPI.
//!
//! `mpirun` comes with the project's set-up (openmpi-bin), so a missing one is
//! a failure, not a skip. The binary must be built with the `mpi` feature.

mod common;

use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::Duration;

/// MPI ranks busy-poll: two jobs at once on a small machine slow each other
/// down badly, so the tests here take turns.
static ONE_JOB_AT_A_TIME: Mutex<()> = Mutex::new(());

/// `ringside` with a clean launcher environment (no inherited RANK & co.).
fn ringside(cmd: &mut Command) -> &mut Command {
    common::clean_launch_env(cmd)
}

fn run(cmd: &mut Command, limit: Duration) -> (Output, String, String) {
    let _turn = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
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

/// Asserts that every rank of `world` reported a clean conformance run.
fn assert_all_passed(world: usize, out: &Output, stdout: &str, stderr: &str) {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    for rank in 0..world {
        let prefix = format!("rank {rank}/{world}: mpi backend");
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&prefix))
            .unwrap_or_else(|| panic!("no report from rank {rank}:\n{stdout}\n{stderr}"));
        assert!(
            line.ends_with(" 0 failed") && line.contains("(0 unsupported)"),
            "{line}\n{stderr}"
        );
    }
}

fn conformance_under_mpirun(world: usize, quick: bool) {
    conformance_under_mpirun_with(world, quick, &[]);
}

/// `env` is set for mpirun and forwarded to every rank.
fn conformance_under_mpirun_with(world: usize, quick: bool, env: &[(&str, &str)]) {
    let mut cmd = Command::new("mpirun");
    for (k, v) in env {
        cmd.env(k, v).args(["-x", k]);
    }
    cmd.args(["--allow-run-as-root", "--oversubscribe", "-np"])
        .arg(world.to_string())
        // Forward the store port chosen in `ringside` to every rank.
        .args(["-x", "MASTER_PORT"])
        .arg(env!("CARGO_BIN_EXE_ringside"))
        .args(["conformance", "--backend", "mpi", "--timeout", "60"]);
    if quick {
        cmd.arg("--quick");
    }
    let (out, stdout, stderr) = run(ringside(&mut cmd), Duration::from_secs(240));
    assert_all_passed(world, &out, &stdout, &stderr);
}

#[test]
fn full_conformance_under_mpirun_world_1() {
    conformance_under_mpirun(1, false);
}

#[test]
fn full_conformance_under_mpirun_world_2() {
    conformance_under_mpirun(2, false);
}

#[test]
fn full_conformance_under_mpirun_world_3() {
    conformance_under_mpirun(3, false);
}

#[test]
fn quick_conformance_under_mpirun_world_4() {
    conformance_under_mpirun(4, true);
}

/// The stand-in for libraries whose `MPI_IN_PLACE` we do not know (copies of
/// the input instead), exercised on OpenMPI.
#[test]
fn quick_conformance_without_mpi_in_place_world_3() {
    conformance_under_mpirun_with(3, true, &[("RINGSIDE_MPI_NO_IN_PLACE", "1")]);
}

/// Without a launcher, MPI starts as a singleton world of one.
#[test]
fn runs_as_an_mpi_singleton_without_a_launcher() {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ringside"));
    cmd.args(["conformance", "--backend", "mpi", "--nproc", "1", "--quick"]);
    let (out, stdout, stderr) = run(ringside(&mut cmd), Duration::from_secs(120));
    assert_all_passed(1, &out, &stdout, &stderr);
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
