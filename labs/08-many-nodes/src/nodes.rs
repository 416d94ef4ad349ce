//! Part 2's measurement: N ranks on one host, then on 2 and 4 network
//! namespaces as hosts (as root), links shaped with `tc`; one launcher per
//! "node" (`--nnodes/--node-rank`, as on a cluster) with your variables; each
//! job's ranks time all_reduce (auto, ring, tree, and Gloo) and a DDP step.

use std::process::{Command, Stdio};

use anyhow::{Context, bail};
use collectives::Collective;
use collectives::algorithms::Algo;
use collectives::backends;
use collectives::bench::{self, Case, Combine, Settings};
use collectives::job;
use collectives::launch::{self, LaunchSpec};
use collectives::rendezvous::store::Token;
use collectives::transport::TransportKind;
use lab08_many_nodes::{free_port, rank_env};
use labhosts::{Hosts, Link, shape_args};
use labkit::Variant;
use measure::Record;

use crate::args::Args;
use crate::ddp_steps::ddp_steps;

/// What part 2 measured.
pub struct Measured {
    /// The node counts measured (the largest last: the run's world size).
    pub nodes: &'static [usize],
    /// Every record the jobs' rank 0 printed.
    pub records: Vec<Record>,
    /// Each job's median DDP step: (what ran where, ms).
    pub ddp: Vec<(String, f64)>,
}

/// Part 2: the jobs on one host, then on simulated hosts where this machine
/// can make them (it says why not otherwise).
pub fn measure(args: &Args) -> anyhow::Result<Measured> {
    let mut records: Vec<Record> = Vec::new();
    let mut ddp: Vec<(String, f64)> = Vec::new();
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
    Ok(Measured {
        nodes,
        records,
        ddp,
    })
}

/// One node's launcher: `ringside launch --nnodes N --node-rank K` with the
/// variant's rank variables, of `rank_args` ranks.
pub fn node(args: &Args, rank_args: &[&str]) -> anyhow::Result<launch::LaunchReport> {
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
pub fn bench_rank(args: &Args) -> anyhow::Result<()> {
    let timeout = args.connect.timeout()?;
    let rdv = labkit::rank(1, timeout)?;
    let (rank, world) = (rdv.info.rank, rdv.info.world_size);
    let mut opts = job::options(&rdv)?;
    opts.transport = TransportKind::Tcp;
    opts.timeout = timeout;
    opts.prefix = "lab08-bench/".into();
    // A hang across the simulated hosts is named with the launcher's table.
    job::with_flight_recorder(&rdv, &mut opts);
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
