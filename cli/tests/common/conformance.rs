//! One `ringside conformance` job and what a clean run prints: the runner
//! behind the backend × transport × world matrix (`cli/tests/conformance.rs`)
//! and the backends' own extra cases (`gloo.rs`, `mpi.rs`).

use std::process::Command;
use std::sync::{RwLock, RwLockWriteGuard};
use std::time::Duration;

/// How a job's ranks start.
#[derive(Clone, Copy, Debug)]
pub enum Launch {
    /// `ringside conformance --nproc N` spawns them.
    Ringside,
    /// `mpirun -np N ringside conformance` does (the MPI backend's launcher).
    Mpirun,
}

/// Whether a job may run beside the others of its test binary.
#[derive(Clone, Copy, Debug)]
pub enum Turns {
    /// Alongside the other `Together` jobs (the reference backend's are light).
    Together,
    /// Alone: Gloo's and MPI's ranks busy-poll, and beside another job on a
    /// small machine both slow down badly (each backend had its own test
    /// binary, run alone, before the matrix took them in).
    InTurn,
}

static JOBS: RwLock<()> = RwLock::new(());

/// Waits until no other job of this binary runs, and keeps them out for as
/// long as the guard lives.
pub fn take_turn() -> RwLockWriteGuard<'static, ()> {
    JOBS.write().unwrap_or_else(|e| e.into_inner())
}

/// Cases in the full suite and in `--quick`'s, every one of which a backend
/// run here must support.
pub const FULL_CASES: usize = 1723;
/// See [`FULL_CASES`].
pub const QUICK_CASES: usize = 349;

/// A `ringside conformance` job on `world` local ranks.
pub struct Job<'a> {
    pub backend: &'a str,
    pub transport: &'a str,
    pub world: usize,
    pub launch: Launch,
    pub turns: Turns,
    /// `--quick`: the small matrix.
    pub quick: bool,
    /// Set for ringside (and, under mpirun, forwarded to every rank).
    pub env: &'a [(&'a str, &'a str)],
}

impl<'a> Job<'a> {
    /// The full suite, with nothing extra.
    pub fn full(
        backend: &'a str,
        transport: &'a str,
        world: usize,
        launch: Launch,
        turns: Turns,
    ) -> Self {
        Job {
            backend,
            transport,
            world,
            launch,
            turns,
            quick: false,
            env: &[],
        }
    }

    /// Runs the job and asserts that every rank reports every case, none
    /// unsupported and none failed.
    pub fn passes(&self) {
        let (backend, transport, world) = (self.backend, self.transport, self.world);
        let (_alone, _together) = match self.turns {
            Turns::InTurn => (Some(take_turn()), None),
            Turns::Together => (None, Some(JOBS.read().unwrap_or_else(|e| e.into_inner()))),
        };
        let ringside = env!("CARGO_BIN_EXE_ringside");
        let mut cmd = match self.launch {
            Launch::Ringside => {
                let mut cmd = Command::new(ringside);
                cmd.args(["conformance", "--nproc", &world.to_string()]);
                cmd
            }
            Launch::Mpirun => {
                let mut cmd = Command::new("mpirun");
                for (k, _) in self.env {
                    cmd.args(["-x", k]);
                }
                cmd.args(["--allow-run-as-root", "--oversubscribe", "-np"])
                    .arg(world.to_string())
                    // Forward the store port chosen in `clean_launch_env` to every rank.
                    .args(["-x", "MASTER_PORT"])
                    .args([ringside, "conformance"]);
                cmd
            }
        };
        cmd.args([
            "--backend",
            backend,
            "--transport",
            transport,
            "--timeout",
            "60",
        ]);
        if self.quick {
            cmd.arg("--quick");
        }
        super::clean_launch_env(&mut cmd).envs(self.env.iter().copied());
        let child = cmd.spawn().unwrap_or_else(|e| {
            panic!("could not start {cmd:?}: {e} (mpirun comes from openmpi-bin, see the set-up)")
        });
        let (out, _) = super::finish(child, Duration::from_secs(240));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.contains("not compiled in"),
            "this ringside was built without the {backend} backend; build with \
             `--features collectives/{backend}`:\n{stderr}"
        );
        assert!(
            out.status.success(),
            "{backend} world {world} over {transport} failed:\n{stdout}\n{stderr}"
        );
        let cases = if self.quick { QUICK_CASES } else { FULL_CASES };
        for rank in 0..world {
            let head = format!("rank {rank}/{world}: {backend} backend ({transport} transport");
            let tail = format!(": {cases} cases (0 unsupported), 0 failed");
            assert!(
                stdout
                    .lines()
                    .any(|l| l.starts_with(&head) && l.ends_with(&tail)),
                "expected a line {head:?}...{tail:?}:\n{stdout}\n{stderr}"
            );
        }
    }
}
