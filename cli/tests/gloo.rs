//! The Gloo backend as real processes: the full conformance matrix at worlds 1-3
//! with Gloo's default all_reduce, and the quick matrix with each other
//! all_reduce algorithm (`RINGSIDE_GLOO_ALGO`).
//!
//! The binary must be built with the `gloo` feature (`--features
//! collectives/gloo`): a ringside without it fails these tests rather than
//! skipping them.

mod common;

use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

const RINGSIDE: &str = env!("CARGO_BIN_EXE_ringside");

/// Several multi-rank jobs at once on a small machine only slow each other down.
static ONE_JOB_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs the suite on `world` ranks and asserts every rank reports `cases`
/// cases, no failures, and `unsupported` declined ones.
fn conformance(world: usize, algo: &str, quick: bool, cases: usize, unsupported: usize) {
    let _turn = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut cmd = Command::new(RINGSIDE);
    cmd.args([
        "conformance",
        "--backend",
        "gloo",
        "--nproc",
        &world.to_string(),
        "--timeout",
        "60",
    ]);
    if quick {
        cmd.arg("--quick");
    }
    for var in ["RANK", "WORLD_SIZE", "LOCAL_RANK", "RINGSIDE_JOB_TOKEN"] {
        cmd.env_remove(var);
    }
    let child = cmd
        .env("RINGSIDE_GLOO_ALGO", algo)
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (out, _) = common::finish(child, Duration::from_secs(240));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("not compiled in"),
        "this ringside was built without the gloo backend; build with \
         `--features collectives/gloo`:\n{stderr}"
    );
    assert!(
        out.status.success(),
        "gloo ({algo}) at world {world} failed:\n{stdout}\n{stderr}"
    );
    for rank in 0..world {
        let want = format!(
            "rank {rank}/{world}: gloo backend (auto transport, auto algo): \
             {cases} cases ({unsupported} unsupported), 0 failed"
        );
        assert!(
            stdout.lines().any(|l| l == want),
            "expected {want:?}:\n{stdout}\n{stderr}"
        );
    }
}

#[test]
fn full_matrix_world_1() {
    conformance(1, "default", false, 1723, 0);
}
#[test]
fn full_matrix_world_2() {
    conformance(2, "default", false, 1723, 0);
}
#[test]
fn full_matrix_world_3() {
    conformance(3, "default", false, 1723, 0);
}

#[test]
fn ring_world_3() {
    conformance(3, "ring", true, 349, 0);
}
#[test]
fn bcube_world_3() {
    conformance(3, "bcube", true, 349, 0);
}
/// The classic algorithm objects pass the quick matrix only: with the full
/// one (4 MiB cases), a later collective hangs (see the module docs of
/// `collectives::backends::gloo`).
#[test]
fn classic_ring_chunked_world_3() {
    conformance(3, "ring_chunked", true, 349, 0);
}
#[test]
fn classic_halving_doubling_world_3() {
    conformance(3, "halving_doubling", true, 349, 0);
}
