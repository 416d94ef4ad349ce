//! The torch peer (`cli/src/torch_peer.py`, run by `ringside bench --peer torch`) at world 2: two Python processes
//! started by hand with torchrun's environment variables, a tiny sweep of
//! all_reduce and all_gather, and every record checked against the results
//! format (fields, sizes, statistics, bandwidth factors, `wrong == 0`).
//!
//! Needs the project's Python (`.ringside/venv`, made by `cargo xtask setup`):
//! without it the test fails and says so, it never passes silently.

mod common;

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::free_port;
use serde_json::Value;

const KEYS: [&str; 21] = [
    "label",
    "backend",
    "algo",
    "peer",
    "collective",
    "world",
    "bytes",
    "count",
    "dtype",
    "op",
    "root",
    "in_place",
    "iters",
    "min_us",
    "median_us",
    "mean_us",
    "p99_us",
    "max_us",
    "algbw_gbps",
    "busbw_gbps",
    "wrong",
];

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn cli_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn python() -> PathBuf {
    let py = workspace().join(".ringside/venv/bin/python");
    assert!(
        py.exists(),
        "{} is missing: run `cargo xtask setup` (it installs torch and makes .ringside/venv)",
        py.display()
    );
    py
}

/// Waits for `child` up to `deadline`; kills it past that.
fn finish(mut child: Child, deadline: Instant) -> (std::process::ExitStatus, String, String) {
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        out.read_to_string(&mut s).unwrap();
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        err.read_to_string(&mut s).unwrap();
        s
    });
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!(
                "torch peer still running after the deadline; stderr: {}",
                t_err.join().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status, t_out.join().unwrap(), t_err.join().unwrap())
}

/// Runs the peer on two ranks; returns rank 0's stdout.
fn run_world_2(args: &[&str]) -> String {
    let py = python();
    let script = cli_dir().join("src/torch_peer.py");
    let port = free_port().unwrap().to_string();
    let children: Vec<Child> = (0..2)
        .map(|rank| {
            let mut cmd = Command::new(&py);
            cmd.arg(&script)
                .args(args)
                .args(["--timeout", "60"])
                .env("RANK", rank.to_string())
                .env("LOCAL_RANK", rank.to_string())
                .env("WORLD_SIZE", "2")
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", &port)
                .env("OMP_NUM_THREADS", "1")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            if std::env::var_os("GLOO_SOCKET_IFNAME").is_none() {
                // Loopback: both ranks are here, whatever the hostname resolves to.
                cmd.env("GLOO_SOCKET_IFNAME", "lo");
            }
            cmd.spawn().unwrap()
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut outs = Vec::new();
    for (rank, child) in children.into_iter().enumerate() {
        let (status, out, err) = finish(child, deadline);
        assert!(status.success(), "rank {rank} failed ({status}): {err}");
        outs.push(out);
    }
    assert!(
        outs[1].trim().is_empty(),
        "only rank 0 prints records, rank 1 printed: {}",
        outs[1]
    );
    outs.swap_remove(0)
}

fn f(r: &Value, k: &str) -> f64 {
    r[k].as_f64()
        .unwrap_or_else(|| panic!("{k} is not a number in {r}"))
}

#[test]
fn torch_peer_world_2_records_follow_the_results_format() {
    let out = run_world_2(&[
        "-b",
        "4",
        "-e",
        "4K",
        "-f",
        "4",
        "-n",
        "3",
        "-w",
        "1",
        "--collective",
        "all_reduce,all_gather",
    ]);
    let mut lines: Vec<&str> = out.lines().collect();
    // The last line: the cores the two ranks used while timed, summed (each
    // rank at most the whole host).
    let share: Value = serde_json::from_str(lines.pop().unwrap_or_default())
        .unwrap_or_else(|e| panic!("no CPU share line ({e}) in\n{out}"));
    assert_eq!(share["ranks"], 2, "{share}");
    let cores = share["cpu_cores"].as_f64().unwrap_or(-1.0);
    let host = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    assert!(
        cores > 0.0 && cores <= 2.0 * host,
        "cores {cores} on {host}: {share}"
    );
    let records: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();

    // all_reduce exists only in place in torch: one record per size 4 B..4 KiB.
    // all_gather: 4 B is one f32, not a block per rank, so it is skipped; both forms.
    let sizes = [4u64, 16, 64, 256, 1024, 4096];
    let mut want: Vec<(&str, u64, bool)> = sizes.iter().map(|&b| ("all_reduce", b, true)).collect();
    for &b in &sizes[1..] {
        want.push(("all_gather", b, false));
        want.push(("all_gather", b, true));
    }
    let got: Vec<(&str, u64, bool)> = records
        .iter()
        .map(|r| {
            (
                r["collective"].as_str().unwrap(),
                r["bytes"].as_u64().unwrap(),
                r["in_place"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, want, "records (collective, bytes, in_place)");

    for r in &records {
        let obj = r.as_object().unwrap();
        let keys: Vec<&str> = obj.keys().map(String::as_str).collect();
        let mut sorted_want = KEYS.to_vec();
        sorted_want.sort_unstable();
        let mut sorted_got = keys.clone();
        sorted_got.sort_unstable();
        assert_eq!(sorted_got, sorted_want, "fields of {r}");

        let coll = r["collective"].as_str().unwrap();
        assert_eq!(r["label"], "torch-gloo");
        assert_eq!(r["backend"], "torch");
        assert_eq!(r["algo"], "gloo");
        assert_eq!(r["peer"], true);
        assert_eq!(r["world"], 2);
        assert_eq!(r["dtype"], "f32");
        assert_eq!(r["iters"], 3);
        assert_eq!(r["root"], -1);
        assert_eq!(r["wrong"], 0, "wrong elements in {r}");
        let bytes = r["bytes"].as_u64().unwrap();
        assert_eq!(r["count"].as_u64().unwrap() * 4, bytes, "count of {r}");
        let (op, factor) = match coll {
            "all_reduce" => ("sum", 1.0), // 2(n-1)/n at n = 2
            _ => ("none", 0.5),           // (n-1)/n
        };
        assert_eq!(r["op"], op);

        let (mn, med, mean, p99, mx) = (
            f(r, "min_us"),
            f(r, "median_us"),
            f(r, "mean_us"),
            f(r, "p99_us"),
            f(r, "max_us"),
        );
        assert!(
            0.0 < mn && mn <= med && med <= p99 && p99 <= mx && mn <= mean && mean <= mx,
            "statistics out of order in {r}"
        );
        let algbw = bytes as f64 / (med * 1e-6) / 1e9;
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1e-12);
        assert!(close(f(r, "algbw_gbps"), algbw), "algbw of {r}");
        assert!(
            close(f(r, "busbw_gbps"), algbw * factor),
            "busbw of {r} (factor {factor})"
        );
    }
}
