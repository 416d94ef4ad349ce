//! `peers`: runs ringside's all_reduce and the real libraries (OpenMPI over
//! shared memory, Gloo over TCP) with one timing rule, in one run, and prints
//! per-size latency/busbw plus the ratios the project's targets ask for.
//!
//! ```text
//! cargo build --release -p ringside -p ringside-benches
//! cargo run --release -p ringside-benches --bin peers -- --world 2 --json results.jsonl
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};

use collectives::backends::{MPI_THREAD_LEVEL_VAR as THREAD_LEVEL_VAR, MPI_THREAD_LEVELS};
use collectives::job::{LoadArgs, SizeArgs};
use collectives::launch::Load;
use ringside_benches::memcpy;
use ringside_benches::report::{self, Results};
use ringside_benches::sizes::format_size;
use ringside_benches::{Impl, Sweep, child};

/// Compare ringside's all_reduce with OpenMPI and Gloo, in the same run.
///
/// Every implementation sweeps f32-sum all_reduce over sizes -b..-e (times
/// -f), warms up -w iterations, then times -n iterations of
/// {barrier; t0; all_reduce; t1}; the time per iteration is the slowest
/// rank's, and the table shows the median. Results are checked (integer
/// inputs, exact sums): any wrong element or failed process makes the exit
/// status non-zero.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Number of ranks (processes) per implementation.
    #[arg(long, default_value_t = 2)]
    world: usize,
    /// `-b -e -f -n -w`. The default -f 2 hits every size the targets name
    /// (4 KiB, 1, 4, 64 MiB); 4 from 8 B would skip them.
    #[command(flatten)]
    sizes: SizeArgs<50>,
    /// `--load N`: busy loops beside every implementation's run.
    #[command(flatten)]
    load: LoadArgs,
    /// Implementations to run, comma-separated (the possible values are listed
    /// below: the libraries called directly, then ringside's backends).
    #[arg(
        long = "impl",
        default_value = "mpi,gloo-ring,ringside-shm,ringside-tcp",
        long_help = format!(
            "Implementations to run, comma-separated. One of: {}",
            ringside_benches::impls::Impl::names()
        )
    )]
    impls: String,
    /// Write every result record here, one JSON object per line.
    #[arg(long)]
    json: Option<PathBuf>,
    /// The ringside binary (default: `ringside` next to this program).
    #[arg(long)]
    ringside: Option<PathBuf>,
    /// The MPI peer (default: the one build.rs compiled).
    #[arg(long)]
    mpi_peer: Option<PathBuf>,
    /// The Gloo peer (default: the one build.rs compiled).
    #[arg(long)]
    gloo_peer: Option<PathBuf>,
    /// The mpirun to use.
    #[arg(long, default_value = "mpirun")]
    mpirun: PathBuf,
    /// Extra argument for mpirun (repeatable), e.g. `--mpirun-arg=--bind-to --mpirun-arg=none`.
    #[arg(long = "mpirun-arg", allow_hyphen_values = true)]
    mpirun_args: Vec<String>,
    /// The MPI thread level of `mpi` (the C peer's `MPI_Init_thread`),
    /// `ringside-mpi` and `mpi-bare` (RINGSIDE_MPI_THREAD_LEVEL), so the `mpi +us` column
    /// compares the binding alone: `single` (what the C peer's `MPI_Init`
    /// gives), `funneled`, `serialized` or `multiple` (ringside's default).
    /// OpenMPI 4.1 takes its internal locks at every level above `single`.
    #[arg(long, default_value = "single",
          value_parser = clap::builder::PossibleValuesParser::new(MPI_THREAD_LEVELS))]
    mpi_thread_level: String,
    /// Seconds one implementation's whole sweep may take before it is killed.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// Run the implementations this many times, in turn, the order reversed
    /// every other run (A, B, B, A, …; with three, A B C, C B A), so a
    /// machine whose state drifts through the runs favours none, and judge
    /// each size by the run with the median time: one run that falls into a
    /// slow phase of a shared machine then decides nothing. Each judged cell
    /// also counts the runs that met its target, each ringside run against
    /// the library's run of the same round (`3/5`), and gives the median of
    /// those pairings' own values (`~0.06`).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    repeat: u32,
    /// Exit non-zero also when a target is missed or could not be measured.
    #[arg(long)]
    require_targets: bool,
    /// Print the commands that would run, and stop.
    #[arg(long)]
    dry_run: bool,
}

/// One implementation, ready to launch or explained away.
enum Plan {
    Run(Vec<Command>, Option<tempfile::TempDir>),
    /// Timed inside this other implementation's run ([`Impl::measured_in`]).
    Inside(Impl),
    Unavailable(String),
}

fn main() -> ExitCode {
    match real_main() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn real_main() -> Result<ExitCode> {
    let args = Args::parse();
    let sweep = Sweep {
        min_bytes: args.sizes.min_bytes as u64,
        max_bytes: args.sizes.max_bytes as u64,
        factor: args.sizes.factor as u64,
        iters: u32::try_from(args.sizes.iters).context("-n is too large")?,
        warmup: u32::try_from(args.sizes.warmup).context("-w is too large")?,
    };
    sweep.validate()?;
    if args.world < 2 {
        bail!("--world must be at least 2 (got {})", args.world);
    }
    if args.timeout == 0 {
        bail!("--timeout must be at least 1 second");
    }
    let impls = Impl::parse_list(&args.impls)?;
    let sizes = sweep.sizes();
    // Children run in their own process groups (so a timeout can kill all
    // they spawned); that also keeps Ctrl-C from reaching them, so pass it on.
    ctrlc::set_handler(|| {
        child::terminate_running();
        eprintln!("interrupted: stopped the running benchmark");
        std::process::exit(130);
    })
    .context("installing the Ctrl-C handler")?;

    let mut plans = Vec::new();
    for &imp in &impls {
        plans.push((imp, plan(imp, &args, &sweep)?));
    }

    if args.dry_run {
        for (imp, p) in &plans {
            match p {
                Plan::Run(cmds, _) => {
                    for c in cmds {
                        println!("{imp}: {}", show_command(c));
                    }
                }
                Plan::Inside(host) => println!("{imp}: timed inside {host}'s run"),
                Plan::Unavailable(why) => println!("{imp}: peer unavailable: {why}"),
            }
        }
        return Ok(ExitCode::SUCCESS);
    }

    let runnable = plans
        .iter()
        .filter(|(_, p)| matches!(p, Plan::Run(..)))
        .count();
    let bar = ProgressBar::new((runnable * sizes.len()) as u64 * u64::from(args.repeat));
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.enable_steady_tick(Duration::from_millis(200));

    // Runs beside every implementation, from the first run to the last.
    let _load = Load::start(args.load.load)?;
    let mut results = Results::new();
    let mut problems: Vec<String> = Vec::new();
    let mut skipped: Vec<String> = Vec::new();
    // The copy bound at the judged size, measured right after each
    // ringside-shm run (`memcpy::Paired` has why).
    let pairing = args.world == 2 && sizes.contains(&memcpy::JUDGED_AT);
    let mut paired: Vec<memcpy::Paired> = Vec::new();
    // Per implementation with a run of its own, the cores each run kept busy.
    let mut run_cores: BTreeMap<Impl, Vec<f64>> = BTreeMap::new();
    // Run 1 uses the plans made above; later runs make them again (a
    // command runs once).
    let mut next = Some(plans);
    for run in 1..=args.repeat {
        let mut plans = match next.take() {
            Some(p) => p,
            None => impls
                .iter()
                .map(|&imp| plan(imp, &args, &sweep).map(|p| (imp, p)))
                .collect::<Result<Vec<_>>>()?,
        };
        in_turn(run, &mut plans);
        let of = if args.repeat > 1 {
            format!(" run {run}/{}", args.repeat)
        } else {
            String::new()
        };
        for (imp, p) in plans {
            let (cmds, store_dir) = match p {
                Plan::Run(cmds, dir) => (cmds, dir),
                Plan::Inside(_) => continue,
                Plan::Unavailable(why) => {
                    if run == 1 {
                        bar.suspend(|| eprintln!("{imp}: peer unavailable: {why}"));
                        skipped.push(format!("{imp}: peer unavailable: {why}"));
                    }
                    continue;
                }
            };
            bar.set_message(format!("{imp} (world {}){of}", args.world));
            // What this run times: itself, and any timed inside it, each
            // record going to the one its label names.
            let measured: Vec<Impl> = impls
                .iter()
                .copied()
                .filter(|&i| i == imp || i.measured_in() == Some(imp))
                .collect();
            let owner = |label: &str| {
                measured
                    .iter()
                    .copied()
                    .find(|&i| i != imp && i.name() == label)
                    .unwrap_or(imp)
            };
            let out = child::run(cmds, Duration::from_secs(args.timeout), |rec| {
                if owner(&rec.label) == imp {
                    bar.set_message(format!(
                        "{imp} (world {}){of} {} done",
                        args.world,
                        format_size(rec.bytes)
                    ));
                    bar.inc(1);
                }
            });
            // The FileStore directory must outlive the run; drop it now.
            drop(store_dir);

            let cores = out.cores();
            let judged_busbw = out
                .records
                .iter()
                .find(|r| r.bytes == memcpy::JUDGED_AT)
                .map(|r| r.computed_busbw());
            let mut seen = BTreeSet::new();
            for rec in out.records {
                let to = owner(&rec.label);
                for p in rec.inconsistencies() {
                    problems.push(format!("{to} {}: {p}", format_size(rec.bytes)));
                }
                if rec.world != args.world {
                    problems.push(format!(
                        "{to} {}: ran with world {}, asked for {}",
                        format_size(rec.bytes),
                        rec.world,
                        args.world
                    ));
                }
                seen.insert((to, rec.bytes));
                results.insert(to, rec);
            }
            let missing: Vec<String> = measured
                .iter()
                .flat_map(|&i| sizes.iter().map(move |&b| (i, b)))
                .filter(|k| !seen.contains(k))
                .map(|(i, b)| {
                    if i == imp {
                        format_size(b)
                    } else {
                        format!("{} ({i})", format_size(b))
                    }
                })
                .collect();
            if let Some(why) = &out.failure {
                let mut msg = format!("{imp}: {why}");
                if !out.tail.is_empty() {
                    msg.push_str("\n    ");
                    msg.push_str(&out.tail.join("\n    "));
                }
                problems.push(msg);
            } else if !missing.is_empty() {
                problems.push(format!(
                    "{imp}: exited cleanly but reported no result for {}",
                    missing.join(", ")
                ));
            }
            // suspend + eprintln rather than println: shown even when stderr is
            // not a terminal (println on a hidden bar prints nothing).
            let failed = if out.failure.is_some() {
                " (FAILED)"
            } else {
                ""
            };
            if let Some(c) = cores {
                run_cores.entry(imp).or_default().push(c);
            }
            bar.suspend(|| {
                eprintln!(
                    "{imp}{of}: {} sizes in {:.1}s{}{failed}",
                    seen.iter().filter(|(i, _)| *i == imp).count(),
                    out.elapsed.as_secs_f64(),
                    cores.map_or_else(String::new, |c| format!(", {c:.2} cores"))
                )
            });
            if imp == Impl::RingsideShm
                && pairing
                && out.failure.is_none()
                && let Some(busbw) = judged_busbw
            {
                bar.set_message(format!("copy bound after ringside-shm{of}"));
                let (iters, warmup) = bound_passes(&args);
                // The size below as well, for the monotone check.
                let at = [memcpy::JUDGED_AT / 2, memcpy::JUDGED_AT];
                let (bound, doubtful) = measured_bounds(&at, |b| {
                    memcpy::bound_side_by_side(b, iters, warmup, args.world)
                })[1];
                paired.push(memcpy::Paired {
                    run,
                    busbw,
                    bound,
                    doubtful,
                });
            }
        }
    }
    bar.finish_and_clear();

    if let Some(path) = &args.json {
        write_json(path, &results)?;
        eprintln!("wrote {} records to {}", results.len(), path.display());
    }

    println!(
        "all_reduce f32 sum, world {}, {} iters (+{} warm-up) per size; \
         time = slowest rank per iteration, median over iterations",
        args.world, args.sizes.iters, args.sizes.warmup
    );
    println!("{}", Load::describe(args.load.load));
    if impls
        .iter()
        .any(|i| matches!(i, Impl::Mpi | Impl::RingsideMpi | Impl::MpiBare))
    {
        println!(
            "MPI thread level {} for every MPI run (--mpi-thread-level)",
            args.mpi_thread_level
        );
    }
    if impls.contains(&Impl::MpiBare) {
        println!(
            "mpi-bare: MPI_Allreduce called bare in ringside's processes, iteration by \
             iteration in turn with ringside's call (ringside-mpi-beside)"
        );
    }
    if args.repeat > 1 {
        println!(
            "{} runs, implementations alternating; each cell is the run with the median time",
            args.repeat
        );
    }
    println!();
    print!("{}", report::results_table(&results, &impls, &sizes));
    if !run_cores.is_empty() {
        println!("{}", cores_line(&impls, &run_cores));
    }

    let (cells, summary) = report::ratios(&results, &impls, args.world, &sizes);
    let table = report::ratio_table(&cells, &sizes);
    let compared = report::TARGETS
        .iter()
        .any(|t| impls.contains(&t.ours) && impls.contains(&t.theirs));
    if compared {
        println!();
        if !table.is_empty() {
            println!(
                "ratios ringside / library (ok/MISS: a target at this size, and with --repeat the runs that met it, each set against the library's run of the same round, and ~ the median of those runs' own values; bare: for information)"
            );
            print!("{table}");
            println!();
        }
        for t in report::TARGETS {
            if impls.contains(&t.ours) && impls.contains(&t.theirs) {
                println!("target: {}", t.describe());
            }
        }
    }
    let copy_bound = copy_bound(&results, &impls, &sizes, &args, &paired);
    if compared || copy_bound.is_some() {
        let (pass, miss) = match copy_bound {
            Some(true) => (1, 0),
            Some(false) => (0, 1),
            None => (0, 0),
        };
        println!(
            "targets: {} met, {} missed, {} not measured",
            summary.pass + pass,
            summary.miss.len() + miss,
            summary.unmeasured.len()
        );
        for (name, bytes, v) in &summary.miss {
            let shown = report::TARGETS
                .iter()
                .find(|t| t.name == *name)
                .map_or_else(|| format!("{v:.2}"), |t| report::format_judged(*v, t.bound));
            let runs = cells
                .iter()
                .find(|c| c.target.name == *name && c.bytes == *bytes)
                .and_then(|c| Some((c.met_in?, c.paired?, c.target.bound)))
                .map_or_else(String::new, |((k, n), p, bound)| {
                    format!(
                        " (met in {k} of {n} runs; paired {})",
                        report::format_judged(p, bound)
                    )
                });
            println!("  missed {name} at {}: {shown}{runs}", format_size(*bytes));
        }
        if copy_bound == Some(false) {
            println!(
                "  missed shm busbw / single-copy bound at {}",
                format_size(memcpy::JUDGED_AT)
            );
        }
        for (name, bytes) in &summary.unmeasured {
            println!("  not measured {name} at {}", format_size(*bytes));
        }
    }
    for s in &skipped {
        println!("skipped {s}");
    }
    if !problems.is_empty() {
        println!();
        println!("PROBLEMS:");
        for p in &problems {
            println!("  {p}");
        }
        return Ok(ExitCode::FAILURE);
    }
    if args.require_targets
        && (!summary.all_met() || !skipped.is_empty() || copy_bound == Some(false))
    {
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// Puts run `run`'s (from 1) implementations in their order: as listed, or
/// reversed in the runs [`measure::reversed_round`] names (A B C, C B A, …),
/// so each implementation meets a drifting machine as early as late.
fn in_turn<T>(run: u32, items: &mut [T]) {
    if measure::reversed_round(run) {
        items.reverse();
    }
}

/// The cores each implementation's runs kept busy (the median run's, with
/// `--repeat`), in table order.
fn cores_line(impls: &[Impl], run_cores: &BTreeMap<Impl, Vec<f64>>) -> String {
    let each: Vec<String> = impls
        .iter()
        .filter_map(|i| {
            let median = measure::median_run(run_cores.get(i)?, |c| *c)?;
            Some(format!("{i} {median:.2}"))
        })
        .collect();
    format!(
        "CPU each run used, whole run with start-up, in cores (median run): {}",
        each.join(", ")
    )
}

/// Best of how many passes after how many warm ones a bound is measured:
/// at least 20 after 3, the machine's capability, which a slow phase of a
/// shared machine can only hide, never inflate.
fn bound_passes(args: &Args) -> (u32, u32) {
    let iters = u32::try_from(args.sizes.iters).unwrap_or(u32::MAX).max(20);
    (iters, 3)
}

/// The single-copy bound ([`memcpy::Bound`]: memcpy and `y += x` of the same
/// bytes) and ringside-shm's busbw as a share of it, at world 2.
///
/// Judged at [`memcpy::JUDGED_AT`] on `paired`: the bound with both ranks'
/// cores copying at once (as the all_reduce's ranks do; see `memcpy.rs`),
/// measured right after each ringside-shm run and set against that run's
/// busbw; the verdict is the median share ([`memcpy::judged`]). For
/// information, every size of 1 MiB or more that ringside-shm ran is then
/// measured once more, one core alone and two at once, beside the busbw of
/// the median run. `Some(met)`, or `None` where it does not apply or no
/// sound pair was measured.
fn copy_bound(
    results: &Results,
    impls: &[Impl],
    sizes: &[u64],
    args: &Args,
    paired: &[memcpy::Paired],
) -> Option<bool> {
    // At world 2 busbw is what one rank moves; other worlds have no such
    // simple bound.
    if args.world != 2 || !impls.contains(&Impl::RingsideShm) {
        return None;
    }
    let big: Vec<u64> = sizes.iter().copied().filter(|&b| b >= 1 << 20).collect();
    if big.is_empty() {
        return None;
    }
    let (iters, warmup) = bound_passes(args);
    let alone = measured_bounds(&big, |b| memcpy::bound(b, iters, warmup));
    let together = measured_bounds(&big, |b| {
        memcpy::bound_side_by_side(b, iters, warmup, args.world)
    });
    println!();
    println!(
        "copy bound (world 2): memcpy and y += x (f32) of the same bytes, best of {iters} after \
         {warmup} warm passes, by one core alone and by 2 at once (each pass counted at the \
         slower); bound = 2 / (1/memcpy + 1/add): each rank folds in half and copies half"
    );
    println!("every size, measured now (for information; busbw of the median run):");
    println!(
        "{:>10} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11} {:>10} {:>7} {:>7}",
        "size",
        "memcpy 1",
        "add 1",
        "bound 1",
        "memcpy 2",
        "add 2",
        "bound 2",
        "shm busbw",
        "share 1",
        "share 2"
    );
    for ((a, doubtful_a), (t, doubtful_t)) in alone.iter().zip(&together) {
        let bytes = a.copy.bytes;
        let busbw = results
            .get(Impl::RingsideShm, bytes)
            .map(|r| r.computed_busbw());
        let share = |b: &memcpy::Bound| busbw.map(|x| x / b.gbps());
        let doubtful = if *doubtful_a || *doubtful_t {
            " (reference doubtful: not monotone in size)"
        } else {
            ""
        };
        let fmt = |x: Option<f64>| x.map_or("-".into(), |x| format!("{x:.2}"));
        println!(
            "{:>10} {:>11.2} {:>11.2} {:>11.2} {:>11.2} {:>11.2} {:>11.2} {:>10} {:>7} {:>7}{doubtful}",
            format_size(bytes),
            a.copy.gbps(),
            a.add.gbps(),
            a.gbps(),
            t.copy.gbps(),
            t.add.gbps(),
            t.gbps(),
            fmt(busbw),
            fmt(share(a)),
            fmt(share(t)),
        );
    }
    if paired.is_empty() {
        println!(
            "not judged: no ringside-shm run measured {} (the share is judged on a bound \
             measured right after the run)",
            format_size(memcpy::JUDGED_AT)
        );
        return None;
    }
    println!(
        "judged at {}: 2 at once, measured right after each ringside-shm run, beside that \
         run's busbw:",
        format_size(memcpy::JUDGED_AT)
    );
    println!(
        "{:>10} {:>11} {:>11} {:>11} {:>10} {:>7}",
        "run", "memcpy 2", "add 2", "bound 2", "shm busbw", "share 2"
    );
    let judged = memcpy::judged(paired);
    for p in paired {
        let mark = if p.doubtful {
            " (reference doubtful: not monotone in size; not judged)"
        } else if judged.is_some_and(|j| j.run == p.run) {
            " (median)"
        } else {
            ""
        };
        println!(
            "{:>10} {:>11.2} {:>11.2} {:>11.2} {:>10.2} {:>7.2}{mark}",
            p.run,
            p.bound.copy.gbps(),
            p.bound.add.gbps(),
            p.bound.gbps(),
            p.busbw,
            p.share()
        );
    }
    let target = format!(
        "target: ringside-shm busbw >= {:.0}% of the single-copy bound (2 cores at once, \
         measured right after the run) at {}, world 2, median over runs",
        memcpy::TARGET_SHARE * 100.0,
        format_size(memcpy::JUDGED_AT)
    );
    let Some(j) = judged else {
        println!("{target}: not judged, every reference doubtful");
        return None;
    };
    let met = j.share() >= memcpy::TARGET_SHARE;
    println!(
        "{target}: {:.0}% {}",
        j.share() * 100.0,
        if met { "ok" } else { "MISS" }
    );
    Some(met)
}

/// `measure(size)` at every size, ascending; a bigger buffer measured faster
/// than a smaller one means a point fell into a slow phase: those are
/// measured again (twice at most) keeping the best, and any still out of
/// order are marked doubtful (`true`).
fn measured_bounds(
    sizes: &[u64],
    measure: impl Fn(u64) -> memcpy::Bound,
) -> Vec<(memcpy::Bound, bool)> {
    let mut bounds: Vec<memcpy::Bound> = sizes.iter().map(|&b| measure(b)).collect();
    let mut doubtful = Vec::new();
    for _ in 0..2 {
        let rates: Vec<(u64, f64)> = bounds
            .iter()
            .map(|b| (b.copy.bytes, b.copy.gbps()))
            .collect();
        doubtful = memcpy::not_monotone(&rates, 0.15);
        if doubtful.is_empty() {
            break;
        }
        for b in bounds
            .iter_mut()
            .filter(|b| doubtful.contains(&b.copy.bytes))
        {
            let again = measure(b.copy.bytes);
            if again.copy.best_us < b.copy.best_us {
                b.copy = again.copy;
            }
            if again.add.best_us < b.add.best_us {
                b.add = again.add;
            }
        }
    }
    bounds
        .into_iter()
        .map(|b| (b, doubtful.contains(&b.copy.bytes)))
        .collect()
}

/// The flags every implementation takes, as plain byte counts.
fn sweep_flags(sweep: &Sweep) -> Vec<String> {
    vec![
        "-b".into(),
        sweep.min_bytes.to_string(),
        "-e".into(),
        sweep.max_bytes.to_string(),
        "-f".into(),
        sweep.factor.to_string(),
        "-n".into(),
        sweep.iters.to_string(),
        "-w".into(),
        sweep.warmup.to_string(),
    ]
}

fn plan(imp: Impl, args: &Args, sweep: &Sweep) -> Result<Plan> {
    if let Some(host) = imp.measured_in() {
        return Ok(Plan::Inside(host));
    }
    if imp == Impl::Mpi {
        return Ok(plan_mpi(args, sweep));
    }
    if imp == Impl::RingsideMpi || imp == Impl::MpiBare {
        return plan_ringside_mpi(imp == Impl::MpiBare, args, sweep);
    }
    if let Some(algo) = imp.gloo_algorithm() {
        return plan_gloo(algo, args, sweep);
    }
    if let Some(select) = imp.ringside_args() {
        let mut plan = plan_ringside(select, args, sweep);
        if let Plan::Run(cmds, _) = &mut plan {
            for cmd in cmds {
                // Cleared, so the caller's environment cannot pick another
                // algorithm than the name promises (for `ringside-shm`, whose
                // Gloo is not involved, it is harmless).
                cmd.env_remove("RINGSIDE_GLOO_ALGO");
            }
        }
        return Ok(plan);
    }
    bail!("no launcher for {imp}")
}

/// A peer path: the flag if given, else what build.rs compiled.
fn peer_path(flag: &Option<PathBuf>, built: &str, why: &str) -> Result<PathBuf, String> {
    let path = match flag {
        Some(p) => p.clone(),
        None if built.is_empty() => {
            return Err(if why.is_empty() {
                "not built".into()
            } else {
                why.to_string()
            });
        }
        None => PathBuf::from(built),
    };
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "{} does not exist (rebuild ringside-benches)",
            path.display()
        ))
    }
}

fn plan_mpi(args: &Args, sweep: &Sweep) -> Plan {
    let peer = match peer_path(
        &args.mpi_peer,
        env!("RINGSIDE_MPI_PEER"),
        env!("RINGSIDE_MPI_PEER_WHY"),
    ) {
        Ok(p) => p,
        Err(why) => return Plan::Unavailable(why),
    };
    let mut cmd = mpirun(args);
    cmd.arg(peer)
        .args(sweep_flags(sweep))
        .args(["-T", &args.mpi_thread_level]);
    Plan::Run(vec![cmd], None)
}

/// `mpirun -np <world>` with the caller's extra arguments, as root too (the
/// containers this runs in often are), keeping local ranks on shared memory
/// (vader) unless the caller chose a BTL.
fn mpirun(args: &Args) -> Command {
    let mut cmd = Command::new(&args.mpirun);
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    if unsafe { libc::geteuid() } == 0 {
        cmd.arg("--allow-run-as-root");
    }
    cmd.arg("--oversubscribe")
        .arg("-np")
        .arg(args.world.to_string())
        .args(&args.mpirun_args);
    if std::env::var_os("OMPI_MCA_btl").is_none() {
        cmd.env("OMPI_MCA_btl", "self,vader");
    }
    cmd
}

fn plan_gloo(algo: &str, args: &Args, sweep: &Sweep) -> Result<Plan> {
    let peer = match peer_path(
        &args.gloo_peer,
        env!("RINGSIDE_GLOO_PEER"),
        env!("RINGSIDE_GLOO_PEER_WHY"),
    ) {
        Ok(p) => p,
        Err(why) => return Ok(Plan::Unavailable(why)),
    };
    let dir = tempfile::Builder::new()
        .prefix("ringside-gloo-store-")
        .tempdir()
        .context("creating the Gloo FileStore directory")?;
    let prefix = format!("peers-{}-{algo}", std::process::id());
    let cmds = (0..args.world)
        .map(|rank| {
            let mut cmd = Command::new(&peer);
            cmd.env("RANK", rank.to_string())
                .env("WORLD_SIZE", args.world.to_string())
                .env("LOCAL_RANK", rank.to_string())
                .env("LOCAL_WORLD_SIZE", args.world.to_string())
                .arg("-S")
                .arg(dir.path())
                .arg("-p")
                .arg(&prefix)
                .arg("-a")
                .arg(algo)
                .arg("-t")
                .arg(args.timeout.to_string())
                .args(sweep_flags(sweep));
            cmd
        })
        .collect();
    Ok(Plan::Run(cmds, Some(dir)))
}

fn plan_ringside(select: &[&str], args: &Args, sweep: &Sweep) -> Plan {
    let bin = match &args.ringside {
        Some(p) => p.clone(),
        None => match default_ringside() {
            Some(p) => p,
            None => {
                return Plan::Unavailable(
                    "no ringside binary next to this program: build it with \
                     `cargo build --release -p ringside` or pass --ringside PATH"
                        .into(),
                );
            }
        },
    };
    if !bin.is_file() {
        return Plan::Unavailable(format!(
            "{} does not exist: build it with `cargo build --release -p ringside`",
            bin.display()
        ));
    }
    let mut cmd = Command::new(bin);
    cmd.arg("sweep")
        .arg("--nproc")
        .arg(args.world.to_string())
        .args(select)
        .args(sweep_flags(sweep))
        .arg("--jsonl");
    Plan::Run(vec![cmd], None)
}

/// `ringside sweep --backend mpi`, started by `mpirun` like the C MPI peer;
/// with `bare`, `--beside-bare` (`mpi-bare`'s run).
fn plan_ringside_mpi(bare: bool, args: &Args, sweep: &Sweep) -> Result<Plan> {
    let select: &[&str] = if bare {
        &["--backend", "mpi", "--beside-bare"]
    } else {
        &["--backend", "mpi"]
    };
    let ringside = match plan_ringside(select, args, sweep) {
        Plan::Run(mut cmds, _) if cmds.len() == 1 => cmds.remove(0),
        other => return Ok(other),
    };
    // Rank 0 of ringside hosts its store on MASTER_PORT: a free one, so
    // this job cannot collide with another on the default 29500.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .context("picking a free port for ringside's store")?
        .port();
    let mut cmd = mpirun(args);
    cmd.args(["-x", "MASTER_PORT", "-x", THREAD_LEVEL_VAR])
        .env("MASTER_PORT", port.to_string())
        .env(THREAD_LEVEL_VAR, &args.mpi_thread_level)
        .arg(ringside.get_program())
        .args(ringside.get_args());
    Ok(Plan::Run(vec![cmd], None))
}

/// `ringside` in the same directory as this executable (`target/<profile>/`).
fn default_ringside() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let p = exe.parent()?.join("ringside");
    p.is_file().then_some(p)
}

fn show_command(c: &Command) -> String {
    let mut s = String::new();
    for (k, v) in c.get_envs() {
        if let Some(v) = v {
            s.push_str(&format!("{}={} ", k.to_string_lossy(), v.to_string_lossy()));
        }
    }
    s.push_str(&c.get_program().to_string_lossy());
    for a in c.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

fn write_json(path: &Path, results: &Results) -> Result<()> {
    let f = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut w = BufWriter::new(f);
    for rec in results.all() {
        serde_json::to_writer(&mut w, rec)?;
        w.write_all(b"\n")?;
    }
    w.flush()
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::in_turn;

    #[test]
    fn repeated_runs_reverse_the_order_every_other_run() {
        let order = |run| {
            let mut v = vec!["mpi", "gloo-ring", "ringside-shm"];
            in_turn(run, &mut v);
            v
        };
        assert_eq!(order(1), ["mpi", "gloo-ring", "ringside-shm"]);
        assert_eq!(order(2), ["ringside-shm", "gloo-ring", "mpi"]);
        assert_eq!(order(3), order(1));
    }
}
