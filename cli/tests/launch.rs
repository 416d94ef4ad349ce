//! `ringside launch` end to end: real processes, `sh -c` ranks.

mod common;

use common::{alive, finish};

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const RINGSIDE: &str = env!("CARGO_BIN_EXE_ringside");

/// `ringside launch ARGS`, with `RS_DIR` pointing at `dir` for the ranks.
fn launcher(dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(RINGSIDE);
    c.arg("launch")
        .args(args)
        .env("RS_DIR", dir)
        .env_remove("RINGSIDE_JOB_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The pids the ranks wrote to `*.pid` files in `dir`.
fn pids(dir: &Path) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "pid") {
            let text = std::fs::read_to_string(&p).unwrap();
            out.push(text.trim().parse().unwrap());
        }
    }
    out
}

/// Every pid in `pids` is gone within a short time.
fn assert_all_gone(pids: &[u32]) {
    let until = Instant::now() + Duration::from_secs(3);
    loop {
        let left: Vec<u32> = pids.iter().copied().filter(|&p| alive(p)).collect();
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < until, "processes left behind: {left:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until `dir` holds `n` pid files.
fn wait_for_pids(dir: &Path, n: usize) -> Vec<u32> {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        // A file may exist before its pid is written: wait for full lines.
        let ready = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| std::fs::read_to_string(e.unwrap().path()).ok())
            .filter(|t| t.ends_with('\n'))
            .count();
        if ready >= n {
            return pids(dir);
        }
        assert!(Instant::now() < until, "ranks never wrote their pids");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Each rank records its shell's pid and starts a `sleep 60` child whose pid
/// it records too (a grandchild of the launcher), then waits for it.
const SLEEPER: &str =
    r#"echo $$ > "$RS_DIR/sh$RANK.pid"; sleep 60 >/dev/null & echo $! > "$RS_DIR/sleep$RANK.pid";"#;

#[test]
fn all_ranks_succeed_with_distinct_ranks_and_the_given_token() {
    let dir = tempfile::tempdir().unwrap();
    let token = "0123456789abcdef0123456789abcdef";
    let child = launcher(
        dir.path(),
        &[
            "--nproc-per-node",
            "3",
            "--token",
            token,
            "--",
            "sh",
            "-c",
            r#"echo "$RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $MASTER_ADDR $RINGSIDE_JOB_TOKEN" > "$RS_DIR/rank$RANK"; echo "rank $RANK says hi" >&2"#,
        ],
    )
    .spawn()
    .unwrap();
    let (out, _) = finish(child, Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let mut seen = Vec::new();
    for r in 0..3 {
        let line = std::fs::read_to_string(dir.path().join(format!("rank{r}"))).unwrap();
        assert_eq!(line.trim(), format!("{r} {r} 3 3 127.0.0.1 {token}"));
        seen.push(line);
    }
    seen.dedup();
    assert_eq!(seen.len(), 3);
    let err = stderr(&out);
    for r in 0..3 {
        assert!(
            err.contains(&format!("[rank {r}] rank {r} says hi")),
            "{err}"
        );
    }
}

#[test]
fn a_rank_killed_by_sigkill_stops_the_job_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    // Rank 1 waits until every rank (and its sleeper) is up, then kills itself.
    let script = format!(
        r#"{SLEEPER}
        if [ "$RANK" = 1 ]; then
            while [ "$(ls "$RS_DIR" | wc -l)" -lt 6 ]; do sleep 0.05; done
            echo "rank 1 going down" >&2
            kill -9 $$
        fi
        wait"#
    );
    let start = Instant::now();
    let child = launcher(
        dir.path(),
        &["--nproc-per-node", "3", "--", "sh", "-c", &script],
    )
    .spawn()
    .unwrap();
    let (out, _) = finish(child, Duration::from_secs(20));
    let took = start.elapsed();
    let err = stderr(&out);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert_eq!(out.status.code(), Some(128 + 9), "{err}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert!(
        err.contains("rank 1 (pid") && err.contains("was killed by signal 9 (SIGKILL)"),
        "{err}"
    );
    assert!(err.contains("| rank 1 going down"), "{err}");
    let pids = pids(dir.path());
    assert_eq!(pids.len(), 6);
    assert_all_gone(&pids);
}

#[test]
fn a_rank_exiting_with_3_makes_the_launcher_exit_3_and_shows_its_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"echo "rank $RANK starting" >&2
        if [ "$RANK" = 1 ]; then echo "rank 1: something broke" >&2; exit 3; fi
        exec sleep 60"#;
    let start = Instant::now();
    let child = launcher(
        dir.path(),
        &["--nproc-per-node", "2", "--", "sh", "-c", script],
    )
    .spawn()
    .unwrap();
    let (out, _) = finish(child, Duration::from_secs(20));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(start.elapsed() < Duration::from_secs(10));
    assert!(err.contains("exited with code 3"), "{err}");
    assert!(err.contains("last 2 stderr lines of rank 1"), "{err}");
    assert!(err.contains("  | rank 1: something broke"), "{err}");
    assert!(err.contains("stopped ranks: 0 (SIGTERM)"), "{err}");
}

#[test]
fn sigint_to_the_launcher_stops_every_rank_with_code_130() {
    let dir = tempfile::tempdir().unwrap();
    let script = format!("{SLEEPER} wait");
    let child = launcher(
        dir.path(),
        &["--nproc-per-node", "2", "--", "sh", "-c", &script],
    )
    .spawn()
    .unwrap();
    let pids = wait_for_pids(dir.path(), 4);
    // SAFETY: plain kill(2) on the launcher we started.
    assert_eq!(
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) },
        0
    );
    let (out, took) = finish(child, Duration::from_secs(20));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert!(err.contains("interrupted by SIGINT"), "{err}");
    assert_all_gone(&pids);
}

#[test]
fn a_rank_that_ignores_sigterm_is_killed_after_the_grace_period() {
    let dir = tempfile::tempdir().unwrap();
    let script = format!(
        r#"trap '' TERM; {SLEEPER}
        if [ "$RANK" = 1 ]; then
            while [ "$(ls "$RS_DIR" | wc -l)" -lt 4 ]; do sleep 0.05; done
            exit 2
        fi
        wait"#
    );
    let start = Instant::now();
    let child = launcher(
        dir.path(),
        &[
            "--nproc-per-node",
            "2",
            "--grace-secs",
            "0.5",
            "--",
            "sh",
            "-c",
            &script,
        ],
    )
    .spawn()
    .unwrap();
    let (out, _) = finish(child, Duration::from_secs(20));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(start.elapsed() < Duration::from_secs(8));
    assert!(err.contains("stopped ranks: 0 (SIGKILL)"), "{err}");
    assert_all_gone(&pids(dir.path()));
}

#[test]
fn multi_node_without_a_token_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = launcher(
        dir.path(),
        &["--nproc-per-node", "1", "--nnodes", "2", "--", "true"],
    )
    .output()
    .unwrap();
    assert_ne!(out.status.code(), Some(0));
    let err = stderr(&out);
    assert!(err.contains("same job token"), "{err}");
}

#[test]
fn a_malformed_token_is_refused_without_echoing_it() {
    let dir = tempfile::tempdir().unwrap();
    let bad = "not-a-token-but-maybe-secret";
    let out = launcher(
        dir.path(),
        &["--nproc-per-node", "1", "--token", bad, "--", "true"],
    )
    .output()
    .unwrap();
    assert_ne!(out.status.code(), Some(0));
    let err = stderr(&out);
    assert!(err.contains("32 hex digits") && !err.contains(bad), "{err}");
}

#[test]
fn a_missing_program_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = launcher(
        dir.path(),
        &["--nproc-per-node", "2", "--", "/nonexistent/ringside-prog"],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("cannot start rank 0"), "{err}");
}

/// The help's example once named a `lab03` binary that did not exist: the program
/// it names must be a workspace package's, and take the flag the example passes.
#[test]
fn launch_help_example_names_a_real_program_and_flag() {
    let out = Command::new(RINGSIDE)
        .args(["launch", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    let line = help
        .lines()
        .find(|l| l.contains("./target/release/"))
        .unwrap_or_else(|| panic!("no example in:\n{help}"));
    let mut words = line.split_whitespace();
    let program = words
        .find_map(|w| w.strip_prefix("./target/release/"))
        .unwrap();
    let flag = words.next().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let main = std::fs::read_dir(root.join("labs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|d| {
            std::fs::read_to_string(d.join("Cargo.toml"))
                .is_ok_and(|t| t.contains(&format!("name = \"{program}\"")))
        })
        .map(|d| std::fs::read_to_string(d.join("src/main.rs")).unwrap())
        .unwrap_or_else(|| panic!("no package {program} under labs/"));
    let field = flag.trim_start_matches("--").replace('-', "_");
    assert!(main.contains(&field), "{program} has no {flag}");
}
