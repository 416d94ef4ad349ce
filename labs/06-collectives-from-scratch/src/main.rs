//! Lab 6: collectives from scratch, run as a learner runs it (`cargo lab 6`).
//!
//! Every rank first runs the conformance suite's all_reduce and broadcast cases
//! on your algorithms (`src/exercise.rs`, or the backend's own with
//! `--solution`) inside the reference backend, then times your ring beside the
//! reference ring, recursive doubling and the binomial tree, your broadcast
//! beside the backend's, and Gloo's and MPI's all_reduce where they can run,
//! each size as the slowest rank's median (the `ringside bench` harness). Rank 0
//! fits the α–β model, predicts 8 to 1024 ranks, and writes
//! `results/lab06/<UTC time>/` with the results file and its charts.
//!
//! Run plainly it spawns its own ranks; under mpirun it adds MPI's all_reduce:
//! `mpirun --allow-run-as-root -np 2 target/release/lab06-collectives-from-scratch`.

use anyhow::{Context, bail};
use clap::Parser;
use collectives::algorithms::Algo;
use collectives::backends;
use collectives::bench::{self, Case, Combine, Measurement, Settings};
use collectives::job::{self, ConnectArgs, SpawnArgs};
use collectives::{Backend, Collective, conformance};
use lab06_collectives_from_scratch::{RING_LABEL, algorithms};
use labkit::{Run, Variant};
use measure::{Figure, FigureSeries, Record};
use reports::{AllReduceAlgorithm, AlphaBeta, Fit, fit_alpha_beta};

/// Lab 6: your ring all-reduce and tree broadcast, checked and timed inside the
/// reference backend beside its own algorithms, Gloo and MPI.
#[derive(Parser)]
#[command(version)]
struct Args {
    #[command(flatten)]
    spawn: SpawnArgs<2>,
    #[command(flatten)]
    connect: ConnectArgs,
    /// Largest message to time, in bytes (e.g. 16M).
    #[arg(long, default_value = "16M", value_parser = measure::size::parse_size)]
    max_size: u64,
    /// A short run: messages up to 256 KiB, fewer iterations (what CI runs).
    #[arg(long)]
    quick: bool,
}

/// The reference backend's own all_reduce algorithms timed beside yours.
const OWN: [(&str, Algo); 3] = [
    ("reference ring", Algo::Ring),
    ("recursive doubling", Algo::RecursiveDoubling),
    ("tree", Algo::Tree),
];

fn main() -> std::process::ExitCode {
    labkit::exit(run(Args::parse()), "")
}

fn run(args: Args) -> anyhow::Result<()> {
    let variant = Variant::from_env();
    let timeout = args.connect.timeout()?;
    let rdv = labkit::rank(args.spawn.nproc, timeout)?;
    let (rank, world) = (rdv.info.rank, rdv.info.world_size);
    let mut opts = job::options(&rdv)?;
    opts.transport = args.connect.transport;
    opts.timeout = timeout;
    opts.prefix = "lab06/".into();
    // A deadlocked ring is named in seconds, with the launcher's table.
    job::with_flight_recorder(&rdv, &mut opts);
    let comm = backends::reference(rdv.store(), rank, world, &opts)?;
    let mine = algorithms(variant);

    // First: is it right? The suite's cases on this job's ranks.
    comm.plug(Some(mine.clone()));
    let report = conformance::run(&comm, &collectives::plug_check::config(), |_, _| ())
        .with_context(|| format!("rank {rank}: {variant}"))?;
    if let Some(first) = report.failures.first() {
        bail!(
            "rank {rank}: {variant} got {} of {} conformance cases wrong, e.g. {first} \
             (`cargo lab check 6`)",
            report.failures.len(),
            report.cases
        );
    }
    let max = if args.quick { 256 << 10 } else { args.max_size };
    let sizes = measure::size::sweep_sizes(8, max, 4, 0)?;
    bench::check_fits(2 * max, world, bench::available_bytes(), "--max-size")?;
    let mut run = (rank == 0)
        .then(|| Run::start(6, world, comm.transport()))
        .transpose()?;
    if rank == 0 {
        println!(
            "lab 6 on {world} ranks ({variant}): {} conformance cases pass; timing 8 B to {}",
            report.cases,
            measure::size::human(max)
        );
    }
    let settings = |bytes: u64| Settings {
        warmup: 2,
        iters: if args.quick { 5 } else { iterations(bytes) },
        check: false,
        combine: Combine::Max,
    };
    let mut push =
        |label: &str, backend: &str, algo: &str, m: Option<Measurement>| match (run.as_mut(), m) {
            (Some(run), Some(m)) => run.push(m.to_record(label, backend, algo)),
            _ => Ok(()),
        };

    // Your ring, then the backend's own three, size by size.
    for &bytes in &sizes {
        let case = Case::f32_sum(Collective::AllReduce, bytes as usize);
        comm.plug(Some(mine.clone()));
        push(
            RING_LABEL,
            "reference",
            "plugged",
            bench::run(&comm, &case, &settings(bytes))?,
        )?;
        comm.plug(None);
        for (label, algo) in OWN {
            comm.set_algo(algo);
            push(
                label,
                "reference",
                algo.name(),
                bench::run(&comm, &case, &settings(bytes))?,
            )?;
        }
        let case = Case::f32_sum(Collective::Broadcast, bytes as usize);
        comm.plug(Some(mine.clone()));
        push(
            "your tree broadcast",
            "reference",
            "plugged",
            bench::run(&comm, &case, &settings(bytes))?,
        )?;
        comm.plug(None);
        push(
            "reference tree broadcast",
            "reference",
            "tree",
            bench::run(&comm, &case, &settings(bytes))?,
        )?;
    }
    comm.set_algo(Algo::Auto);

    // The libraries, where this job can run them.
    for backend in [Backend::Gloo, Backend::Mpi] {
        if let Some(why) = backend.launcher_problem(rdv.info.launcher) {
            if rank == 0 {
                println!(
                    "{backend}: skipped, {why} (mpirun --allow-run-as-root -np {world} \
                     target/release/lab06-collectives-from-scratch)"
                );
            }
            continue;
        }
        let other = match job::connect(
            &rdv,
            backend,
            args.connect.transport,
            Algo::Auto,
            timeout,
            &format!("lab06-{backend}/"),
        ) {
            Ok(c) => c,
            Err(e) => {
                if rank == 0 {
                    println!("{backend}: skipped, {:#}", anyhow::Error::new(e));
                }
                continue;
            }
        };
        for &bytes in &sizes {
            let case = Case::f32_sum(Collective::AllReduce, bytes as usize);
            let m = bench::run(other.as_ref(), &case, &settings(bytes))?;
            push(&backend.to_string(), &backend.to_string(), "auto", m)?;
        }
    }

    if let Some(mut run) = run {
        let memcpy = labkit::limits::memcpy_gbps(if args.quick { 8 << 20 } else { 64 << 20 });
        let records = run.records().to_vec();
        summarize(&mut run, &records, world, memcpy)?;
        let dir = run.finish()?;
        println!(
            "\nCharts in {}: latency-all_reduce.svg (every algorithm against message size), \
             alpha-beta.svg (the α–β fits of your ring and the tree, and where they cross), \
             predicted-latency.svg (their latency terms at 8 to 1024 ranks).",
            dir.display()
        );
    }
    rdv.close(timeout)?;
    Ok(())
}

/// Fewer iterations for larger messages, so a default run stays near a minute.
fn iterations(bytes: u64) -> usize {
    match bytes {
        0..=65_536 => 200,
        65_537..=1_048_576 => 50,
        _ => 10,
    }
}

/// (bytes, median µs) of `label`'s all_reduce records.
fn curve(records: &[Record], label: &str) -> Vec<(f64, f64)> {
    records
        .iter()
        .filter(|r| r.label == label && r.collective == Collective::AllReduce)
        .map(|r| (r.bytes as f64, r.median_us))
        .collect()
}

/// The figures and the lines a learner reads: your ring against the reference
/// ring, the α–β fits and their crossover, the prediction at scale, busbw.
fn summarize(run: &mut Run, records: &[Record], world: usize, memcpy: f64) -> anyhow::Result<()> {
    let yours = curve(records, RING_LABEL);
    let reference = curve(records, "reference ring");
    let tree = curve(records, "tree");
    println!("\n    size   your ring / reference ring (median time; 1.0 = as fast)");
    for ((bytes, a), (_, b)) in yours.iter().zip(&reference) {
        println!("{:>9}   {:.2}", measure::size::human(*bytes as u64), a / b);
    }
    // Both fitted against the bytes each rank moves in a ring all_reduce, so
    // 1/β reads as busbw (nccl-tests' factor 2(n−1)/n).
    let factor = 2.0 * (world as f64 - 1.0) / world as f64;
    let fit = |pts: &[(f64, f64)]| match fit_alpha_beta(pts, factor.max(1.0)) {
        Fit::Fitted(m) => Some(m),
        _ => None,
    };
    let (Some(ring_fit), Some(tree_fit)) = (fit(&yours), fit(&tree)) else {
        println!("too few sizes for the α–β fit (run without --quick)");
        return Ok(());
    };
    let crossover = cross(&ring_fit, &tree_fit, yours.last().map_or(1.0, |p| p.0));
    println!(
        "\nα–β fit (t = α + β·S·{factor:.2}): your ring α = {:.1} µs, 1/β = {:.2} GB/s (R² {:.2}); \
         tree α = {:.1} µs, 1/β = {:.2} GB/s (R² {:.2})",
        ring_fit.alpha_us,
        ring_fit.bandwidth_gbps().unwrap_or(f64::INFINITY),
        ring_fit.r_squared,
        tree_fit.alpha_us,
        tree_fit.bandwidth_gbps().unwrap_or(f64::INFINITY),
        tree_fit.r_squared,
    );
    match crossover {
        Some(s) => println!(
            "the fitted ring overtakes the tree from {} on",
            measure::size::fmt_bytes(s)
        ),
        None => println!("the fitted ring and tree do not cross in the measured range"),
    }
    if let Some(last) = records
        .iter()
        .filter(|r| r.label == RING_LABEL && r.collective == Collective::AllReduce)
        .max_by_key(|r| r.bytes)
    {
        println!(
            "your ring's busbw at {}: {:.2} GB/s; one core copies {memcpy:.2} GB/s \
             (the shared-memory bound: each byte copied once)",
            measure::size::human(last.bytes),
            last.busbw_gbps.unwrap_or(0.0)
        );
    }

    let line = |name: &str, pts: &[(f64, f64)]| {
        FigureSeries::measured(name, pts.iter().map(|&(s, t)| [s, t]).collect())
    };
    let model = |name: &str, m: &AlphaBeta, pts: &[(f64, f64)]| {
        FigureSeries::theory(
            name,
            pts.iter().map(|&(s, _)| [s, m.predict_us(s)]).collect(),
        )
    };
    run.figure(
        Figure::lines(
            "alpha-beta",
            &format!("all_reduce on {world} ranks: measured and α–β fit (lower is better)"),
            "message size (bytes)",
            "time (µs)",
        )
        .with(line("your ring", &yours))
        .with(model("your ring, α–β fit", &ring_fit, &yours))
        .with(line("tree", &tree))
        .with(model("tree, α–β fit", &tree_fit, &tree)),
    )?;

    // Per-message α: a ring all_reduce on n ranks takes 2(n−1) steps.
    let alpha = ring_fit.alpha_us / (2.0 * (world as f64 - 1.0)).max(1.0);
    let ranks: Vec<usize> = (3..=10).map(|k| 1 << k).collect();
    let predict = |algo: AllReduceAlgorithm, bytes: f64, beta: f64| {
        ranks
            .iter()
            .map(|&p| [p as f64, algo.predict_us(p, bytes, alpha, beta)])
            .collect::<Vec<_>>()
    };
    let beta = ring_fit.beta_us_per_byte;
    run.figure(
        Figure::lines(
            "predicted-latency",
            &format!("all_reduce latency at scale from this machine's α = {alpha:.1} µs per message (lower is better)"),
            "ranks",
            "time (µs)",
        )
        .with(FigureSeries::theory("ring, latency term 2(p−1)α", predict(AllReduceAlgorithm::Ring, 0.0, 0.0)))
        .with(FigureSeries::theory("tree, latency term 2·log2(p)·α", predict(AllReduceAlgorithm::BinomialTree, 0.0, 0.0)))
        .with(FigureSeries::theory("ring, 1 MiB", predict(AllReduceAlgorithm::Ring, f64::from(1 << 20), beta)))
        .with(FigureSeries::theory("tree, 1 MiB", predict(AllReduceAlgorithm::BinomialTree, f64::from(1 << 20), beta))),
    )?;
    let at = |algo: AllReduceAlgorithm| algo.predict_us(1024, 0.0, alpha, 0.0);
    println!(
        "at 1024 ranks the ring's latency term is {:.0} µs, the tree's {:.0} µs ({:.0}×): \
         why NCCL 2.4 added double binary trees",
        at(AllReduceAlgorithm::Ring),
        at(AllReduceAlgorithm::BinomialTree),
        at(AllReduceAlgorithm::Ring) / at(AllReduceAlgorithm::BinomialTree)
    );
    Ok(())
}

/// The smallest size (on a fine log grid up to `max` bytes) from which the
/// ring's fitted time stays below the tree's.
fn cross(ring: &AlphaBeta, tree: &AlphaBeta, max: f64) -> Option<f64> {
    let grid: Vec<f64> = (0..=400)
        .map(|i| 8f64 * (max / 8.0).max(1.0).powf(f64::from(i) / 400.0))
        .collect();
    let first_not = grid
        .iter()
        .rposition(|&s| ring.predict_us(s) >= tree.predict_us(s));
    match first_not {
        None => grid.first().copied(),
        Some(i) => grid.get(i + 1).copied(),
    }
}
