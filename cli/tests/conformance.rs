//! The full conformance matrix with ranks as real processes, over TCP and over
//! shared memory, at world sizes 1 to 5 (non-powers-of-two included).

use std::process::Command;

const RINGSIDE: &str = env!("CARGO_BIN_EXE_ringside");

fn full_matrix(world: usize, transport: &str) {
    let out = Command::new(RINGSIDE)
        .args([
            "conformance",
            "--nproc",
            &world.to_string(),
            "--transport",
            transport,
            "--timeout",
            "60",
        ])
        .env_remove("RINGSIDE_JOB_TOKEN")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "world {world} over {transport} failed:\n{stdout}\n{stderr}"
    );
    let ok_ranks = stdout
        .lines()
        .filter(|l| {
            l.contains(&format!(
                "/{world}: reference backend ({transport} transport"
            )) && l.ends_with(" 0 failed")
        })
        .count();
    assert_eq!(
        ok_ranks, world,
        "every rank must report 0 failures:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("1723 cases"),
        "the full matrix must run:\n{stdout}"
    );
}

#[test]
fn processes_over_tcp_world_1() {
    full_matrix(1, "tcp");
}
#[test]
fn processes_over_tcp_world_2() {
    full_matrix(2, "tcp");
}
#[test]
fn processes_over_tcp_world_3() {
    full_matrix(3, "tcp");
}
#[test]
fn processes_over_tcp_world_4() {
    full_matrix(4, "tcp");
}
#[test]
fn processes_over_tcp_world_5() {
    full_matrix(5, "tcp");
}
#[test]
fn processes_over_shm_world_1() {
    full_matrix(1, "shm");
}
#[test]
fn processes_over_shm_world_2() {
    full_matrix(2, "shm");
}
#[test]
fn processes_over_shm_world_3() {
    full_matrix(3, "shm");
}
#[test]
fn processes_over_shm_world_4() {
    full_matrix(4, "shm");
}
#[test]
fn processes_over_shm_world_5() {
    full_matrix(5, "shm");
}
