//! Helpers shared by the CLI's integration tests (each test file is its own
//! crate and uses a subset, hence the allow).
#![allow(dead_code)]

pub mod conformance;

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Waits for `child`, killing it and failing the test if it takes longer than `limit`.
pub fn finish(mut child: Child, limit: Duration) -> (Output, Duration) {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            child.kill().unwrap();
            let out = child.wait_with_output().unwrap();
            panic!(
                "still running after {limit:?}; stderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let took = start.elapsed();
    (child.wait_with_output().unwrap(), took)
}

/// Whether `pid` is a live process (zombies count as gone: they run nothing).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => {
            let state = stat
                .rsplit_once(") ")
                .and_then(|(_, rest)| rest.chars().next());
            !matches!(state, Some('Z') | Some('X'))
        }
    }
}

/// A port nobody is listening on, for ringside's rendezvous store (rank 0
/// binds `MASTER_PORT`, 29500 by default, which other jobs may hold).
pub use collectives::launch::free_port;

/// `cmd` with a clean launcher environment (no inherited RANK & co.), a free
/// store port, and piped output.
pub fn clean_launch_env(cmd: &mut Command) -> &mut Command {
    for var in [
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "RINGSIDE_JOB_TOKEN",
        // Backend choices a developer may have exported.
        "RINGSIDE_GLOO_ALGO",
        "RINGSIDE_MPI_NO_IN_PLACE",
        "SLURM_STEP_ID",
        "SLURM_STEPID",
        "PMI_RANK",
        "PMI_SIZE",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("MASTER_PORT", free_port().unwrap().to_string())
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
}
