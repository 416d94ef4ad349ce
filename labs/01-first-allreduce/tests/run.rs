//! The lab runs as a user runs it: plainly, spawning its own ranks.

use std::process::Command;

#[test]
fn three_ranks_agree_on_the_sum() {
    let out = Command::new(env!("CARGO_BIN_EXE_lab01-first-allreduce"))
        .args(["--nproc", "3"])
        .env_remove("RANK")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for r in 0..3 {
        assert!(
            stdout.contains(&format!(
                "rank {r} of 3: mine = {}, by hand = 6, all_reduce = 6",
                r + 1
            )),
            "{stdout}"
        );
    }
}
