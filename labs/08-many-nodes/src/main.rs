//! Lab 8: launching and many nodes on one machine, run as a learner runs it
//! (`cargo lab 8`).
//!
//! 1. The same binary under `ringside launch` (with your rank variables),
//!    torchrun, mpirun and an srun-style environment: each rank prints what its
//!    launcher set and where it resolved itself, then all-reduces.
//! 2. As root: 2 and 4 network namespaces as hosts on a bridge, links shaped
//!    with `tc`; one launcher per "node" (`--nnodes/--node-rank`, as on a
//!    cluster) with your variables; all_reduce (auto, ring, tree) and a DDP step,
//!    against the same ranks on one host; ring and tree against the α–β
//!    prediction.
//! 3. A failure drill: one rank of three is SIGKILLed mid-training.
//!
//! Writes `results/lab08/<UTC time>/`.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, bail};
use clap::{Parser, ValueEnum};
use collectives::algorithms::Algo;
use collectives::backends;
use collectives::bench::{self, Case, Combine, Settings};
use collectives::job::{self, ConnectArgs};
use collectives::launch::{self, LaunchSpec};
use collectives::rendezvous::store::{TOKEN_VAR, Token};
use collectives::transport::TransportKind;
use collectives::{BufferMut, Collective, Communicator, Input, ReduceOp};
use lab08_many_nodes::{DRILL_TIMEOUT, free_port, rank_env};
use labkit::hosts::{Hosts, Link, shape_args};
use labkit::{Run, Variant};
use measure::{Figure, FigureSeries, Record};
use reports::AllReduceAlgorithm;
use tch::nn::{self, OptimizerConfig};
use trainers::ddp::{Ddp, DdpOptions};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Role {
    /// Run the whole lab (what a learner runs).
    Lab,
    /// A rank that prints what its launcher set.
    Show,
    /// One node's launcher (`ringside launch`'s code) of `bench` ranks.
    Node,
    /// A rank that times all_reduce and DDP steps.
    Bench,
    /// The failure drill's launcher.
    DrillLaunch,
    /// A rank of the failure drill.
    Drill,
}

/// Lab 8: the same binary under four launchers, simulated hosts with shaped
/// links, and a failure drill.
#[derive(Parser)]
#[command(version)]
struct Args {
    #[command(flatten)]
    connect: ConnectArgs,
    /// What this process is (the lab starts itself in the other roles).
    #[arg(long, value_enum, default_value = "lab", hide = true)]
    role: Role,
    /// Nodes of the job (node role).
    #[arg(long, default_value_t = 1, hide = true)]
    nnodes: usize,
    /// This node's index (node role).
    #[arg(long, default_value_t = 0, hide = true)]
    node_rank: usize,
    /// Ranks per node (node role).
    #[arg(long, default_value_t = 1, hide = true)]
    nproc_per_node: usize,
    /// Rank 0's host (node role).
    #[arg(long, default_value = "127.0.0.1", hide = true)]
    master_addr: String,
    /// Rank 0's store port (node role).
    #[arg(long, hide = true)]
    master_port: Option<u16>,
    /// The job token every node shares (node role).
    #[arg(long, hide = true)]
    token: Option<String>,
    /// What the node role's ranks are.
    #[arg(long, value_enum, default_value = "bench", hide = true)]
    rank_role: Role,
    /// Label of the link being measured (bench role).
    #[arg(long, default_value = "1host", hide = true)]
    link: String,
    /// Largest all_reduce to time, in bytes.
    #[arg(long, default_value = "16M", value_parser = measure::size::parse_size)]
    max_size: u64,
    /// A short run: small sizes, 2 nodes only, no torchrun/mpirun (what CI runs).
    #[arg(long)]
    quick: bool,
}

fn main() -> std::process::ExitCode {
    // The DDP step links libtorch, whose bundled Gloo must not be the one used.
    collectives::backends::ensure_gloo_first();
    let args = Args::parse();
    labkit::exit(
        match args.role {
            Role::Lab => lab(&args),
            Role::Show => show(&args),
            Role::Node => {
                let role = args
                    .rank_role
                    .to_possible_value()
                    .map(|v| v.get_name().to_owned());
                node(&args, &["--role", &role.unwrap_or_default()]).map(drop)
            }
            Role::Bench => bench_rank(&args),
            Role::DrillLaunch => drill_launch(&args),
            Role::Drill => drill_rank(&args),
        },
        "",
    )
}

/// This program with `args`, as a command.
fn me(args: &[&str]) -> anyhow::Result<Command> {
    let mut c = Command::new(std::env::current_exe()?);
    c.args(args);
    Ok(c)
}

fn lab(args: &Args) -> anyhow::Result<()> {
    let variant = Variant::from_env();
    println!("lab 8 ({variant})\n\n1. One binary, four launchers (2 ranks each)");
    launchers(args)?;

    let mut records: Vec<Record> = Vec::new();
    let mut ddp: Vec<(String, f64)> = Vec::new();
    println!("\n2. Hosts on one machine");
    let nodes: &[usize] = if args.quick { &[2] } else { &[2, 4] };
    let links: Vec<Option<Link>> = if args.quick {
        vec![None, Some(Link { rate_mbit: 1000 })]
    } else {
        vec![
            None,
            Some(Link { rate_mbit: 10_000 }),
            Some(Link { rate_mbit: 1000 }),
        ]
    };
    let max = if args.quick { 256 << 10 } else { args.max_size };
    let max_s = max.to_string();
    for &n in nodes {
        // The same ranks on one host first: the baseline.
        let host = format!("1host-{n}ranks");
        let (recs, step) = collect(node_job(n, 1, &host, &max_s, None)?, &host)?;
        println!("  {n} ranks on one host:           DDP step {step:.1} ms");
        ddp.push((format!("{n} ranks, one host"), step));
        records.extend(recs);
    }
    match Hosts::available() {
        Err(why) => println!("  simulated hosts skipped: {why}"),
        Ok(()) => {
            println!(
                "  links are shaped in bandwidth (tc tbf); this kernel has no sch_netem, so \
                 latency stays the veth's own (tens of µs)"
            );
            for &n in nodes {
                let hosts = Hosts::create(n)?;
                for link in &links {
                    hosts.shape(*link, shape_args)?;
                    let name = link.map_or("unshaped".to_owned(), |l| l.name());
                    let label = format!("{n}nodes-{name}");
                    let (recs, step) =
                        collect(node_job(n, n, &label, &max_s, Some(&hosts))?, &label)?;
                    println!("  {n} nodes, {name:>9} links:  DDP step {step:.1} ms");
                    ddp.push((format!("{n} nodes, {name}"), step));
                    records.extend(recs);
                }
            }
        }
    }

    let mut run = Run::start(8, nodes[nodes.len() - 1], "tcp")?;
    for r in &records {
        if !r.label.contains('/') {
            run.push(r.clone())?;
        }
    }
    predictions(&mut run, &records, nodes)?;
    run.figure(
        Figure::stacked_bars(
            "ddp-step",
            "A DDP step of the CNN (batch 64 per rank, median; lower is better)",
            ddp.iter().map(|(l, _)| l.clone()).collect(),
            "ms",
        )
        .with_layer("step", &ddp.iter().map(|d| d.1).collect::<Vec<_>>()),
    )?;

    println!("\n3. Failure drill: 3 ranks train; rank 1 is SIGKILLed at step 3");
    let t0 = Instant::now();
    let out = me(&[
        "--role",
        "drill-launch",
        "--timeout",
        &DRILL_TIMEOUT.as_secs().to_string(),
    ])?
    .output()
    .context("starting the drill")?;
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        println!("  | {line}");
    }
    println!(
        "  the job ended {:.1} s after it started, exit code {:?}",
        t0.elapsed().as_secs_f64(),
        out.status.code()
    );
    let dir = run.finish()?;
    println!(
        "\nCharts in {}: latency-all_reduce.svg (one host and every node count and link), \
         ring-vs-tree.svg (measured against the α–β prediction), ddp-step.svg.",
        dir.display()
    );
    Ok(())
}

/// The launchers section: each prints its ranks' lines.
fn launchers(args: &Args) -> anyhow::Result<()> {
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
fn show(args: &Args) -> anyhow::Result<()> {
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

/// One node's launcher: `ringside launch --nnodes N --node-rank K` with the
/// variant's rank variables, of `rank_args` ranks.
fn node(args: &Args, rank_args: &[&str]) -> anyhow::Result<launch::LaunchReport> {
    let mut all: Vec<String> = rank_args.iter().map(|s| s.to_string()).collect();
    all.extend([
        "--link".into(),
        args.link.clone(),
        "--max-size".into(),
        args.max_size.to_string(),
        "--timeout".into(),
        args.connect.wait.timeout.to_string(),
    ]);
    let mut spec = LaunchSpec::new(std::env::current_exe()?, all, args.nproc_per_node);
    spec.nnodes = args.nnodes;
    spec.node_rank = args.node_rank;
    spec.master_addr = args.master_addr.clone();
    spec.master_port = args.master_port;
    spec.token = args.token.as_deref().map(Token::parse).transpose()?;
    spec.rank_env = rank_env(Variant::from_env());
    let report = launch::spawn(&spec)?;
    if let Some(r) = report.failure() {
        bail!("node {}: {}", args.node_rank, r.describe());
    }
    Ok(report)
}

/// Runs `n` ranks as `nodes` node launchers (in `hosts`' namespaces when given,
/// else on this host) and returns every line node 0 printed.
fn node_job(
    n: usize,
    nodes: usize,
    label: &str,
    max: &str,
    hosts: Option<&Hosts>,
) -> anyhow::Result<Vec<String>> {
    let token = Token::generate()?.to_string();
    let port = free_port()?.to_string();
    let master = hosts.map_or("127.0.0.1".to_owned(), |h| h.addr(0).to_string());
    let per_node = (n / nodes).to_string();
    let mut children = Vec::new();
    for k in 0..nodes {
        let exe = std::env::current_exe()?;
        let mut c = match hosts {
            Some(h) => h.command(k, exe.as_os_str()),
            None => Command::new(&exe),
        };
        c.args([
            "--role",
            "node",
            "--nnodes",
            &nodes.to_string(),
            "--node-rank",
            &k.to_string(),
        ])
        .args([
            "--nproc-per-node",
            &per_node,
            "--master-addr",
            &master,
            "--master-port",
            &port,
        ])
        .args([
            "--token",
            &token,
            "--link",
            label,
            "--max-size",
            max,
            "--timeout",
            "60",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        children.push(c.spawn().with_context(|| format!("starting node {k}"))?);
    }
    let out = labkit::wait_all(children, &format!("the {label} job"), "node")?;
    Ok(out.lines().map(str::to_owned).collect())
}

/// The records and median DDP step a bench job's rank 0 printed.
fn collect(lines: Vec<String>, label: &str) -> anyhow::Result<(Vec<Record>, f64)> {
    let said = lines.join("\n");
    let mut recs = Vec::new();
    let mut step = None;
    for l in lines {
        if let Some(j) = l.strip_prefix("@record ") {
            recs.push(serde_json::from_str(j)?);
        } else if let Some(ms) = l.strip_prefix("@ddp-step-ms ") {
            step = Some(ms.trim().parse::<f64>()?);
        }
    }
    Ok((
        recs,
        step.with_context(|| format!("the {label} job printed no DDP step:\n{said}"))?,
    ))
}

/// A bench rank: all_reduce (auto, ring, tree) over TCP, then DDP steps.
fn bench_rank(args: &Args) -> anyhow::Result<()> {
    let timeout = args.connect.timeout()?;
    let rdv = labkit::rank(1, timeout)?;
    let (rank, world) = (rdv.info.rank, rdv.info.world_size);
    let mut opts = job::options(&rdv)?;
    opts.transport = TransportKind::Tcp;
    opts.timeout = timeout;
    opts.prefix = "lab08-bench/".into();
    let comm = backends::reference(rdv.store(), rank, world, &opts)?;
    let sizes = measure::size::sweep_sizes(4 << 10, args.max_size, 4, 0)?;
    let label = format!("reference-tcp@{}", args.link);
    for (suffix, algo) in [
        ("", Algo::Auto),
        ("/ring", Algo::Ring),
        ("/tree", Algo::Tree),
    ] {
        comm.set_algo(algo);
        for &bytes in &sizes {
            if let Some(m) = bench::run(
                &comm,
                &Case::f32_sum(Collective::AllReduce, bytes as usize),
                &settings(bytes),
            )? {
                if rank == 0 {
                    let name = format!("reference-tcp{suffix}@{}", args.link);
                    let rec = m.to_record(
                        if suffix.is_empty() { &label } else { &name },
                        "reference",
                        algo.name(),
                    );
                    println!("@record {}", serde_json::to_string(&rec)?);
                }
            }
        }
    }
    comm.set_algo(Algo::Auto);
    // Gloo over the same network, for lab 9's "across hosts" row: it listens
    // on the address towards the master too (job::options), as PyTorch's Gloo
    // would with GLOO_SOCKET_IFNAME=eth0.
    let gloo = job::connect(
        &rdv,
        collectives::Backend::Gloo,
        TransportKind::Tcp,
        Algo::Auto,
        timeout,
        "lab08-gloo/",
    )?;
    for &bytes in &sizes {
        if let Some(m) = bench::run(
            gloo.as_ref(),
            &Case::f32_sum(Collective::AllReduce, bytes as usize),
            &settings(bytes),
        )? {
            if rank == 0 {
                let rec = m.to_record(&format!("gloo@{}", args.link), "gloo", "auto");
                println!("@record {}", serde_json::to_string(&rec)?);
            }
        }
    }
    drop(gloo);
    let step = ddp_steps(Box::new(comm), rank, world, 6, None)?;
    if rank == 0 {
        println!("@ddp-step-ms {step}");
    }
    rdv.close(timeout)?;
    Ok(())
}

/// Fewer iterations for the large sizes: a 16 MiB all_reduce takes 0.2 s at 1 Gbit/s.
fn settings(bytes: u64) -> Settings {
    Settings {
        warmup: 1,
        iters: if bytes <= 1 << 20 { 10 } else { 3 },
        check: false,
        combine: Combine::Max,
    }
}

/// Trains `steps` DDP steps of the CNN (batch 64 per rank) and returns the
/// median step (ms) after the first; `die_at`: (rank, step) that SIGKILLs itself.
fn ddp_steps(
    comm: Box<dyn Communicator>,
    rank: usize,
    world: usize,
    steps: usize,
    die_at: Option<(usize, usize)>,
) -> anyhow::Result<f64> {
    tch::set_num_threads(1);
    tch::manual_seed(0);
    let data = trainers::data::load(trainers::data::DEFAULT_DIR, trainers::data::Split::Test)?;
    let vs = nn::VarStore::new(tch::Device::Cpu);
    let model = trainers::models::cnn().build(&vs.root());
    let mut ddp = Ddp::new(model, &vs, comm, DdpOptions::default())?;
    let mut opt = nn::Sgd::default().build(&vs, 0.01)?;
    let mut times = Vec::new();
    for s in 0..steps {
        if die_at == Some((rank, s)) {
            println!("rank {rank}: killing myself with SIGKILL at step {s}");
            // SAFETY: sends a signal to this very process; nothing to uphold.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
        let t0 = Instant::now();
        let from = ((s * world + rank) * 64) as i64;
        let x = data.images.f_narrow(0, from % 9000, 64)?;
        let y = data.labels.f_narrow(0, from % 9000, 64)?;
        opt.zero_grad();
        let _ = ddp.forward_backward(&x, |l| l.cross_entropy_for_logits(&y))?;
        opt.step();
        times.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    let mut t = times[1.min(times.len())..].to_vec();
    t.sort_by(f64::total_cmp);
    Ok(t.get(t.len() / 2).copied().unwrap_or(0.0))
}

/// The drill's launcher: 3 ranks, one dies; prints what the launcher says.
fn drill_launch(args: &Args) -> anyhow::Result<()> {
    let mut spec = LaunchSpec::new(
        std::env::current_exe()?,
        [
            "--role",
            "drill",
            "--timeout",
            &args.connect.wait.timeout.to_string(),
        ],
        3,
    );
    spec.rank_env = rank_env(Variant::from_env());
    let t0 = Instant::now();
    let report = launch::spawn(&spec)?;
    match report.failure() {
        Some(r) => println!(
            "ringside launch names rank {} ({}) after {:.1} s and stops the others at once \
             (as torchrun does)",
            r.rank,
            r.describe(),
            t0.elapsed().as_secs_f64()
        ),
        None => println!(
            "the drill's job ended without a failure ({})",
            report.exit_code()
        ),
    }

    // The same ranks with nobody stopping the survivors: what each one says.
    println!("the same 3 ranks, started by hand, so that the survivors find out themselves:");
    let token = Token::generate()?;
    spec.master_port = Some(free_port()?);
    let t0 = Instant::now();
    let mut children = Vec::new();
    for local_rank in 0..3 {
        let slot = launch::RankSlot {
            spec: &spec,
            local_rank,
            master_port: spec.master_port.unwrap_or_default(),
        };
        let vars = (spec.rank_env)(&slot).map_err(anyhow::Error::msg)?;
        let child = Command::new(&spec.program)
            .args(&spec.args)
            .envs(vars)
            .env(TOKEN_VAR, token.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        children.push(child);
    }
    for (rank, c) in children.into_iter().enumerate() {
        let out = c.wait_with_output()?;
        let said = String::from_utf8_lossy(&out.stderr);
        let last = said
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("(nothing)");
        println!(
            "rank {rank}: {} — {last}",
            match out.status.code() {
                Some(c) => format!("exit {c}"),
                None => "killed by a signal".into(),
            }
        );
    }
    println!("all three ended within {:.1} s", t0.elapsed().as_secs_f64());
    Ok(())
}

/// A drill rank: DDP over shared memory; rank 1 dies at step 3.
fn drill_rank(args: &Args) -> anyhow::Result<()> {
    let timeout = args.connect.timeout()?;
    let rdv = labkit::rank(3, timeout)?;
    let (rank, world) = (rdv.info.rank, rdv.info.world_size);
    let comm = job::connect(
        &rdv,
        collectives::Backend::Reference,
        TransportKind::Auto,
        Algo::Auto,
        timeout,
        "lab08-drill/",
    )?;
    let t0 = Instant::now();
    match ddp_steps(comm, rank, world, 50, Some((1, 3))) {
        Ok(_) => Ok(()),
        Err(e) => bail!(
            "rank {rank}, {:.1} s into training: {e}",
            t0.elapsed().as_secs_f64()
        ),
    }
}

/// Ring and tree on the 1 Gbit/s link against the α–β prediction: α per
/// message from the unshaped network's ring fit, β from the link's rate.
fn predictions(run: &mut Run, records: &[Record], nodes: &[usize]) -> anyhow::Result<()> {
    let mut fig = Figure::lines(
        "ring-vs-tree",
        "all_reduce over 1 Gbit/s links: measured (solid) and α–β prediction (dashed); lower is better",
        "message size (bytes)",
        "time (µs)",
    );
    let mut said = false;
    for &n in nodes {
        let pts = |label: &str| -> Vec<(f64, f64)> {
            records
                .iter()
                .filter(|r| r.label == label)
                .map(|r| (r.bytes as f64, r.median_us))
                .collect()
        };
        let unshaped = pts(&format!("reference-tcp/ring@{n}nodes-unshaped"));
        let ring = pts(&format!("reference-tcp/ring@{n}nodes-1gbit"));
        let tree = pts(&format!("reference-tcp/tree@{n}nodes-1gbit"));
        if ring.is_empty() || tree.is_empty() {
            continue;
        }
        let factor = 2.0 * (n as f64 - 1.0) / n as f64;
        let alpha = match reports::fit_alpha_beta(&unshaped, factor) {
            reports::Fit::Fitted(m) => m.alpha_us / (2.0 * (n as f64 - 1.0)),
            _ => 0.0,
        };
        // 1 Gbit/s: 8e-3 µs per byte.
        let beta = 8.0 / 1000.0;
        let mut errors = BTreeMap::new();
        for (name, algo, measured) in [
            ("ring", AllReduceAlgorithm::Ring, &ring),
            ("tree", AllReduceAlgorithm::BinomialTree, &tree),
        ] {
            let pred: Vec<[f64; 2]> = measured
                .iter()
                .map(|&(s, _)| [s, algo.predict_us(n, s, alpha, beta)])
                .collect();
            if let (Some(&(s, t)), Some(p)) = (measured.last(), pred.last()) {
                errors.insert(name, (s, t, p[1]));
            }
            fig = fig
                .with(FigureSeries::measured(
                    format!("{name}, {n} nodes"),
                    measured.iter().map(|&(s, t)| [s, t]).collect(),
                ))
                .with(FigureSeries::theory(
                    format!("{name}, {n} nodes, predicted"),
                    pred,
                ));
        }
        for (name, (s, t, p)) in errors {
            println!(
                "  {n} nodes at 1 Gbit/s, {name}, {}: measured {:.0} µs, predicted {:.0} µs ({:+.0}%)",
                measure::size::human(s as u64),
                t,
                p,
                100.0 * (t - p) / p
            );
        }
        said = true;
    }
    if said {
        run.figure(fig)?;
    }
    Ok(())
}
