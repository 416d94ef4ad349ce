//! Part 2 of lab 11: a sharded parameter server against ring all-reduce
//! between processes on simulated hosts (lab 8's network namespaces), over
//! the veth bridge as it is and over a long link: 1 Gbit/s egress and a 50 ms
//! one-way delay (labkit's delay line; this kernel has no `sch_netem`).
//! One process per host, started in its namespace with the variables
//! `ringside launch` sets; rank 0 keeps its parameters as it goes and
//! evaluates them after training, so the evaluation costs no wall time.

use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::ValueEnum;
use collectives::algorithms::Algo;
use collectives::rendezvous::store::{TOKEN_VAR, Token};
use collectives::transport::TransportKind;
use collectives::{Communicator, backends, job};
use labkit::hosts::{Hosts, HostsError, Link, shape_args};
use measure::{Figure, FigureSeries};
use trainers::consistency::network::{Exchange, NetJob, train_rank};
use trainers::consistency::sharded_ps::ShardedPs;
use trainers::consistency::{accuracy, model};
use trainers::data::Split;

use crate::{fashion_mnist, lab_error};

/// How a rank's gradients travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Via {
    /// A sharded parameter server (one shard per host).
    Ps,
    /// Ring all-reduce.
    Ring,
}

impl Via {
    fn name(self) -> &'static str {
        match self {
            Via::Ps => "sharded PS",
            Via::Ring => "ring all-reduce",
        }
    }
}

/// The part's settings.
pub struct Setup {
    /// Hosts (one rank each).
    pub hosts: usize,
    /// Steps each rank trains.
    pub steps: u64,
    /// Rows per rank per step.
    pub batch: usize,
    /// The long link's one-way delay.
    pub delay: Duration,
    /// The long link's egress rate.
    pub rate_mbit: u64,
    /// The MLP's hidden width.
    pub width: i64,
}

/// One configuration's result, from rank 0.
pub struct Measured {
    /// `unshaped` or the long link's name.
    pub link: String,
    /// Median step, ms.
    pub step_ms: f64,
    /// Median exchange (push + pull, or the all-reduce), ms.
    pub exchange_ms: f64,
    /// Wall time of all steps, s.
    pub seconds: f64,
    /// (seconds, test accuracy) along the way.
    pub curve: Vec<[f64; 2]>,
}

/// Runs both exchanges on both links; `None` (with the reason printed) where
/// this machine cannot make simulated hosts.
pub fn run(
    setup: &Setup,
    test_rows: usize,
) -> anyhow::Result<Option<(Vec<Measured>, Vec<Figure>)>> {
    if let Err(why) = Hosts::available() {
        println!("  skipped: {why}");
        return Ok(None);
    }
    let long = format!(
        "{} + {} ms",
        Link {
            rate_mbit: setup.rate_mbit
        }
        .name(),
        setup.delay.as_millis()
    );
    let mut all = Vec::new();
    let mut figures = Vec::new();
    for (link, delayed) in [("unshaped".to_owned(), false), (long, true)] {
        let hosts = if delayed {
            let h = match Hosts::create_with_delay(setup.hosts, setup.delay) {
                Ok(h) => h,
                Err(HostsError::Unavailable(why)) => {
                    println!("  {link}: skipped: {why}");
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            h.shape(
                Some(Link {
                    rate_mbit: setup.rate_mbit,
                }),
                shape_args,
            )?;
            h
        } else {
            Hosts::create(setup.hosts)?
        };
        let mut fig = Figure::lines(
            &format!(
                "across-hosts-{}",
                if delayed { "long-link" } else { "unshaped" }
            ),
            &format!(
                "{} hosts, {link} links: test accuracy against wall time (higher and further left is better)",
                setup.hosts
            ),
            "seconds",
            "test accuracy",
        );
        for via in [Via::Ps, Via::Ring] {
            let m = job(&hosts, setup, via, &link, test_rows)?;
            println!(
                "  {:<18} {:<16} {:>9.1} {:>12.1} {:>8.2} {:>8.1}%",
                m.link,
                via.name(),
                m.step_ms,
                m.exchange_ms,
                m.seconds,
                100.0 * m.curve.last().map_or(0.0, |p| p[1])
            );
            fig = fig.with(FigureSeries::measured(via.name(), m.curve.clone()));
            all.push(m);
        }
        figures.push(fig);
    }
    Ok(Some((all, figures)))
}

/// The latency floor of one exchange over a link of one-way delay `d` among
/// `n` hosts, in delays: the server's push and pull are one each; the ring's
/// 2(n − 1) steps each wait for their neighbour's message, after the reference
/// backend's agreement round (a dissemination barrier, ⌈log₂ n⌉ rounds).
pub fn latency_floor(via: Via, n: usize) -> usize {
    match via {
        Via::Ps => 2,
        Via::Ring => 2 * (n - 1) + n.next_power_of_two().trailing_zeros() as usize,
    }
}

/// One job: a process per host, rank 0's output parsed.
fn job(
    hosts: &Hosts,
    setup: &Setup,
    via: Via,
    link: &str,
    test_rows: usize,
) -> anyhow::Result<Measured> {
    let n = hosts.len();
    let token = Token::generate()?.to_string();
    let port = lab_port()?.to_string();
    let exe = std::env::current_exe()?;
    let mut children = Vec::new();
    for k in 0..n {
        let mut c = hosts.command(k, exe.as_os_str());
        c.args(["--role", "rank", "--via"])
            .arg(
                via.to_possible_value()
                    .map_or("ps".into(), |v| v.get_name().to_owned()),
            )
            .args(["--net-steps", &setup.steps.to_string()])
            .args(["--batch", &setup.batch.to_string()])
            .args(["--net-width", &setup.width.to_string()])
            .args(["--test-rows", &test_rows.to_string()])
            .envs([
                ("RANK", k.to_string()),
                ("WORLD_SIZE", n.to_string()),
                ("LOCAL_RANK", "0".into()),
                ("LOCAL_WORLD_SIZE", "1".into()),
                ("MASTER_ADDR", hosts.addr(0).to_string()),
                ("MASTER_PORT", port.clone()),
                (TOKEN_VAR, token.clone()),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        children.push(c.spawn().with_context(|| format!("starting rank {k}"))?);
    }
    let mut failed = Vec::new();
    let mut text = String::new();
    for (k, c) in children.into_iter().enumerate() {
        let out = c.wait_with_output()?;
        if !out.status.success() {
            failed.push(format!(
                "rank {k}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        if k == 0 {
            text = String::from_utf8_lossy(&out.stdout).into_owned();
        }
    }
    if !failed.is_empty() {
        bail!(
            "the {} job over {link} links failed:\n{}",
            via.name(),
            failed.join("\n")
        );
    }
    let mut m = Measured {
        link: link.to_owned(),
        step_ms: 0.0,
        exchange_ms: 0.0,
        seconds: 0.0,
        curve: Vec::new(),
    };
    for line in text.lines() {
        let nums: Vec<f64> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|w| w.parse().ok())
            .collect();
        match (line.split_whitespace().next(), nums.as_slice()) {
            (Some("@point"), [s, a]) => m.curve.push([*s, *a]),
            (Some("@times"), [step, ex, total]) => {
                (m.step_ms, m.exchange_ms, m.seconds) = (*step, *ex, *total)
            }
            _ => {}
        }
    }
    if m.curve.is_empty() {
        bail!(
            "rank 0 of the {} job printed no results:\n{text}",
            via.name()
        );
    }
    Ok(m)
}

/// A port for the job's store: any port is free inside the namespaces, but
/// one the root namespace also has free keeps two runs' numbers apart.
fn lab_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    Ok(l.local_addr()?.port())
}

/// A rank of a job (`--role rank`, started by [`run`] inside a host).
pub fn rank(
    via: Via,
    steps: u64,
    batch: usize,
    test_rows: usize,
    hidden: &[i64],
) -> anyhow::Result<()> {
    tch::set_num_threads(1);
    let timeout = Duration::from_secs(60);
    let rdv = labkit::rank(1, timeout)?;
    let (rank, world) = (rdv.info.rank, rdv.info.world_size);
    let mut opts = job::options(&rdv)?;
    opts.transport = TransportKind::Tcp;
    opts.timeout = timeout;
    let connect = |prefix: String, algo: Algo| -> anyhow::Result<Box<dyn Communicator>> {
        let mut o = opts.clone();
        o.prefix = prefix;
        o.algo = algo;
        Ok(Box::new(backends::reference(rdv.store(), rank, world, &o)?))
    };
    let params: i64 = model(hidden)
        .map_err(lab_error)?
        .0
        .trainable_variables()
        .iter()
        .map(|v| v.numel() as i64)
        .sum();
    let mut exchange = match via {
        Via::Ps => {
            let comms = (0..world)
                .map(|j| connect(format!("lab11-ps{j}/"), Algo::Auto))
                .collect::<anyhow::Result<Vec<_>>>()?;
            // Everyone connected before anyone's clock starts.
            comms[0].barrier()?;
            Exchange::ShardedPs(ShardedPs::new(comms, params as usize).map_err(lab_error)?)
        }
        Via::Ring => {
            let comm = connect("lab11-ring/".into(), Algo::Ring)?;
            comm.barrier()?;
            Exchange::AllReduce(comm)
        }
    };
    let train = fashion_mnist(Split::Train)?;
    let job = NetJob {
        hidden: hidden.to_vec(),
        batch,
        steps,
        lr: crate::LR,
        snapshot_every: (steps / 10).max(1),
    };
    let t = train_rank(&job, &mut exchange, rank, world, &train).map_err(lab_error)?;
    if rank == 0 {
        let test = fashion_mnist(Split::Test)?
            .head(test_rows)
            .map_err(lab_error)?;
        for (s, p) in &t.snapshots {
            println!(
                "@point {s} {}",
                accuracy(hidden, p, &test).map_err(lab_error)?
            );
        }
        let median = |v: &[f64]| {
            let mut v = v.to_vec();
            v.sort_by(f64::total_cmp);
            v.get(v.len() / 2).copied().unwrap_or(0.0) * 1e3
        };
        println!(
            "@times {} {} {}",
            median(&t.step_seconds),
            median(&t.exchange_seconds),
            t.step_seconds.iter().sum::<f64>()
        );
    }
    Ok(())
}
