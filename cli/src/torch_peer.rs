//! The torch peer: PyTorch's own `torch.distributed` over the same sizes with
//! the same timing rule (`torch_peer.py`, beside this file), one Python
//! process per rank, so it runs under any launcher. Its records are the
//! results file's ([`measure::Record`]).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use collectives::bench::{Combine, dtype_key};
use collectives::rendezvous::env::Rendezvous;
use collectives::{Collective, DType, ReduceOp};

use measure::Record;
use measure::manifest;

/// What the peer sweeps.
pub struct PeerSweep<'a> {
    /// torch.distributed backend: gloo or nccl.
    pub backend: &'a str,
    /// Collectives to time.
    pub collectives: &'a [Collective],
    /// Smallest size in bytes.
    pub min_bytes: usize,
    /// Largest size.
    pub max_bytes: usize,
    /// Size factor.
    pub factor: usize,
    /// Timed iterations.
    pub iters: usize,
    /// Warm-up iterations.
    pub warmup: usize,
    /// Element type.
    pub dtype: DType,
    /// Reduction.
    pub op: ReduceOp,
    /// Root.
    pub root: usize,
    /// Check results.
    pub check: bool,
    /// How ranks' times combine.
    pub combine: Combine,
    /// Python with torch (default: set-up's venv).
    pub python: Option<PathBuf>,
    /// The script (default: `torch_peer.py` beside this file in the checkout).
    pub script: Option<PathBuf>,
}

/// Whether this machine has an NVIDIA GPU driver.
pub fn cuda_present() -> bool {
    Path::new("/dev/nvidia0").exists() || Path::new("/dev/nvidiactl").exists()
}

/// What one run of the peer gave (on rank 0; other ranks get nothing).
#[derive(Debug, Default)]
pub struct PeerRun {
    /// Its records.
    pub records: Vec<Record>,
    /// The cores its ranks used while timed, summed over them (the figure
    /// ringside's own ranks print, [`crate::cpu_share`]), if it said.
    pub cores: Option<f64>,
}

/// The cores in the peer's `{"cpu_cores": C, "ranks": N}` line, if `line` is
/// one.
fn cpu_cores(line: &str) -> Option<f64> {
    let value: serde_json::Value = serde_json::from_str(line.trim()).ok()?;
    value.get("cpu_cores")?.as_f64()
}

/// Runs the torch peer on every rank (each rank starts one Python process, so
/// it works under any launcher); rank 0 returns the records it printed and
/// the cores its ranks used.
///
/// `run_id` tells this job's peer runs apart (the tour runs the peer once
/// per round): each publishes its torch.distributed port under its own
/// store key, so a later run never reads an earlier run's port.
pub fn run(
    sweep: &PeerSweep<'_>,
    rdv: &Rendezvous,
    run_id: u32,
    timeout: Duration,
) -> anyhow::Result<PeerRun> {
    let python = sweep
        .python
        .clone()
        .unwrap_or_else(|| manifest::workspace_dir().join(".ringside/venv/bin/python"));
    let script = sweep.script.clone().unwrap_or_else(default_script);
    if !python.exists() {
        bail!(
            "--peer torch: no Python at {} (run `cargo xtask setup`, or pass --python)",
            python.display()
        );
    }
    if !script.exists() {
        bail!(
            "--peer torch: no script at {} (pass --peer-script)",
            script.display()
        );
    }
    let store = rdv.store();
    let port_key = format!("bench/torch-port/{run_id}");
    if rdv.info.rank == 0 {
        let port = std::net::TcpListener::bind((rdv.info.master_addr.as_str(), 0))
            .or_else(|_| std::net::TcpListener::bind("127.0.0.1:0"))
            .and_then(|l| l.local_addr())
            .context("picking a port for torch.distributed")?
            .port();
        store.set(&port_key, port.to_string().as_bytes())?;
    }
    let port = String::from_utf8_lossy(&store.get(&port_key)?).into_owned();
    let names: Vec<&str> = sweep.collectives.iter().map(|c| c.key()).collect();
    let mut cmd = Command::new(&python);
    cmd.arg(&script)
        .args(["--backend", sweep.backend])
        .args([
            "-b",
            &sweep.min_bytes.to_string(),
            "-e",
            &sweep.max_bytes.to_string(),
        ])
        .args(["-f", &sweep.factor.to_string()])
        .args([
            "-n",
            &sweep.iters.to_string(),
            "-w",
            &sweep.warmup.to_string(),
        ])
        .args(["-d", dtype_key(sweep.dtype), "-o", sweep.op.name()])
        .args([
            "-r",
            &sweep.root.to_string(),
            "-c",
            if sweep.check { "1" } else { "0" },
        ])
        .args(["--combine", sweep.combine.name()])
        .args(["--collective", &names.join(",")])
        .env("RANK", rdv.info.rank.to_string())
        .env("WORLD_SIZE", rdv.info.world_size.to_string())
        .env("LOCAL_RANK", rdv.info.local_rank.to_string())
        .env("MASTER_ADDR", &rdv.info.master_addr)
        .env("MASTER_PORT", &port)
        // One intra-op thread per rank, as ringside's ranks use one core each.
        .env("OMP_NUM_THREADS", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let child = cmd
        .spawn()
        .with_context(|| format!("starting {} {}", python.display(), script.display()))?;
    // The whole sweep may take long; each wait inside it is bounded by the
    // script's own timeout, and this bounds the whole.
    let budget = timeout.saturating_mul(20).max(Duration::from_secs(600));
    let lines = collect_lines(child, budget)?;
    let mut run = PeerRun::default();
    for line in &lines {
        if let Some(r) = measure::parse_line(line).context("the torch peer's output")? {
            run.records.push(r);
        } else if let Some(c) = cpu_cores(line) {
            run.cores = Some(c);
        }
    }
    Ok(run)
}

/// The script beside this source file: cli's own folder, so no other
/// crate's files are needed at run time.
fn default_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/torch_peer.py")
}

/// Reads a child's stdout to the end and waits for it, killing it after `budget`.
fn collect_lines(mut child: Child, budget: Duration) -> anyhow::Result<Vec<String>> {
    let stdout = child.stdout.take().context("the peer's stdout")?;
    let reader = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<_>>()
    });
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if start.elapsed() > budget {
            let _ = child.kill();
            let _ = child.wait();
            bail!("the torch peer took longer than {budget:?} and was stopped");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let lines = reader
        .join()
        .map_err(|_| anyhow::anyhow!("reading the peer's output failed"))?;
    if !status.success() {
        bail!("the torch peer failed ({status}); its messages are above");
    }
    Ok(lines)
}
