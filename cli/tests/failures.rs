//! Failures as a user meets them: a rank SIGKILLed mid-all_reduce, a port in
//! use, an unreachable master, a wrong world size, a wrong job token. Each must
//! end in a clear error within the configured timeout (+2 s), never a hang.

mod common;

use common::{alive, finish, free_port};

use std::net::TcpListener;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const RINGSIDE: &str = env!("CARGO_BIN_EXE_ringside");
const TOKEN: &str = "00112233445566778899aabbccddeeff";

/// One rank of a job, joined from torchrun-style variables (no launcher).
fn rank(rank: usize, world: usize, port: u16, token: &str, args: &[&str]) -> Child {
    Command::new(RINGSIDE)
        .args(args)
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", world.to_string())
        .env("LOCAL_RANK", rank.to_string())
        .env("LOCAL_WORLD_SIZE", world.to_string())
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .env("RINGSIDE_JOB_TOKEN", token)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A long all_reduce loop: 8 MiB messages, effectively forever.
fn endless(transport: &'static str, timeout: &'static str) -> Vec<&'static str> {
    vec![
        "sweep",
        "--nproc",
        "1",
        "--transport",
        transport,
        "-b",
        "8M",
        "-e",
        "8M",
        "-n",
        "1000000",
        "-w",
        "0",
        "--timeout",
        timeout,
    ]
}

fn peer_killed_mid_all_reduce(transport: &'static str) {
    let port = free_port().unwrap();
    let args = endless(transport, "5");
    let mut ranks: Vec<Child> = (0..3).map(|r| rank(r, 3, port, TOKEN, &args)).collect();
    // Let them get well into the loop.
    std::thread::sleep(Duration::from_secs(3));
    for (r, c) in ranks.iter_mut().enumerate() {
        assert!(
            c.try_wait().unwrap().is_none(),
            "rank {r} ended before the kill"
        );
    }
    let victim = ranks.remove(1);
    unsafe { libc::kill(victim.id() as i32, libc::SIGKILL) };
    let killed_at = Instant::now();
    for (r, c) in ranks.into_iter().enumerate() {
        // Timeout 5 s + 2 s of grace, from the moment of the kill.
        let limit = Duration::from_secs(7).saturating_sub(killed_at.elapsed());
        let (out, _) = finish(c, limit);
        let t = text(&out);
        assert!(
            !out.status.success(),
            "survivor {r} exited successfully:\n{t}"
        );
        assert!(
            t.contains("rank 1"),
            "survivor {r} does not name the dead rank:\n{t}"
        );
    }
    finish(victim, Duration::from_secs(2));
}

#[test]
fn peer_sigkilled_mid_all_reduce_over_tcp() {
    peer_killed_mid_all_reduce("tcp");
}

#[test]
fn peer_sigkilled_mid_all_reduce_over_shm() {
    peer_killed_mid_all_reduce("shm");
}

fn env_of(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/environ"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', "\n"))
        .unwrap_or_default()
}

fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) {
            let ppid = stat
                .rsplit_once(") ")
                .and_then(|(_, rest)| rest.split(' ').nth(1)?.parse::<u32>().ok());
            if ppid == Some(pid) {
                out.push(p);
            }
        }
    }
    out
}

#[test]
fn launcher_names_the_rank_killed_mid_all_reduce_and_leaves_nothing_behind() {
    let mut args = endless("shm", "5");
    args[2] = "3";
    let launcher = Command::new(RINGSIDE)
        .args(&args)
        .env_remove("RINGSIDE_JOB_TOKEN")
        .env_remove("RANK")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let kids = children_of(launcher.id());
    assert_eq!(kids.len(), 3, "expected 3 ranks, found {kids:?}");
    let victim = *kids
        .iter()
        .find(|&&p| env_of(p).lines().any(|l| l == "RANK=2"))
        .expect("rank 2");
    unsafe { libc::kill(victim as i32, libc::SIGKILL) };
    let (out, took) = finish(launcher, Duration::from_secs(12));
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(
        t.contains("rank 2") && t.contains("SIGKILL"),
        "launcher must name rank 2 and SIGKILL:\n{t}"
    );
    assert!(took < Duration::from_secs(10), "took {took:?}");
    for p in kids {
        assert!(!alive(p), "rank process {p} left behind");
    }
}

#[test]
fn port_in_use_is_a_clear_error() {
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port();
    let (out, took) = finish(
        rank(
            0,
            2,
            port,
            TOKEN,
            &["sweep", "--nproc", "1", "--timeout", "3"],
        ),
        Duration::from_secs(5),
    );
    let t = text(&out);
    assert!(!out.status.success());
    assert!(
        t.contains("address already in use") || t.contains("in use"),
        "{t}"
    );
    assert!(took < Duration::from_secs(4), "{took:?}");
}

#[test]
fn unreachable_master_errors_within_the_timeout() {
    let port = free_port().unwrap();
    let (out, took) = finish(
        rank(
            1,
            2,
            port,
            TOKEN,
            &["sweep", "--nproc", "1", "--timeout", "2"],
        ),
        Duration::from_secs(5),
    );
    let t = text(&out);
    assert!(!out.status.success());
    assert!(t.contains("unreachable") || t.contains("timed out"), "{t}");
    assert!(took < Duration::from_secs(4), "{took:?}");
}

#[test]
fn wrong_world_size_is_named() {
    let port = free_port().unwrap();
    let args = ["sweep", "--nproc", "1", "--timeout", "3", "-e", "8"];
    let r0 = rank(0, 2, port, TOKEN, &args);
    let r1 = rank(1, 3, port, TOKEN, &args);
    let (o1, _) = finish(r1, Duration::from_secs(6));
    let (o0, _) = finish(r0, Duration::from_secs(6));
    let t1 = text(&o1);
    assert!(!o1.status.success() && !o0.status.success());
    assert!(
        t1.contains('3') && t1.contains('2') && t1.contains("world"),
        "{t1}"
    );
}

#[test]
fn wrong_job_token_is_refused() {
    let port = free_port().unwrap();
    let args = ["sweep", "--nproc", "1", "--timeout", "3", "-e", "8"];
    let r0 = rank(0, 2, port, TOKEN, &args);
    let r1 = rank(1, 2, port, "ffeeddccbbaa99887766554433221100", &args);
    let (o1, t1) = finish(r1, Duration::from_secs(6));
    let (o0, _) = finish(r0, Duration::from_secs(6));
    let (x1, x0) = (text(&o1), text(&o0));
    assert!(!o1.status.success() && !o0.status.success());
    assert!(x1.contains("token"), "the stranger must be told why:\n{x1}");
    assert!(
        x0.contains("rank") && x0.contains('1'),
        "rank 0 must name the missing rank:\n{x0}"
    );
    assert!(t1 < Duration::from_secs(5));
}
