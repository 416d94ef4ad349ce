//! `ringside tour`: the main job. Checks every collective on every backend this
//! machine offers (the reference backend over shared memory and TCP, Gloo, MPI
//! under an MPI launcher, NCCL on a GPU), then prints a short all_reduce size
//! sweep for all of them side by side. A backend that is not available is listed
//! with the reason.

use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use collectives::algorithms::Algo;
use collectives::bench::{self, Combine, Measurement};
use collectives::conformance::{self, SuiteConfig};
use collectives::job::{LoadArgs, SpawnArgs, TimeoutArgs};
use collectives::launch::Load;
use collectives::rendezvous::env::Rendezvous;
use collectives::transport::TransportKind;
use collectives::{Collective, Communicator, DType, ReduceOp};

use crate::cpu_share;
use crate::label::{self, Label};
use crate::progress;
use crate::torch_peer::{self, PeerSweep};
use measure::manifest;
use measure::{ResultsWriter, median_rounds};

#[derive(Debug, Args)]
pub struct TourArgs {
    #[command(flatten)]
    pub spawn: SpawnArgs,
    /// Largest all_reduce in the sweep.
    #[arg(long, default_value = "64M", value_parser = collectives::job::parse_size)]
    pub max_bytes: usize,
    /// Where results and the report go (default: `results/<UTC time>/`).
    #[arg(long)]
    pub out: Option<std::path::PathBuf>,
    /// Skip the torch.distributed peer.
    #[arg(long)]
    pub no_peer: bool,
    /// Timed iterations per size.
    #[arg(short = 'n', long, default_value_t = 20)]
    pub iters: usize,
    /// Sweep every backend and the torch peer this many times, in turn, the
    /// order reversed every other round (A, B, peer, peer, B, A, …), and
    /// keep per size the round with the median time: a slow phase of a
    /// shared machine (seconds long) or one of Gloo's scheduler-tick stalls
    /// (a 4 ms median at a random size) then spoils a round, not the curve.
    /// Five, not three: on a 2-core VM Gloo stalled at some size in 2 of 3
    /// rounds often enough to leave a 4 ms point in its curve.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: u32,
    #[command(flatten)]
    pub wait: TimeoutArgs,
    /// `--load N`: busy loops beside the whole tour (the busy-laptop case).
    #[command(flatten)]
    pub load: LoadArgs,
}

/// A label's communicator, or why this job cannot have one.
type LabelComm = Result<Box<dyn Communicator>, String>;

/// Connects one label for round `round`, or says why this job cannot have
/// it. Each round rendezvouses under its own store prefix: keys a finished
/// round left behind must not answer the next round's connection.
fn connect_label(rdv: &Rendezvous, label: &Label, round: u32, timeout: Duration) -> LabelComm {
    label.connect(
        rdv,
        Algo::Auto,
        timeout,
        &format!("tour-{}/round-{round}/", label.column()),
        ": mpirun -np 2 target/release/ringside tour",
    )
}

pub fn run(args: TourArgs) -> anyhow::Result<i32> {
    let timeout = args.wait.timeout()?;
    let labels = label::parse(&["all".into()], TransportKind::Auto)?;
    let _load = Load::beside_this_job(args.load.load)?;
    let rdv = match collectives::job::start_rank(args.spawn.nproc, timeout)? {
        Err(code) => return Ok(code),
        Ok(r) => r,
    };
    let lead = rdv.info.rank == 0;
    let say = |s: String| {
        if lead {
            println!("{s}");
        }
    };
    say(format!("machine: {}", manifest::machine_line()));
    say(Load::describe(args.load.load));
    if args.load.load == 0
        && let Some(w) = manifest::load_warning()
    {
        say(format!("warning: {w}"));
    }
    say(format!(
        "ringside tour: every backend on {} ranks (launched by {})\n",
        rdv.info.world_size, rdv.info.launcher
    ));
    let out_dir = args
        .out
        .clone()
        .unwrap_or_else(|| std::path::PathBuf::from("results").join(manifest::stamp()));
    let mut results = ResultsWriter::new(
        lead.then(|| out_dir.join("bench.json")),
        manifest::manifest(&measure::build!(), rdv.info.world_size, "per lane", "max"),
    );
    let sizes = bench::sizes(4, args.max_bytes, 4)?;
    let largest = bench::Case {
        collective: Collective::AllReduce,
        dtype: DType::F32,
        op: ReduceOp::Sum,
        root: 0,
        in_place: false,
        bytes: sizes.last().copied().unwrap_or(0),
    };
    bench::check_fits(
        bench::bytes_needed(&largest, rdv.info.world_size)?,
        rdv.info.local_world_size,
        bench::available_bytes(),
        "--max-bytes",
    )?;
    say("1. Every collective, checked exactly against a sequential reference".into());
    let mut failed = 0;
    // One label at a time, its communicator dropped before the next connects:
    // an idle communicator's threads (Gloo's network loop, a spinning
    // transport) would otherwise share the cores with the one being timed.
    // Round 1 checks and times each label; later rounds only time, so the
    // same label's rounds lie a whole cycle of the others apart.
    // Per label (in `labels`' order): its rounds, or None while unavailable.
    let mut rounds_of: Vec<Option<Vec<Vec<Measurement>>>> = vec![None; labels.len()];
    // Per label: the cores the job's ranks used while it was timed, per round.
    let mut cores_of: Vec<Vec<f64>> = vec![Vec::new(); labels.len()];
    // The torch peer takes its rounds in turn with the backends' (A, B, …,
    // torch, A, B, …, torch), as `bench --repeat` does: run after all of them,
    // under load it met another phase of the machine than the Gloo it is
    // compared with (2026-11-27, --load 2: 16 and 64 MiB at 1.34 and 1.35x
    // torch's, against 0.90-1.31 taken in turn by bench).
    let sweep = PeerSweep {
        backend: "gloo",
        collectives: &[Collective::AllReduce],
        min_bytes: 4,
        max_bytes: args.max_bytes,
        factor: 4,
        iters: args.iters,
        warmup: 3,
        dtype: DType::F32,
        op: ReduceOp::Sum,
        root: 0,
        check: true,
        combine: Combine::Max,
        python: None,
        script: None,
    };
    let mut peer_rounds: Vec<Vec<measure::Record>> = Vec::new();
    // Per round: the cores the peer's ranks used while timed (rank 0 only).
    let mut peer_cores: Vec<f64> = Vec::new();
    let mut peer_failed: Option<String> = None;
    let mut peer_round = |round: u32| {
        if !args.no_peer && peer_failed.is_none() {
            match torch_peer::run(&sweep, &rdv, round, timeout) {
                Ok(run) => {
                    peer_rounds.push(run.records);
                    peer_cores.extend(run.cores);
                }
                Err(e) => peer_failed = Some(format!("{e:#}")),
            }
        }
    };
    for round in 1..=args.repeat {
        let first = round == 1;
        // ABBA: in even rounds the peer goes first and the backends follow in
        // reverse order, so no backend always meets the machine just after
        // another's sweep.
        let mut order: Vec<_> = labels
            .iter()
            .zip(rounds_of.iter_mut())
            .zip(cores_of.iter_mut())
            .collect();
        let peer_first = measure::reversed_round(round);
        if peer_first {
            order.reverse();
            peer_round(round);
        }
        for ((label, rounds), cores) in order {
            if !first && rounds.is_none() {
                continue; // not available: said so in round 1
            }
            let comm = match connect_label(&rdv, label, round, timeout) {
                Ok(c) => c,
                Err(why) if first => {
                    say(format!(
                        "   {:>7}: not available here: {why}",
                        label.column()
                    ));
                    continue;
                }
                Err(why) => {
                    anyhow::bail!(
                        "{} failed to connect in round {round}: {why}",
                        label.column()
                    )
                }
            };
            let bar = progress::bar(lead, None, "   {spinner} {prefix}: {pos} cases {msg}")?;
            bar.set_prefix(label.column());
            let checked = if first {
                let started = Instant::now();
                let report =
                    conformance::run(comm.as_ref(), &SuiteConfig::quick(), |done, name| {
                        bar.set_position(done as u64);
                        bar.set_message(name.to_owned());
                    })?;
                for f in &report.failures {
                    eprintln!("FAIL ({}) {f}", label.column());
                }
                failed += report.failures.len();
                Some((report, started.elapsed().as_secs_f64() * 1e3))
            } else {
                None
            };
            bar.set_message(format!("timing all_reduce, round {round}/{}", args.repeat));
            let mut row = Vec::new();
            let meter = cpu_share::Meter::start();
            for &bytes in &sizes {
                let m = bench::all_reduce_f32(comm.as_ref(), bytes, 3, args.iters)?;
                failed += m.wrong.unwrap_or(0);
                row.push(m);
            }
            cores.push(meter.job_cores(comm.as_ref())?);
            bar.finish_and_clear();
            if let Some((report, checked_ms)) = checked {
                say(format!(
                    "   {:>7}: {} cases, {} wrong, {} not supported by the library, {:.0} ms",
                    label.column(),
                    report.cases,
                    report.failures.len(),
                    report.unsupported.len(),
                    checked_ms
                ));
            }
            rounds.get_or_insert_with(Vec::new).push(row);
        }
        if !peer_first {
            peer_round(round);
        }
    }
    let mut swept: Vec<(&Label, Vec<Measurement>)> = Vec::new();
    // Per swept label: the median round's cores.
    let mut shares: Vec<(&Label, f64)> = Vec::new();
    for ((label, rounds), cores) in labels.iter().zip(&rounds_of).zip(&cores_of) {
        let Some(rounds) = rounds else { continue };
        if let Some(c) = measure::median_run(cores, |c| *c) {
            shares.push((label, *c));
        }
        let row: Vec<Measurement> = median_rounds(rounds, |m| m.bytes, |m| m.median_us)
            .into_iter()
            .cloned()
            .collect();
        for m in &row {
            results.push(m.to_record(&label.name, label.backend.name(), "auto"))?;
        }
        swept.push((label, row));
    }

    say(format!(
        "\n2. all_reduce, f32 sum, in place: median of {} iterations, time = slowest rank (us); busbw = algbw x 2(n-1)/n (GB/s){}",
        args.iters,
        if args.repeat > 1 {
            format!("; each size the median of {} rounds", args.repeat)
        } else {
            String::new()
        }
    ));
    let mut header = format!("   {:>8} |", "size");
    for (label, _) in &swept {
        header.push_str(&format!(
            " {:>9} {:>7} |",
            format!("{} us", label.column()),
            "busbw"
        ));
    }
    say(format!("{header} #wrong"));
    for (i, &bytes) in sizes.iter().enumerate() {
        let mut line = format!("   {:>8} |", measure::size::human(bytes as u64));
        let mut wrong = 0;
        for (_, row) in &swept {
            let m = &row[i];
            wrong += m.wrong.unwrap_or(0);
            line.push_str(&format!(" {:>9.2} {:>7.3} |", m.median_us, m.busbw_gbps()));
        }
        say(format!("{line} {wrong:>6}"));
    }
    say(cpu_line(
        &shares,
        peer_rounds
            .iter()
            .flatten()
            .next()
            .zip(measure::median_run(&peer_cores, |c| *c))
            .map(|(r, c)| (r.label.as_str(), *c)),
        rdv.info.world_size,
        cpu_share::host_cores(rdv.info.world_size, rdv.info.local_world_size),
        args.load.load,
    ));

    if !args.no_peer {
        say(
            "\n3. The same sweep with PyTorch's own torch.distributed (gloo), the same timing rule"
                .into(),
        );
        if let Some(why) = &peer_failed {
            say(format!("   torch peer not run: {why}"));
        }
        if let Some(first) = peer_rounds.first() {
            say(format!(
                "   {} sizes measured (torch-gloo), {} round(s), each taken in turn with the backends' rounds",
                first.len(),
                peer_rounds.len()
            ));
        }
        for r in peer_rounds.iter().flatten() {
            failed += r.wrong.max(0) as usize;
        }
        for r in median_rounds(&peer_rounds, |r| r.bytes, |r| r.median_us) {
            results.push(r.clone())?;
        }
    }
    if lead {
        report_step(&results, &out_dir)?;
    }
    say(String::from(
        "\nNext: the workshop: `cargo lab list`, then `cargo lab 1` (its chapter: `cargo xtask book`),\n\
         `cargo run --release -p ringside -- bench --backend gloo` for a full nccl-tests style sweep,\n\
         `cargo run --release -p ringside -- conformance --nproc 4` for the full conformance matrix,\n\
         `cargo run --release -p ringside-benches --bin peers` to compare with MPI and Gloo called directly,\n\
         `cargo run -p ringside -- launch --nproc-per-node 2 -- <program>` to run your own ranks.",
    ));
    rdv.close(timeout)?;
    Ok(if failed == 0 { 0 } else { 1 })
}

/// The line under the sweep's table: the cores the job's ranks used while each
/// backend was timed, and the torch peer's (step 3) while it was, the median
/// round of each; under `--load` what that means for the ranking.
fn cpu_line(
    shares: &[(&Label, f64)],
    peer: Option<(&str, f64)>,
    ranks: usize,
    host: Option<usize>,
    load: usize,
) -> String {
    let mut each: Vec<String> = shares
        .iter()
        .map(|(label, c)| format!("{} {c:.2}", label.column().trim()))
        .collect();
    each.extend(peer.map(|(label, c)| format!("{label} {c:.2}")));
    let mut line = format!(
        "   CPU the {ranks} ranks used while timed, in cores{}: {}",
        cpu_share::of_host(host),
        each.join(", ")
    );
    if load > 0 {
        line.push_str(
            "\n   under load a backend's large sizes follow its share of the cores as much as its design: the busy loops got the rest",
        );
    }
    line
}

/// Step 4: the report from this run's results, its summary, and where it is.
fn report_step(results: &ResultsWriter, out_dir: &std::path::Path) -> anyhow::Result<()> {
    let Some(path) = &results.path else {
        return Ok(());
    };
    println!(
        "\n4. Report: charts, the cost model (α + bandwidth per cache regime) and scale predictions"
    );
    let opts = reports::ReportOptions::new(out_dir.join("report"));
    let report = reports::write_report(&[path], &opts)
        .with_context(|| format!("writing the report for {}", path.display()))?;
    print!("{}", report.summary);
    println!("   results: {}", path.display());
    println!(
        "   report:  {} (open it in a browser; {} charts as SVG and PNG beside it)",
        report.index.display(),
        report.charts.len()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_line_names_each_backend_and_under_load_says_what_it_means() {
        let labels = label::parse(
            &["reference-shm".into(), "gloo".into()],
            TransportKind::Auto,
        )
        .unwrap();
        let shares = vec![(&labels[0], 0.63), (&labels[1], 1.641)];
        let idle = cpu_line(&shares, None, 2, Some(2), 0);
        assert_eq!(
            idle,
            "   CPU the 2 ranks used while timed, in cores (this host has 2): ref-shm 0.63, gloo 1.64"
        );
        let loaded = cpu_line(&shares, None, 2, Some(2), 2);
        assert!(loaded.starts_with(&idle), "{loaded}");
        assert!(loaded.contains("the busy loops got the rest"), "{loaded}");
        assert!(!cpu_line(&shares, None, 2, None, 0).contains("this host"));
        // The torch peer's share comes last, under its records' label.
        assert!(
            cpu_line(&shares, Some(("torch-gloo", 1.204)), 2, Some(2), 0)
                .ends_with("gloo 1.64, torch-gloo 1.20"),
            "the peer's share"
        );
    }
}
