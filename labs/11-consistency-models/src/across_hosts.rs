//! Part 2 of lab 11: a sharded parameter server against ring all-reduce
//! between processes on simulated hosts (lab 8's network namespaces), over
//! the veth bridge as it is and over a long link: 1 Gbit/s egress and a 50 ms
//! one-way delay (labkit's delay line; this kernel has no `sch_netem`).
//! One process per host, started in its namespace with the variables
//! `ringside launch` sets; rank 0 keeps its parameters as it goes and
//! evaluates them after training, so the evaluation costs no wall time.

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::ValueEnum;
use collectives::algorithms::Algo;
use collectives::rendezvous::store::{TOKEN_VAR, Token};
use collectives::transport::TransportKind;
use collectives::{BufferMut, Communicator, Input, ReduceOp, backends, job};
use labhosts::{Hosts, HostsError, Link, shape_args};
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
    /// Gradient sizes (bytes) the exchange sweep times.
    pub sweep: Vec<u64>,
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
        // Fast exchanges vary with the scheduling of 4 ranks on few cores: more
        // of them; the long link's take seconds and vary little.
        let swept = sweep(&hosts, &setup.sweep, if delayed { 3 } else { 9 }, &link)?;
        let mut fig = Figure::lines(
            &format!(
                "exchange-{}",
                if delayed { "long-link" } else { "unshaped" }
            ),
            &format!(
                "{} hosts, {link} links: one exchange of the gradient, median (lower is better)",
                setup.hosts
            ),
            "gradient, MiB",
            "ms",
        );
        for via in [Via::Ps, Via::Ring] {
            let pts: Vec<[f64; 2]> = swept
                .iter()
                .filter(|p| p.0 == via)
                .map(|p| [p.1 as f64 / (1 << 20) as f64, p.2])
                .collect();
            let shown: Vec<String> = pts
                .iter()
                .map(|p| format!("{:.1} ms at {} MiB", p[1], p[0]))
                .collect();
            println!("  {:<18} {:<16} {}", link, via.name(), shown.join(", "));
            fig = fig.with(FigureSeries::measured(via.name(), pts));
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

/// Starts this program with `args` on every host, one rank each (the
/// variables `ringside launch` sets), and returns rank 0's output.
fn ranks(hosts: &Hosts, args: &[String], what: &str) -> anyhow::Result<String> {
    let n = hosts.len();
    let token = Token::generate()?.to_string();
    let port = collectives::launch::free_port()?.to_string();
    let exe = std::env::current_exe()?;
    let mut children = Vec::new();
    for k in 0..n {
        let mut c = hosts.command(k, exe.as_os_str());
        c.args(args)
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
    Ok(labkit::wait_all(children, what, "rank")?)
}

/// The numbers after a line's first word.
fn numbers(line: &str) -> Vec<f64> {
    line.split_whitespace()
        .skip(1)
        .filter_map(|w| w.parse().ok())
        .collect()
}

fn via_arg(via: Via) -> String {
    via.to_possible_value()
        .map_or("ps".into(), |v| v.get_name().to_owned())
}

/// One training job; rank 0's results.
fn job(
    hosts: &Hosts,
    setup: &Setup,
    via: Via,
    link: &str,
    test_rows: usize,
) -> anyhow::Result<Measured> {
    let args: Vec<String> = [
        "--role",
        "rank",
        "--via",
        &via_arg(via),
        "--net-steps",
        &setup.steps.to_string(),
        "--batch",
        &setup.batch.to_string(),
        "--net-width",
        &setup.width.to_string(),
        "--test-rows",
        &test_rows.to_string(),
    ]
    .map(String::from)
    .to_vec();
    let text = ranks(
        hosts,
        &args,
        &format!("the {} job over {link} links", via.name()),
    )?;
    let mut m = Measured {
        link: link.to_owned(),
        step_ms: 0.0,
        exchange_ms: 0.0,
        seconds: 0.0,
        curve: Vec::new(),
    };
    for line in text.lines() {
        match (line.split_whitespace().next(), numbers(line).as_slice()) {
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

/// The exchange alone at every size of `sizes` (bytes of f32 gradient),
/// median of `reps` after one warm-up, both ways: (via, bytes, ms) from rank 0.
fn sweep(
    hosts: &Hosts,
    sizes: &[u64],
    reps: usize,
    link: &str,
) -> anyhow::Result<Vec<(Via, u64, f64)>> {
    let sizes: Vec<String> = sizes.iter().map(u64::to_string).collect();
    let args: Vec<String> = vec![
        "--role".into(),
        "sweep".into(),
        "--sizes".into(),
        sizes.join(","),
        "--reps".into(),
        reps.to_string(),
    ];
    let text = ranks(
        hosts,
        &args,
        &format!("the exchange sweep over {link} links"),
    )?;
    let mut out = Vec::new();
    for line in text.lines() {
        let via = match line.split_whitespace().next() {
            Some("@sweep-ps") => Via::Ps,
            Some("@sweep-ring") => Via::Ring,
            _ => continue,
        };
        if let [bytes, ms] = numbers(line).as_slice() {
            out.push((via, *bytes as u64, *ms));
        }
    }
    Ok(out)
}

/// A rank of the exchange sweep (`--role sweep`): pushes and pulls through
/// the sharded server, then all-reduces with the ring, each size in turn;
/// every timed exchange starts after a barrier, so all ranks start together;
/// rank 0 prints the median of `reps` after one warm-up.
pub fn sweep_rank(sizes: &[u64], reps: usize) -> anyhow::Result<()> {
    let j = Joined::new()?;
    let mut ps = j.sharded_ps(j.world)?;
    let ring = j.connect("lab11-ring/", Algo::Ring)?;
    for &bytes in sizes {
        let len = (bytes / 4) as usize;
        ps.reshard(len).map_err(lab_error)?;
        let mut params = vec![0f32; len];
        let grad = vec![1e-3f32; len];
        let mut buf = grad.clone();
        for via in [Via::Ps, Via::Ring] {
            let mut times = Vec::new();
            for rep in 0..=reps.max(1) {
                ring.barrier()?;
                let t = Instant::now();
                match via {
                    Via::Ps => ps.step(&mut params, &grad, 0.1).map_err(lab_error)?,
                    Via::Ring => ring.all_reduce(
                        Input::InPlace,
                        &mut BufferMut::from_slice(&mut buf),
                        ReduceOp::Avg,
                    )?,
                }
                // The first is a warm-up (TCP windows opening).
                if rep > 0 {
                    times.push(t.elapsed().as_secs_f64() * 1e3);
                }
            }
            times.sort_by(f64::total_cmp);
            if j.rank == 0 {
                println!("@sweep-{} {bytes} {}", via_arg(via), times[times.len() / 2]);
            }
        }
    }
    Ok(())
}

/// A rank that has joined its job: how to connect its communicators.
struct Joined {
    rdv: Box<collectives::rendezvous::env::Rendezvous>,
    opts: backends::Options,
    rank: usize,
    world: usize,
}

impl Joined {
    fn new() -> anyhow::Result<Joined> {
        tch::set_num_threads(1);
        // A 16 MiB ring all-reduce over the long link takes seconds.
        let timeout = Duration::from_secs(120);
        let rdv = labkit::rank(1, timeout)?;
        let (rank, world) = (rdv.info.rank, rdv.info.world_size);
        let mut opts = job::options(&rdv)?;
        opts.transport = TransportKind::Tcp;
        opts.timeout = timeout;
        Ok(Joined {
            rdv,
            opts,
            rank,
            world,
        })
    }

    /// A communicator among the job's ranks, on its own connections.
    fn connect(&self, prefix: &str, algo: Algo) -> anyhow::Result<Box<dyn Communicator>> {
        let mut o = self.opts.clone();
        o.prefix = prefix.to_owned();
        o.algo = algo;
        // A hang across the simulated hosts is named with the launcher's table.
        collectives::job::with_flight_recorder(&self.rdv, &mut o);
        let c = backends::reference(self.rdv.store(), self.rank, self.world, &o)?;
        c.barrier()?;
        Ok(Box::new(c))
    }

    /// A sharded server of `len` parameters: a communicator per shard.
    fn sharded_ps(&self, len: usize) -> anyhow::Result<ShardedPs> {
        let comms = (0..self.world)
            .map(|j| self.connect(&format!("lab11-ps{j}/"), Algo::Auto))
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(ShardedPs::new(comms, len).map_err(lab_error)?)
    }
}

/// A rank of a training job (`--role rank`, started by [`run`] inside a host).
pub fn rank(
    via: Via,
    steps: u64,
    batch: usize,
    test_rows: usize,
    hidden: &[i64],
) -> anyhow::Result<()> {
    let j = Joined::new()?;
    let params: i64 = model(hidden)
        .map_err(lab_error)?
        .0
        .trainable_variables()
        .iter()
        .map(|v| v.numel() as i64)
        .sum();
    // Every communicator ends its connecting with a barrier, so every clock
    // starts with all ranks connected.
    let mut exchange = match via {
        Via::Ps => Exchange::ShardedPs(j.sharded_ps(params as usize)?),
        Via::Ring => Exchange::AllReduce(j.connect("lab11-ring/", Algo::Ring)?),
    };
    let train = fashion_mnist(Split::Train)?;
    let job = NetJob {
        hidden: hidden.to_vec(),
        batch,
        steps,
        lr: crate::LR,
        snapshot_every: (steps / 10).max(1),
    };
    let t = train_rank(&job, &mut exchange, j.rank, j.world, &train).map_err(lab_error)?;
    if j.rank == 0 {
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
