//! `ringside bench`, `ringside report` and the tour as a user runs them: real
//! processes, every backend this machine has, the nccl-tests table, results
//! files with a manifest, the torch peer, and the report.

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::Duration;

use serde_json::Value;

const RINGSIDE: &str = env!("CARGO_BIN_EXE_ringside");

/// Jobs at once only slow each other down on a small machine.
static ONE_JOB_AT_A_TIME: Mutex<()> = Mutex::new(());

fn run(cmd: &mut Command, limit: Duration) -> (Output, String, String) {
    let _turn = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let child = common::clean_launch_env(cmd)
        .spawn()
        .unwrap_or_else(|e| panic!("could not start {cmd:?}: {e}"));
    let (out, _) = common::finish(child, limit);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, stdout, stderr)
}

fn load(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// Rows of the table: lines that start with a size.
fn rows(stdout: &str) -> Vec<Vec<String>> {
    stdout
        .lines()
        .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}

#[test]
fn every_collective_on_every_local_backend_with_results_file() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let (out, stdout, stderr) = run(
        Command::new(RINGSIDE)
            .args([
                "bench",
                "--nproc",
                "3",
                "--backend",
                "reference-shm,reference-tcp,gloo,mpi",
                "--collective",
                "all",
                "-b",
                "8",
                "-e",
                "4K",
                "-f",
                "8",
                "-n",
                "3",
                "-w",
                "1",
                "--json",
            ])
            .arg(&json),
        Duration::from_secs(180),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // MPI needs an MPI launcher: listed, not run.
    assert!(
        stdout.contains("# mpi: not available here: needs an MPI launcher"),
        "{stdout}"
    );
    assert!(stdout.contains("# Out of bounds values : 0 OK"), "{stdout}");
    // 5 + 2·6 columns per row; #wrong columns are 0.
    let rows = rows(&stdout);
    assert!(!rows.is_empty());
    for r in &rows {
        assert!(r.len() == 17 || r.len() == 11, "{r:?}");
    }
    let doc = load(&json);
    assert_eq!(doc["format"], "ringside-results/1");
    let m = &doc["manifest"];
    assert_eq!(m["world"], 3);
    for k in ["git_sha", "rustc"] {
        assert!(
            m["ringside"][k].as_str().is_some_and(|s| !s.is_empty()),
            "{m}"
        );
    }
    assert!(m["libraries"]["gloo"].is_string(), "{m}");
    assert!(m["host"]["cores"].as_u64().unwrap() >= 1);
    let records = doc["records"].as_array().unwrap();
    for label in ["reference-shm", "reference-tcp", "gloo"] {
        for c in [
            "all_reduce",
            "broadcast",
            "reduce",
            "all_gather",
            "reduce_scatter",
            "all_to_all",
            "gather",
            "scatter",
            "send_recv",
        ] {
            assert!(
                records
                    .iter()
                    .any(|r| r["label"] == label && r["collective"] == c),
                "no {label} {c} record"
            );
        }
    }
    for r in records {
        assert_eq!(r["wrong"], 0, "{r}");
        let (alg, bus) = (
            r["algbw_gbps"].as_f64().unwrap(),
            r["busbw_gbps"].as_f64().unwrap(),
        );
        let factor = match r["collective"].as_str().unwrap() {
            "all_reduce" => 2.0 * 2.0 / 3.0,
            "broadcast" | "reduce" | "send_recv" => 1.0,
            _ => 2.0 / 3.0,
        };
        assert!((bus - alg * factor).abs() <= 1e-9 * alg.max(1.0), "{r}");
    }
    // Every collective's records make it into the report.
    let out_dir = dir.path().join("report");
    let (out, stdout, stderr) = run(
        Command::new(RINGSIDE)
            .arg("report")
            .arg(&json)
            .arg("-o")
            .arg(&out_dir),
        Duration::from_secs(60),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let html = std::fs::read_to_string(out_dir.join("index.html")).unwrap();
    for c in ["all_to_all", "send_recv", "reduce_scatter"] {
        assert!(html.contains(c), "{c} missing from the report");
    }
}

/// A world-2 all_reduce from 8 MiB goes slice by slice, each slice answered
/// in the ring between the two processes (`transport/shm/reply.rs`): every
/// element of every size comes back right (`wrong` counts the others), with
/// a ragged last slice and blocks of unequal length.
#[test]
fn sliced_all_reduce_between_processes_answers_in_the_ring_exactly() {
    let (out, stdout, stderr) = run(
        Command::new(RINGSIDE).args([
            "sweep",
            "--nproc",
            "2",
            "--transport",
            "shm",
            "-b",
            "8388612",
            "-e",
            "16777224",
            "-f",
            "2",
            "-n",
            "2",
            "-w",
            "1",
            "--jsonl",
        ]),
        Duration::from_secs(120),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let records: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 2, "{stdout}");
    for r in &records {
        assert_eq!(r["wrong"], 0, "{r}");
    }
}

#[test]
fn mpi_and_gloo_under_mpirun() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let mut cmd = Command::new("mpirun");
    cmd.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "-np",
        "2",
        "-x",
        "MASTER_PORT",
    ])
    .arg(RINGSIDE)
    .args([
        "bench",
        "--backend",
        "mpi,gloo",
        "--collective",
        "all_reduce,all_to_all",
        "-b",
        "4",
        "-e",
        "64K",
        "-f",
        "16",
        "-n",
        "3",
        "-I",
        "--json",
    ])
    .arg(&json)
    .env("OMPI_MCA_btl", "self,vader");
    let (out, stdout, stderr) = run(&mut cmd, Duration::from_secs(180));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // -I adds mean and p99: 5 + 2·8 columns.
    assert!(rows(&stdout).iter().all(|r| r.len() == 21), "{stdout}");
    let doc = load(&json);
    let records = doc["records"].as_array().unwrap();
    assert!(records.iter().any(|r| r["label"] == "mpi"), "{doc}");
    assert!(records.iter().any(|r| r["label"] == "gloo"), "{doc}");
}

#[test]
fn bad_flags_are_clear_errors() {
    for (args, want) in [
        (&["bench", "--backend", "nope"][..], "unknown backend"),
        (
            &["bench", "--collective", "barrier"][..],
            "unknown collective",
        ),
        (&["bench", "-d", "complex"][..], "unknown datatype"),
        (&["bench", "--peer", "jax"][..], "unknown --peer"),
        (&["bench", "--repeat", "3"][..], "add --peer torch"),
        (
            &["bench", "--repeat", "0", "--peer", "torch"][..],
            "--repeat",
        ),
    ] {
        let (out, stdout, stderr) = run(Command::new(RINGSIDE).args(args), Duration::from_secs(30));
        assert!(!out.status.success(), "{args:?}: {stdout}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
    }
}

/// `bench --peer torch --repeat 3`: ours and the peer take turns in ABBA
/// order (ours first in rounds 1 and 3, the peer in round 2), the
/// side-by-side table compares each side's median round, and the results file
/// holds one record per size and form of each side (the median round's), not
/// every round's.
#[test]
fn bench_repeat_takes_turns_with_the_peer_in_abba_order_and_keeps_each_sides_median_round() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let (out, stdout, stderr) = run(
        Command::new(RINGSIDE)
            .args(["bench", "--backend", "reference-tcp", "--peer", "torch"])
            .args(["--repeat", "3", "-b", "4", "-e", "64", "-f", "4", "-n", "3"])
            .arg("--json")
            .arg(&json),
        Duration::from_secs(180),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("# round 2/3: the peer, then ours")
            && stdout.contains("# round 3/3: ours, then the peer")
            && stdout.contains("each side the median of 3 rounds taken in turn"),
        "{stdout}\n{stderr}"
    );
    // Each compared size says in how many of the 3 rounds ours was faster.
    let won: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains(" in-place ") && !l.starts_with('#'))
        .filter_map(|l| l.split_whitespace().last())
        .collect();
    assert_eq!(won.len(), 3, "{stdout}");
    assert!(
        won.iter().all(|w| ["0/3", "1/3", "2/3", "3/3"].contains(w)),
        "{stdout}"
    );
    assert!(
        stdout.contains("faster in most rounds at ") && stdout.contains("   paired     won"),
        "{stdout}"
    );
    // Round 1 says how much CPU our ranks and the peer's got while timed,
    // and the side-by-side table both sides' median rounds.
    assert!(
        stdout.contains("# CPU the 2 ranks used while timed: ")
            && stdout.contains("# CPU the peer's 2 ranks used while timed: ")
            && stdout.contains(" cores (this host has ")
            && stdout.contains("(median round), in cores: reference-tcp ")
            && stdout.contains("#   cores while timed: reference-tcp "),
        "{stdout}"
    );
    // Round 1's nccl-tests tables only: ours in both forms, torch in place.
    let sizes = ["4", "16", "64"];
    let table_rows = rows(&stdout).into_iter().filter(|r| r.len() > 10).count();
    assert_eq!(table_rows, 2 * sizes.len(), "{stdout}");
    let doc = load(&json);
    let records = doc["records"].as_array().unwrap();
    let count = |label: &str| records.iter().filter(|r| r["label"] == label).count();
    assert_eq!(count("reference-tcp"), 2 * sizes.len(), "{doc}");
    assert_eq!(count("torch-gloo"), sizes.len(), "{doc}");
}

/// The main job's steps: sweep on every lane, the torch peer, the report.
/// Two rounds: the second connects every lane and starts the torch peer
/// again (once its second run read the first run's port from the store and
/// waited 120 s for a peer that was gone).
#[test]
fn tour_writes_results_and_a_report_with_the_torch_peer() {
    let dir = tempfile::tempdir().unwrap();
    let (out, stdout, stderr) = run(
        Command::new(RINGSIDE)
            .args(["tour", "--max-bytes", "16K", "-n", "3", "--repeat", "2"])
            .arg("--out")
            .arg(dir.path()),
        Duration::from_secs(240),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(
            "sizes measured (torch-gloo), 2 round(s), each taken in turn with the backends' rounds"
        ) && stdout.contains("each size the median of 2 rounds"),
        "{stdout}\n{stderr}"
    );
    let doc = load(&dir.path().join("bench.json"));
    let records = doc["records"].as_array().unwrap();
    for label in ["reference-shm", "reference-tcp", "gloo", "torch-gloo"] {
        // One record per size (4 B to 16 KiB ×4), the median round's: the
        // rounds are judged, not all written.
        let n = records.iter().filter(|r| r["label"] == label).count();
        assert_eq!(n, 7, "{label}: {doc}");
    }
    let index = dir.path().join("report/index.html");
    let html = std::fs::read_to_string(&index).unwrap();
    assert!(
        html.contains("torch-gloo") && html.contains("<svg"),
        "{}",
        index.display()
    );
    assert!(
        stdout.contains("model t = α + S·f·b_k") && stdout.contains("R²"),
        "{stdout}"
    );
    // The cores the ranks used while each backend was timed.
    let cpu = stdout
        .lines()
        .find(|l| l.contains("CPU the 2 ranks used while timed, in cores"))
        .unwrap_or_else(|| panic!("no CPU line in\n{stdout}"));
    for lane in ["ref-shm ", "ref-tcp ", "gloo "] {
        let cores: f64 = cpu
            .split(lane)
            .nth(1)
            .and_then(|rest| rest.split(',').next())
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {lane}figure in {cpu}"));
        assert!(cores > 0.0 && cores < 64.0, "{cpu}");
    }
}

/// Ctrl-C in the middle of a sweep: the job stops, and the results file holds
/// every size measured so far as a complete, valid document.
#[test]
fn ctrl_c_keeps_what_was_measured() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let _turn = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let child = common::clean_launch_env(
        Command::new(RINGSIDE)
            .args(["bench", "--nproc", "2", "--backend", "reference-tcp"])
            .args(["-b", "4", "-e", "1G", "-f", "2", "-n", "50", "--json"])
            .arg(&json),
    )
    .spawn()
    .unwrap();
    // Wait until some sizes are in the file, then interrupt like a terminal would.
    let start = std::time::Instant::now();
    loop {
        let n = std::fs::read(&json)
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .map_or(0, |d| d["records"].as_array().map_or(0, Vec::len));
        if n >= 4 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no records after 60 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let (out, took) = common::finish(child, Duration::from_secs(60));
    assert!(!out.status.success());
    assert!(took < Duration::from_secs(30), "took {took:?} to stop");
    let doc = load(&json);
    let records = doc["records"].as_array().unwrap();
    assert!(records.len() >= 4, "{doc}");
    assert!(records.iter().all(|r| r["wrong"] == 0));
}

/// `sweep -f` defaulted to 4 and `bench -f` to 2, and `sweep --json` was a switch
/// where `bench --json` takes a file: the shared size flags now agree.
#[test]
fn sweep_and_bench_size_flags_agree() {
    let help = |cmd: &str| {
        let out = Command::new(RINGSIDE)
            .args([cmd, "--help"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let default_of = |text: &str, flag: &str| {
        let line = text.lines().find(|l| l.contains(flag)).unwrap().to_owned();
        line[line.find("[default:").unwrap()..].to_owned()
    };
    let (sweep, bench) = (help("sweep"), help("bench"));
    for flag in [
        "--minbytes",
        "--maxbytes",
        "--stepfactor",
        "--iters",
        "--warmup_iters",
    ] {
        assert_eq!(default_of(&sweep, flag), default_of(&bench, flag), "{flag}");
    }
    let flags: Vec<&str> = sweep
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(
        flags.contains(&"--jsonl") && !flags.contains(&"--json"),
        "{sweep}"
    );
}

/// `-b 1M -e 4K`, `-f 1`, `-f 0` and `-e 0` exited 0 with "0 OK" having measured
/// nothing; `-e 200G` allocated until the OOM killer fired; `-e 17179869184G`
/// wrapped to 0. Each is now an error that says why, before anything is allocated.
#[test]
fn bench_sizes_that_measure_nothing_or_exceed_memory_are_errors() {
    for (flags, why) in [
        (&["-b", "1M", "-e", "4K"][..], "above the largest"),
        (&["-f", "1"][..], "-f must be 2"),
        (&["-f", "0"][..], "-f must be 2"),
        (&["-e", "0"][..], "is 0"),
        (&["-e", "17179869184G"][..], "too large"),
        (&["-e", "200G", "-n", "1"][..], "GiB is available"),
    ] {
        for cmd in ["bench", "sweep"] {
            let out = common::clean_launch_env(
                Command::new(RINGSIDE)
                    .args([cmd, "--nproc", "2"])
                    .args(flags)
                    .env("RUST_BACKTRACE", "0"),
            )
            .output()
            .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{cmd} {flags:?} succeeded");
            assert!(err.contains(why), "{cmd} {flags:?}: {err}");
        }
    }
}

/// `ringside report empty.json` said "cannot write the report into …" for what
/// was a bad input: the error names the input.
#[test]
fn report_of_a_bad_input_names_the_input() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.json");
    std::fs::write(&empty, "").unwrap();
    for input in [
        empty,
        dir.path().join("missing.json"),
        dir.path().to_path_buf(),
    ] {
        let out = Command::new(RINGSIDE)
            .arg("report")
            .arg(&input)
            .env("RUST_BACKTRACE", "0")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(
            err.contains(&input.display().to_string()) && !err.contains("cannot write"),
            "{err}"
        );
    }
}
