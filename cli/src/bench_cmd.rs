//! `ringside bench`: nccl-tests for every backend. The same flags, the same
//! table and bus-bandwidth factors, the same timing rule for Gloo, MPI, NCCL
//! and the reference algorithms — run in turn in one job — and, with
//! `--peer torch`, PyTorch's own `torch.distributed` over the same sizes.
//!
//! Results (with a manifest of build, libraries, host and environment) go to
//! `--json FILE`, rewritten after every size so an interrupted run keeps what
//! it measured.

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Args;
use collectives::bench::{self, Case, Combine, Measurement, Settings};
use collectives::job::{self, ConnectArgs, SpawnArgs};
use collectives::transport::TransportKind;
use collectives::{Backend, Collective, DType, ReduceOp};

use crate::cpu_share;
use crate::label;
use crate::progress;
use crate::torch_peer::{self, PeerRun, PeerSweep, cuda_present};
use collectives::job::{LoadArgs, SizeArgs, parse_size};
use collectives::launch::Load;
use measure::manifest;
use measure::{Pairings, Record, ResultsWriter, median_rounds, pairings};

/// Flags follow nccl-tests where they overlap (`-b -e -f -i -n -w -c -o -d -r -a`).
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pub spawn: SpawnArgs,
    /// Backends to run in turn, comma-separated: reference (over --transport),
    /// reference-shm, reference-tcp, gloo, mpi, nccl, or all. Unavailable ones
    /// are skipped with the reason.
    #[arg(long, default_value = "reference", value_delimiter = ',')]
    pub backend: Vec<String>,
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Collectives, comma-separated (all_reduce, broadcast, reduce, all_gather,
    /// reduce_scatter, all_to_all, gather, scatter, sendrecv), or all.
    #[arg(long, default_value = "all_reduce", value_delimiter = ',')]
    pub collective: Vec<String>,
    #[command(flatten)]
    pub sizes: SizeArgs,
    #[command(flatten)]
    pub load: LoadArgs,
    /// Add this many bytes each step instead of multiplying (when > 0).
    #[arg(short = 'i', long = "stepbytes", default_value = "0", value_parser = parse_size)]
    pub step: usize,
    /// Check results (1) or not (0).
    #[arg(short = 'c', long = "check", default_value_t = 1)]
    pub check: u8,
    /// Reduction: sum, prod, min, max, avg.
    #[arg(short = 'o', long = "op", default_value = "sum", value_parser = parse_op)]
    pub op: ReduceOp,
    /// Element type: float, double, half, bfloat16, int32, int64, uint8.
    #[arg(short = 'd', long = "datatype", default_value = "float", value_parser = parse_dtype)]
    pub dtype: DType,
    /// Root rank of the rooted collectives.
    #[arg(short = 'r', long = "root", default_value_t = 0)]
    pub root: usize,
    /// How ranks' times combine per iteration: max (slowest rank), avg or min.
    #[arg(short = 'a', long = "average", default_value = "max", value_parser = parse_combine)]
    pub combine: Combine,
    /// Per-iteration statistics: add mean and p99 columns.
    #[arg(short = 'I', long = "iteration-stats")]
    pub iteration_stats: bool,
    /// Write results (with a manifest) to this JSON file, rewritten after every size.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Also run a peer over the same sizes: `torch` (torch.distributed: gloo on
    /// CPU, nccl when the nccl backend is benchmarked on a GPU).
    #[arg(long)]
    pub peer: Option<String>,
    /// Python with torch for the torch peer (default: set-up's venv).
    #[arg(long)]
    pub python: Option<PathBuf>,
    /// The torch peer script (default: cli/src/torch_peer.py of this checkout).
    #[arg(long)]
    pub peer_script: Option<PathBuf>,
    /// With --peer: sweep ours and the peer this many times, in turn, in
    /// ABBA order (ours, peer, peer, ours, …: a machine whose state drifts
    /// through the run favours neither side), and compare per size the round
    /// with the median time on each side. On a busy machine the scheduler's state changes
    /// from one sweep to the next (a small Gloo call took 45 µs in some runs
    /// and 130–215 in others beside the same two busy loops), so one sweep
    /// each compares two moments, not two libraries. The nccl-tests tables
    /// show round 1; the side-by-side table and --json hold the median rounds.
    /// The table adds, from the rounds' pairs (ours and the peer's round
    /// taken next to it), `paired`: the median of each round's own ratio,
    /// which a machine swinging between rounds moves less than the ratio of
    /// the median rounds; and `won`: in how many rounds ours was the faster.
    /// Each later round prints both sides' cores while timed, and the table
    /// both sides' median rounds: beside a load the share decides large sizes.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: u32,
}

fn parse_op(s: &str) -> Result<ReduceOp, String> {
    ReduceOp::parse(s).ok_or_else(|| format!("unknown op {s:?} (sum, prod, min, max, avg)"))
}
fn parse_dtype(s: &str) -> Result<DType, String> {
    DType::parse(s).ok_or_else(|| {
        format!("unknown datatype {s:?} (float, double, half, bfloat16, int32, int64, uint8)")
    })
}
fn parse_combine(s: &str) -> Result<Combine, String> {
    Combine::parse(s).ok_or_else(|| format!("unknown -a {s:?} (max, avg, min)"))
}

/// Whether `bench` times `c`: every collective but the barrier, which moves
/// no data (nccl-tests has no barrier test either).
fn benched(c: &Collective) -> bool {
    *c != Collective::Barrier
}

/// Parses a collective list; `all` is every benchmarked collective.
pub fn parse_collectives(list: &[String]) -> anyhow::Result<Vec<Collective>> {
    let mut out = Vec::new();
    for name in list {
        if name.trim().eq_ignore_ascii_case("all") {
            out.extend(Collective::ALL.into_iter().filter(benched));
            continue;
        }
        match Collective::parse(name).filter(benched) {
            Some(c) => out.push(c),
            None => bail!(
                "unknown collective {name:?} (all_reduce, broadcast, reduce, all_gather, \
                 reduce_scatter, all_to_all, gather, scatter, sendrecv, all)"
            ),
        }
    }
    out.dedup();
    Ok(out)
}

/// nccl-tests' size progression: `-f` multiplies, `-i` (when > 0) adds; flags
/// that would measure nothing are an error.
pub fn sizes(min: usize, max: usize, factor: usize, step: usize) -> anyhow::Result<Vec<usize>> {
    Ok(
        measure::size::sweep_sizes(min as u64, max as u64, factor as u64, step as u64)?
            .into_iter()
            .map(|s| s as usize)
            .collect(),
    )
}

/// One side (out-of-place or in-place) of a table row.
#[derive(Clone, Copy, Debug, Default)]
struct Side {
    min: f64,
    median: f64,
    max: f64,
    mean: f64,
    p99: f64,
    algbw: f64,
    busbw: f64,
    wrong: Option<i64>,
}

impl Side {
    fn of(m: &Measurement) -> Side {
        Side {
            min: m.min_us,
            median: m.median_us,
            max: m.max_us,
            mean: m.mean_us,
            p99: m.p99_us,
            algbw: m.algbw_gbps(),
            busbw: m.busbw_gbps(),
            wrong: m.wrong.map(|w| w as i64),
        }
    }
    fn of_record(r: &Record) -> Side {
        Side {
            min: r.min_us,
            median: r.median_us,
            max: r.max_us,
            mean: r.mean_us.unwrap_or(0.0),
            p99: r.p99_us.unwrap_or(0.0),
            algbw: r.algbw_gbps.unwrap_or(0.0),
            busbw: r.busbw_gbps.unwrap_or(0.0),
            wrong: Some(r.wrong).filter(|w| *w >= 0),
        }
    }
    fn cells(&self, stats: bool) -> String {
        let wrong = self.wrong.map_or("N/A".to_owned(), |w| w.to_string());
        let mut s = format!(
            " {:>9.2} {:>9.2} {:>9.2} {:>7.3} {:>7.3} {:>6}",
            self.min, self.median, self.max, self.algbw, self.busbw, wrong
        );
        if stats {
            s.push_str(&format!(" {:>9.2} {:>9.2}", self.mean, self.p99));
        }
        s
    }
}

fn header(stats: bool) -> String {
    let side = if stats {
        format!(
            " {:>9} {:>9} {:>9} {:>7} {:>7} {:>6} {:>9} {:>9}",
            "min", "time", "max", "algbw", "busbw", "#wrong", "mean", "p99"
        )
    } else {
        format!(
            " {:>9} {:>9} {:>9} {:>7} {:>7} {:>6}",
            "min", "time", "max", "algbw", "busbw", "#wrong"
        )
    };
    let width = side.len();
    let units = if stats {
        format!(
            " {:>9} {:>9} {:>9} {:>7} {:>7} {:>6} {:>9} {:>9}",
            "(us)", "(us)", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)"
        )
    } else {
        format!(
            " {:>9} {:>9} {:>9} {:>7} {:>7} {:>6}",
            "(us)", "(us)", "(us)", "(GB/s)", "(GB/s)", ""
        )
    };
    format!(
        "#{:>47}{:^width$}{:^width$}\n#{:>11} {:>12} {:>9} {:>6} {:>5}{side}{side}\n#{:>11} {:>12} {:>9} {:>6} {:>5}{units}{units}",
        "",
        "out-of-place",
        "in-place",
        "size",
        "count",
        "type",
        "redop",
        "root",
        "(B)",
        "(elements)",
        "",
        "",
        ""
    )
}

fn row(
    bytes: usize,
    count: usize,
    dtype: &str,
    op: &str,
    root: i64,
    sides: [Option<Side>; 2],
    stats: bool,
) -> String {
    let mut s = format!(" {bytes:>11} {count:>12} {dtype:>9} {op:>6} {root:>5}");
    for side in sides {
        match side {
            Some(x) => s.push_str(&x.cells(stats)),
            None => s.push_str(
                &Side::default()
                    .cells(stats)
                    .chars()
                    .map(|_| ' ')
                    .collect::<String>(),
            ),
        }
    }
    s
}

pub fn run(args: BenchArgs) -> anyhow::Result<i32> {
    let labels = label::parse(&args.backend, args.connect.transport)?;
    let collectives = parse_collectives(&args.collective)?;
    if let Some(p) = &args.peer
        && p != "torch"
    {
        bail!("unknown --peer {p:?} (torch)");
    }
    if args.sizes.iters == 0 {
        bail!("-n must be at least 1");
    }
    if args.repeat > 1 && args.peer.is_none() {
        bail!(
            "--repeat {} alternates ours with a peer: add --peer torch",
            args.repeat
        );
    }
    // Flags that would measure nothing fail here, before any rank starts.
    let sizes = sizes(
        args.sizes.min_bytes,
        args.sizes.max_bytes,
        args.sizes.factor,
        args.step,
    )?;
    let timeout = args.connect.timeout()?;
    // One load per host for the whole job, peer included: see beside_this_job.
    let _load = Load::beside_this_job(args.load.load)?;
    let rdv = match job::start_rank(args.spawn.nproc, timeout)? {
        Err(code) => return Ok(code),
        Ok(r) => r,
    };
    let (me, world) = (rdv.info.rank, rdv.info.world_size);
    let largest = collectives
        .iter()
        .map(|&collective| {
            let case = Case {
                collective,
                dtype: args.dtype,
                op: args.op,
                root: 0,
                in_place: false,
                bytes: sizes.last().copied().unwrap_or(0),
            };
            bench::bytes_needed(&case, world)
        })
        .try_fold(0, |most, need| need.map(|n| n.max(most)))
        .with_context(|| format!("-e {}", args.sizes.max_bytes))?;
    bench::check_fits(
        largest,
        rdv.info.local_world_size,
        bench::available_bytes(),
        "-e",
    )?;
    if args.root >= world {
        bail!(
            "-r {}: the root must be a rank of this {world}-rank job",
            args.root
        );
    }
    let lead = me == 0;
    let mut results = ResultsWriter::new(
        args.json.clone().filter(|_| lead),
        manifest::manifest(
            &measure::build!(),
            world,
            args.connect.transport.name(),
            args.combine.name(),
        ),
    );
    results.write()?;
    let settings = Settings {
        warmup: args.sizes.warmup,
        iters: args.sizes.iters,
        check: args.check != 0,
        combine: args.combine,
    };
    let say = |s: &str| {
        if lead {
            println!("{s}");
        }
    };
    say(&format!(
        "# ringside bench: {world} ranks (launched by {}); {} {} root {}; {} warm-up + {} timed iterations per size",
        rdv.info.launcher,
        args.dtype.name(),
        args.op.name(),
        args.root,
        args.sizes.warmup,
        args.sizes.iters
    ));
    say(&format!("# machine: {}", manifest::machine_line()));
    say(&format!("# {}", Load::describe(args.load.load)));
    if args.load.load == 0
        && let Some(w) = manifest::load_warning()
    {
        say(&format!("# warning: {w}"));
    }
    say(&format!(
        "# time = median over iterations of the {} rank's time (-a {}); min/max over iterations; busbw = algbw x nccl-tests' factor",
        match args.combine {
            Combine::Max => "slowest",
            Combine::Avg => "mean",
            Combine::Min => "fastest",
        },
        args.combine.name()
    ));
    let mut wrong = 0i64;
    let mut ran_any = false;
    let peer_sweep = args.peer.as_ref().map(|_| PeerSweep {
        backend: if labels.iter().any(|l| l.backend == Backend::Nccl) && cuda_present() {
            "nccl"
        } else {
            "gloo"
        },
        collectives: &collectives,
        min_bytes: args.sizes.min_bytes,
        max_bytes: args.sizes.max_bytes,
        factor: args.sizes.factor,
        iters: args.sizes.iters,
        warmup: args.sizes.warmup,
        dtype: args.dtype,
        op: args.op,
        root: args.root,
        check: args.check != 0,
        combine: args.combine,
        python: args.python.clone(),
        script: args.peer_script.clone(),
    });
    let rounds = args.repeat;
    // Per round, ours and the peer's records, for the side-by-side table.
    let mut ours_rounds: Vec<Vec<Record>> = Vec::new();
    let mut peer_runs: Vec<PeerRun> = Vec::new();
    // Per round and label: the cores the job's ranks used while timed.
    let mut ours_cores: Vec<(u32, String, f64)> = Vec::new();
    // Labels that could not connect in round 1 (said so then) are skipped.
    let mut unavailable: Vec<&str> = Vec::new();
    for round in 1..=rounds {
        let first = round == 1;
        let say_first = |s: &str| {
            if first {
                say(s)
            }
        };
        // The order swaps every round (ours first in odd rounds, the peer
        // first in even ones), so a machine whose state drifts through the
        // run favours neither side: each pair of rounds is ABBA.
        let peer_first = measure::reversed_round(round);
        if !first {
            say(&format!(
                "# round {round}/{rounds}: {} (timing only)",
                if peer_first {
                    "the peer, then ours"
                } else {
                    "ours, then the peer"
                }
            ));
        }
        if peer_first && let Some(sweep) = &peer_sweep {
            peer_runs.push(peer_round(
                sweep, &rdv, round, timeout, lead, &args, &mut wrong,
            )?);
        }
        let mut ours: Vec<Record> = Vec::new();
        for label in &labels {
            if unavailable.contains(&label.name.as_str()) {
                continue;
            }
            let comm = match label.connect(
                &rdv,
                args.connect.algo,
                timeout,
                &format!("bench-{}/r{round}/", label.name),
                " (mpirun -np N ringside bench ...)",
            ) {
                Ok(c) => c,
                Err(why) if first => {
                    say(&format!("#\n# {}: not available here: {why}", label.name));
                    unavailable.push(&label.name);
                    continue;
                }
                Err(why) => bail!("{} failed to connect in round {round}: {why}", label.name),
            };
            ran_any = true;
            let algo = if label.backend.takes_algo() {
                args.connect.algo.name()
            } else {
                "default"
            };
            let meter = cpu_share::Meter::start();
            for &collective in &collectives {
                say_first(&format!(
                    "#\n# {} {collective} ({algo} algorithm)",
                    label.name
                ));
                say_first(&header(args.iteration_stats));
                let bar = progress::bar(
                    lead,
                    Some(sizes.len() as u64),
                    "{bar:30} {pos}/{len} sizes {msg}",
                )?;
                let mut bus = Vec::new();
                for &bytes in &sizes {
                    bar.set_message(measure::size::human(bytes as u64));
                    let mut sides = [None, None];
                    let mut shown: Option<Measurement> = None;
                    for (k, in_place) in [false, true].into_iter().enumerate() {
                        let case = Case {
                            collective,
                            dtype: args.dtype,
                            op: args.op,
                            root: args.root,
                            in_place,
                            bytes,
                        };
                        if let Some(m) =
                            bench::run(comm.as_ref(), &case, &settings).with_context(|| {
                                format!("{} {collective} at {bytes} bytes", label.name)
                            })?
                        {
                            wrong += m.wrong.unwrap_or(0) as i64;
                            bus.push(m.busbw_gbps());
                            sides[k] = Some(Side::of(&m));
                            let record = m.to_record(&label.name, label.backend.name(), algo);
                            if rounds == 1 {
                                results.push(record.clone())?;
                            }
                            if args.peer.is_some() {
                                ours.push(record);
                            }
                            shown.get_or_insert(m);
                        }
                    }
                    if let Some(m) = shown.filter(|_| first) {
                        let line = row(
                            m.bytes,
                            m.count,
                            m.dtype.name(),
                            m.op.map_or("none", ReduceOp::name),
                            m.root.map_or(-1, |r| r as i64),
                            sides,
                            args.iteration_stats,
                        );
                        bar.suspend(|| say(&line));
                    }
                    bar.inc(1);
                }
                bar.finish_and_clear();
                if !bus.is_empty() {
                    say_first(&format!(
                        "# Avg bus bandwidth    : {:.4} GB/s ({} results)",
                        bus.iter().sum::<f64>() / bus.len() as f64,
                        bus.len()
                    ));
                }
            }
            // On a busy machine the share of the cores a backend gets decides
            // its large sizes as much as its design (`cpu_share`).
            let cores = meter.job_cores(comm.as_ref())?;
            say_first(&format!(
                "# CPU the {world} ranks used while timed: {cores:.2} cores{}",
                cpu_share::of_host(cpu_share::host_cores(world, rdv.info.local_world_size))
            ));
            ours_cores.push((round, label.name.clone(), cores));
        }
        ours_rounds.push(ours);
        if !peer_first && let Some(sweep) = &peer_sweep {
            peer_runs.push(peer_round(
                sweep, &rdv, round, timeout, lead, &args, &mut wrong,
            )?);
        }
        if !first {
            // Later rounds print no tables: each side's share of the cores,
            // so a round that went one way can be read against it.
            let mut each: Vec<String> = ours_cores
                .iter()
                .filter(|(r, _, _)| *r == round)
                .map(|(_, label, c)| format!("{label} {c:.2}"))
                .collect();
            let peer = peer_runs
                .last()
                .and_then(|run| Some((run.records.first()?, run.cores?)));
            each.extend(peer.map(|(r, c)| format!("{} {c:.2}", r.label)));
            say(&format!("#   cores while timed: {}", each.join(", ")));
        }
    }
    let (peer_rounds, peer_cores): (Vec<Vec<Record>>, Vec<Option<f64>>) = peer_runs
        .into_iter()
        .map(|run| (run.records, run.cores))
        .unzip();
    if args.peer.is_some() && lead {
        // The median round's cores of a label, ours or the peer's.
        let cores_of = |name: &str| {
            let rounds: Vec<f64> = if peer_rounds.iter().flatten().any(|r| r.label == name) {
                peer_cores.iter().flatten().copied().collect()
            } else {
                ours_cores
                    .iter()
                    .filter(|(_, label, _)| label == name)
                    .map(|(_, _, c)| *c)
                    .collect()
            };
            measure::median_run(&rounds, |c| *c).copied()
        };
        let key = |r: &Record| (r.label.clone(), r.collective, r.bytes, r.in_place);
        let ours: Vec<Record> = median_rounds(&ours_rounds, key, |r| r.median_us)
            .into_iter()
            .cloned()
            .collect();
        let peer: Vec<Record> = median_rounds(&peer_rounds, key, |r| r.median_us)
            .into_iter()
            .cloned()
            .collect();
        // Ours are matched by label too (a round holds every backend's
        // records); the peer's by the case alone.
        let paired = |r: &Record| {
            pairings(
                &ours_rounds,
                &peer_rounds,
                |o| key(o) == key(r),
                |p| p.collective == r.collective && p.bytes == r.bytes && p.in_place == r.in_place,
                |x| x.median_us,
            )
        };
        print!(
            "{}",
            side_by_side(
                &ours,
                &peer,
                &Load::describe(args.load.load),
                rounds,
                paired,
                cores_of
            )
        );
        if rounds > 1 {
            for r in &ours {
                results.push(r.clone())?;
            }
        }
        for r in peer {
            results.push(r)?;
        }
    }
    if !ran_any {
        say("# no backend in the list is available here");
    }
    if let Some(p) = &results.path {
        println!("# results: {}", p.display());
    }
    say(&format!(
        "# Out of bounds values : {wrong} {}",
        if wrong == 0 { "OK" } else { "FAILED" }
    ));
    let mut total = [wrong];
    // Every rank leaves with the same verdict.
    if world > 1 {
        let c = job::connect(
            &rdv,
            Backend::Reference,
            TransportKind::Tcp,
            collectives::algorithms::Algo::Auto,
            timeout,
            "bench-verdict/",
        )?;
        c.all_reduce(
            collectives::Input::InPlace,
            &mut collectives::BufferMut::from_slice(&mut total),
            ReduceOp::Max,
        )?;
    }
    rdv.close(timeout)?;
    Ok(if total[0] == 0 && ran_any { 0 } else { 1 })
}

/// One round of the peer: its records and cores, its wrong results counted on
/// the lead rank, and in round 1 its nccl-tests table and cores printed there.
fn peer_round(
    sweep: &PeerSweep<'_>,
    rdv: &collectives::rendezvous::env::Rendezvous,
    round: u32,
    timeout: std::time::Duration,
    lead: bool,
    args: &BenchArgs,
    wrong: &mut i64,
) -> anyhow::Result<PeerRun> {
    let run = torch_peer::run(sweep, rdv, round, timeout)?;
    if lead {
        *wrong += peer_wrong(&run.records);
        if round == 1 {
            print_peer(&run.records, args);
            if let Some(cores) = run.cores {
                let world = rdv.info.world_size;
                println!(
                    "# CPU the peer's {world} ranks used while timed: {cores:.2} cores{}",
                    cpu_share::of_host(cpu_share::host_cores(world, rdv.info.local_world_size))
                );
            }
        }
    }
    Ok(run)
}

/// One table per (our label, collective): each size's median time beside the
/// peer's and their ratio (ours / peer: below 1 means ringside is faster),
/// and with more than one round, `paired(record)` ([`pairings`]): the median
/// of the rounds' own ratios and in how many rounds ours was the faster.
/// Sides are matched by form (in place or not); torch has only one form of
/// several collectives, so only that form is compared there. `cores(label)`:
/// the cores a side's ranks used while timed (median round), if known.
fn side_by_side(
    ours: &[Record],
    peer: &[Record],
    load: &str,
    rounds: u32,
    paired: impl Fn(&Record) -> Pairings,
    cores: impl Fn(&str) -> Option<f64>,
) -> String {
    let repeated = rounds > 1;
    let mut out = String::new();
    let mut keys: Vec<(&str, String)> = Vec::new();
    for r in ours {
        let k = (r.label.as_str(), r.collective.key().to_string());
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    for (label, collective) in keys {
        let mut rows = String::new();
        let mut ratios = Vec::new();
        let mut paired_ratios = Vec::new();
        // Sizes where ours won more than half the rounds.
        let mut most = 0;
        for r in ours
            .iter()
            .filter(|r| r.label == label && r.collective.key() == collective)
        {
            let Some(p) = peer.iter().find(|p| {
                p.collective == r.collective && p.bytes == r.bytes && p.in_place == r.in_place
            }) else {
                continue;
            };
            let ratio = r.median_us / p.median_us;
            ratios.push(ratio);
            let rounds_part = if repeated {
                let pr = paired(r);
                most += usize::from(2 * pr.won > pr.of);
                paired_ratios.extend(pr.ratio);
                format!(
                    " {:>8} {:>7}",
                    pr.ratio.map_or("-".to_string(), |x| format!("{x:.2}")),
                    format!("{}/{}", pr.won, pr.of)
                )
            } else {
                String::new()
            };
            rows.push_str(&format!(
                "{:>12} {:>9} {:>12.2} {:>12.2} {:>8.2}{rounds_part}\n",
                r.bytes,
                if r.in_place { "in-place" } else { "out" },
                r.median_us,
                p.median_us,
                ratio
            ));
        }
        if ratios.is_empty() {
            continue;
        }
        let peer_label = &peer[0].label;
        let worst = |xs: &[f64]| xs.iter().copied().fold(f64::NAN, f64::max);
        let of_rounds = match rounds {
            1 => String::new(),
            n => format!(", each side the median of {n} rounds taken in turn"),
        };
        out.push_str(&format!(
            "#\n# {label} vs {peer_label} {collective}: median time per size{of_rounds}, ratio = {label} / {peer_label} (< 1: {label} faster)\n# {load}\n"
        ));
        if let (Some(a), Some(b)) = (cores(label), cores(peer_label)) {
            // Beside a load, a side's large sizes follow its share of the
            // cores as much as its design (`cpu_share`).
            out.push_str(&format!(
                "# CPU the ranks used while timed (median round), in cores: {label} {a:.2}, {peer_label} {b:.2}\n"
            ));
        }
        if repeated {
            out.push_str(&format!(
                "# paired: the median over rounds of that round's own ratio; won: in how many rounds {label} was faster than the {peer_label} round taken next to it (rounds run in ABBA order)\n"
            ));
        }
        out.push_str(&format!(
            "#{:>11} {:>9} {:>12} {:>12} {:>8}{}\n",
            "size (B)",
            "form",
            label,
            peer_label,
            "ratio",
            if repeated { "   paired     won" } else { "" }
        ));
        out.push_str(&rows);
        let tail = if repeated {
            format!(
                " (paired {:.2}); {label} faster in most rounds at {most} of {} sizes",
                worst(&paired_ratios),
                ratios.len()
            )
        } else {
            String::new()
        };
        out.push_str(&format!(
            "# worst ratio {:.2} over {} sizes{tail}\n",
            worst(&ratios),
            ratios.len()
        ));
    }
    out
}

/// The peer's wrong elements over `records`.
fn peer_wrong(records: &[Record]) -> i64 {
    records
        .iter()
        .filter_map(|r| Side::of_record(r).wrong)
        .sum()
}

/// Prints the torch peer's records as tables.
fn print_peer(records: &[Record], args: &BenchArgs) {
    let mut current = String::new();
    let mut i = 0;
    while i < records.len() {
        let r = &records[i];
        let key = format!("{} {}", r.label, r.collective.key());
        if key != current {
            println!("#\n# {key} (peer: torch.distributed, same timing rule)");
            println!("{}", header(args.iteration_stats));
            current = key;
        }
        // Out-of-place and in-place records of one size sit next to each other.
        let mut sides = [None, None];
        let mut j = i;
        while j < records.len()
            && records[j].bytes == r.bytes
            && records[j].collective == r.collective
        {
            let k = usize::from(records[j].in_place);
            sides[k] = Some(Side::of_record(&records[j]));
            j += 1;
        }
        println!(
            "{}",
            row(
                r.bytes as usize,
                r.count as usize,
                &r.dtype,
                &r.op,
                r.root,
                sides,
                args.iteration_stats
            )
        );
        i = j.max(i + 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_step_or_multiply() {
        assert_eq!(sizes(8, 32, 2, 0).unwrap(), vec![8, 16, 32]);
        assert_eq!(sizes(8, 32, 2, 8).unwrap(), vec![8, 16, 24, 32]);
    }

    #[test]
    fn lists_parse() {
        let c = parse_collectives(&["allreduce".into(), "all_gather".into()]).unwrap();
        assert_eq!(c, vec![Collective::AllReduce, Collective::AllGather]);
        assert_eq!(parse_collectives(&["all".into()]).unwrap().len(), 9);
        assert!(parse_collectives(&["barrier".into()]).is_err());
    }

    fn rec(label: &str, bytes: u64, median_us: f64) -> Record {
        let line = format!(
            r#"{{"label":"{label}","backend":"gloo","algo":"default","peer":false,"collective":"all_reduce","world":2,"bytes":{bytes},"count":{},"dtype":"f32","op":"sum","root":-1,"in_place":true,"iters":10,"min_us":{median_us},"median_us":{median_us},"max_us":{median_us},"wrong":0}}"#,
            bytes / 4
        );
        match measure::parse_line(&line) {
            Ok(Some(r)) => r,
            other => panic!("test record did not parse: {other:?}"),
        }
    }

    #[test]
    fn side_by_side_shows_the_paired_ratio_and_rounds_won_only_for_repeated_rounds() {
        let ours = [rec("gloo", 16, 5.0), rec("gloo", 64, 12.0)];
        let peer = [rec("torch-gloo", 16, 10.0), rec("torch-gloo", 64, 10.0)];
        let won = |r: &Record| {
            let (won, ratio) = if r.bytes == 16 { (3, 0.4) } else { (1, 1.1) };
            Pairings {
                won,
                of: 3,
                ratio: Some(ratio),
            }
        };
        let cores = |label: &str| match label {
            "gloo" => Some(1.234),
            "torch-gloo" => Some(0.9),
            _ => None,
        };
        let table = side_by_side(&ours, &peer, "idle", 3, won, cores);
        assert!(
            table.contains("(median round), in cores: gloo 1.23, torch-gloo 0.90\n"),
            "{table}"
        );
        let row = |size: &str| {
            table
                .lines()
                .find(|l| l.split_whitespace().next() == Some(size))
                .unwrap_or_else(|| panic!("no row for {size} in\n{table}"))
                .to_string()
        };
        assert!(row("16").ends_with(" 0.50     0.40     3/3"), "{table}");
        assert!(row("64").ends_with(" 1.20     1.10     1/3"), "{table}");
        assert!(
            table.contains("paired: the median over rounds")
                && table.contains("won: in how many rounds gloo was faster"),
            "{table}"
        );
        assert!(
            table.contains(
                "worst ratio 1.20 over 2 sizes (paired 1.10); gloo faster in most rounds at 1 of 2 sizes\n"
            ),
            "{table}"
        );
        let header = table.lines().find(|l| l.contains("size (B)")).unwrap();
        assert_eq!(header.len(), row("64").len(), "\n{header}\n{}", row("64"));
        let once = side_by_side(&ours, &peer, "idle", 1, won, |_| None);
        assert!(!once.contains("CPU"), "{once}");
        assert!(!once.contains("won") && !once.contains("paired"), "{once}");
        assert!(once.contains(" 1.20\n"), "{once}");
        assert!(once.contains("worst ratio 1.20 over 2 sizes\n"), "{once}");
    }

    #[test]
    fn header_and_rows_line_up() {
        let h = header(false);
        let m = Side {
            median: 1.0,
            wrong: Some(0),
            ..Side::default()
        };
        let r = row(1024, 256, "float", "sum", -1, [Some(m), Some(m)], false);
        let last = h.lines().nth(1).unwrap();
        assert_eq!(last.len(), r.len(), "\n{last}\n{r}");
    }
}
