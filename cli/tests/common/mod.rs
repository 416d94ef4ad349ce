//! Helpers shared by the CLI's integration tests (each test file is its own
//! crate and uses a subset, hence the allow).
#![allow(dead_code)]

use std::process::{Child, Output};
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
