//! Part 1: the same binary under `ringside launch` (with your rank
//! variables), torchrun, mpirun and an srun-style environment; each rank prints
//! what its launcher set and where it resolved itself, then all-reduces.

use std::process::{Command, Stdio};

use anyhow::{Context, bail};
use collectives::algorithms::Algo;
use collectives::job;
use collectives::launch::{self, LaunchSpec};
use collectives::transport::TransportKind;
use collectives::{BufferMut, Input, ReduceOp};
use lab08_many_nodes::{free_port, rank_env};
use labkit::Variant;

use crate::args::{Args, me};

/// The launchers section: each prints its ranks' lines.
pub fn launchers(args: &Args) -> anyhow::Result<()> {
    let variant = Variant::from_env();
    // ringside launch's own code, with your variables.
    let mut spec = LaunchSpec::new(std::env::current_exe()?, ["--role", "show"], 2);
    spec.rank_env = rank_env(variant);
    let report =
        launch::spawn(&spec).context("ringside launch (collectives::launch) with your rank_env")?;
    if !report.success() {
        bail!(
            "ringside launch: {:?}",
            report
                .blamed()
                .map(|(r, why)| format!("rank {}: {why}", r.rank))
        );
    }
    let python = measure::manifest::workspace_dir().join(".ringside/venv/bin/torchrun");
    let tries: Vec<(&str, Option<Command>)> = vec![
        (
            "torchrun",
            (!args.quick && python.exists()).then(|| {
                let mut c = Command::new(&python);
                c.args(["--standalone", "--no-python", "--nproc-per-node", "2"])
                    .arg(std::env::current_exe().unwrap_or_default());
                c.args(["--role", "show"]);
                c
            }),
        ),
        (
            "mpirun",
            (!args.quick
                && Command::new("mpirun")
                    .arg("--version")
                    .output()
                    .is_ok_and(|o| o.status.success()))
            .then(|| {
                let mut c = Command::new("mpirun");
                c.args(["--allow-run-as-root", "--oversubscribe", "-np", "2"])
                    .arg(std::env::current_exe().unwrap_or_default())
                    .args(["--role", "show"]);
                c
            }),
        ),
    ];
    for (name, cmd) in tries {
        match cmd {
            None => println!(
                "[{name}] skipped: {}",
                if args.quick {
                    "not in a --quick run"
                } else {
                    "not installed"
                }
            ),
            Some(mut c) => {
                let out = c.output().with_context(|| format!("running {name}"))?;
                print!("{}", String::from_utf8_lossy(&out.stdout));
                if !out.status.success() {
                    println!(
                        "[{name}] failed: {}",
                        String::from_utf8_lossy(&out.stderr)
                            .lines()
                            .last()
                            .unwrap_or_default()
                    );
                }
            }
        }
    }
    // srun sets SLURM_* for each task; here we set them ourselves.
    let port = free_port()?.to_string();
    let children: Vec<_> = (0..2)
        .map(|k| {
            me(&["--role", "show"]).map(|mut c| {
                c.env_clear()
                    .env("PATH", std::env::var_os("PATH").unwrap_or_default())
                    .envs([
                        ("SLURM_JOB_ID", "4242".to_owned()),
                        ("SLURM_STEP_ID", "0".into()),
                        ("SLURM_PROCID", k.to_string()),
                        ("SLURM_LOCALID", k.to_string()),
                        ("SLURM_NTASKS", "2".into()),
                        ("SLURM_STEP_NUM_TASKS", "2".into()),
                        ("SLURM_STEP_TASKS_PER_NODE", "2".into()),
                        ("SLURM_STEP_NODELIST", "localhost".into()),
                        ("MASTER_ADDR", "127.0.0.1".into()),
                        ("MASTER_PORT", port.clone()),
                    ])
                    .stdout(Stdio::piped())
                    .spawn()
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?
        .into_iter()
        .collect::<std::io::Result<Vec<_>>>()?;
    for c in children {
        let out = c.wait_with_output()?;
        print!("{}", String::from_utf8_lossy(&out.stdout));
    }
    Ok(())
}

/// The variables a rank looks at, in the order printed.
const SHOWN: [&str; 14] = [
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
];

/// A rank of the launchers section.
pub fn show(args: &Args) -> anyhow::Result<()> {
    let set: Vec<String> = SHOWN
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| format!("{k}={v}")))
        .collect();
    let timeout = args.connect.timeout()?;
    let rdv = labkit::rank(2, timeout)?;
    let i = &rdv.info;
    let comm = job::connect(
        &rdv,
        collectives::Backend::Reference,
        TransportKind::Auto,
        Algo::Auto,
        timeout,
        "lab08-show/",
    )?;
    let mut one = [1.0f64];
    comm.all_reduce(
        Input::InPlace,
        &mut BufferMut::from_slice(&mut one),
        ReduceOp::Sum,
    )?;
    let ok = if one[0] as usize == i.world_size {
        "all_reduce ok"
    } else {
        "all_reduce WRONG"
    };
    println!(
        "[{}] rank {}/{} local {}/{} store {}:{} ({ok}) — set: {}",
        i.launcher.name(),
        i.rank,
        i.world_size,
        i.local_rank,
        i.local_world_size,
        i.master_addr,
        i.master_port,
        set.join(" ")
    );
    drop(comm);
    rdv.close(timeout)?;
    Ok(())
}
