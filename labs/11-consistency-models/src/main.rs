//! Lab 11: consistency models, run as a learner runs it (`cargo lab 11`).
//!
//! First your staleness bound beside a straggler. Then the MLP trains on
//! Fashion-MNIST with two workers (`--workers`) four ways (synchronous parameter server,
//! asynchronous parameter server, DDP, stale-synchronous with your bound),
//! each without and with one worker several times slower; worker 0's view of
//! the parameters is kept as it goes and evaluated afterwards. Workers are
//! threads of this process. Then, as root, a sharded parameter server against
//! ring all-reduce between processes on simulated hosts, over an unshaped link
//! and a long one ([`across_hosts`]). Writes `results/lab11/<UTC time>/`.

mod across_hosts;

use std::time::Duration;

use across_hosts::{Setup, Via, latency_floor};
use clap::{Parser, ValueEnum};
use lab11_consistency_models::{bound, fashion_mnist, judge, lab_error};
use labkit::{Run, Variant};
use measure::{Figure, FigureSeries};
use trainers::consistency::check::max_ahead;
use trainers::consistency::{Consistency, Job, Straggler, accuracy, train};
use trainers::data::Split;

/// Lab 11: parameter servers, DDP and stale-synchronous training, with a straggler.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// Workers (more than this machine's cores measures the sharing of
    /// cores as much as the consistency model).
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Steps per worker.
    #[arg(long, default_value_t = 400)]
    steps: u64,
    /// Rows per worker per step.
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// The staleness bound of the stale-synchronous trainer.
    #[arg(long, default_value_t = 4)]
    staleness: u64,
    /// How many times slower the straggler (the last worker) is.
    #[arg(long, default_value_t = 4.0)]
    slowdown: f64,
    /// Simulated hosts for part 2 (one rank each).
    #[arg(long, default_value_t = 4)]
    hosts: usize,
    /// Steps per rank in part 2.
    #[arg(long, default_value_t = 40)]
    net_steps: u64,
    /// Hidden width of part 2's MLP (256: 0.2 M parameters, 0.8 MB per exchange).
    #[arg(long, default_value_t = HIDDEN[0])]
    net_width: i64,
    /// The long link's one-way delay in part 2, ms.
    #[arg(long, default_value_t = 50)]
    delay_ms: u64,
    /// The long link's rate in part 2, Mbit/s.
    #[arg(long, default_value_t = 1000)]
    rate_mbit: u64,
    /// A short run (what CI runs).
    #[arg(long)]
    quick: bool,
    /// What this process is (the lab starts itself as the ranks of part 2).
    #[arg(long, value_enum, default_value = "lab", hide = true)]
    role: Role,
    /// How a rank's gradients travel (rank role).
    #[arg(long, value_enum, default_value = "ps", hide = true)]
    via: Via,
    /// Gradient sizes in bytes, comma-separated (sweep role).
    #[arg(long, value_delimiter = ',', hide = true)]
    sizes: Vec<u64>,
    /// Timed exchanges per size (sweep role).
    #[arg(long, default_value_t = 3, hide = true)]
    reps: usize,
    /// Largest gradient part 2's exchange sweep times (from 256 KiB by 4×).
    #[arg(long, default_value = "16M", value_parser = measure::size::parse_size)]
    sweep_max: u64,
    /// Test images rank 0 evaluates on (rank role).
    #[arg(long, default_value_t = 5_000, hide = true)]
    test_rows: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Role {
    /// The whole lab (what a learner runs).
    Lab,
    /// A rank of part 2, inside a simulated host.
    Rank,
    /// A rank of part 2's exchange sweep.
    Sweep,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    labkit::exit(
        match args.role {
            Role::Lab => run(args),
            Role::Rank => across_hosts::rank(
                args.via,
                args.net_steps,
                args.batch,
                args.test_rows,
                &[args.net_width],
            ),
            Role::Sweep => across_hosts::sweep_rank(&args.sizes, args.reps),
        },
        "",
    )
}

const HIDDEN: [i64; 1] = [256];

/// SGD's learning rate, in both parts.
const LR: f64 = 0.05;

fn run(mut args: Args) -> anyhow::Result<()> {
    if args.quick {
        args.steps = 40;
        args.hosts = 2;
        args.net_steps = 10;
        args.sweep_max = 1 << 20;
        args.delay_ms = 10;
    }
    if args.workers < 2 {
        anyhow::bail!(
            "--workers {}: a straggler needs at least 2 workers",
            args.workers
        );
    }
    let variant = Variant::from_env();
    tch::set_num_threads(1);

    // Your bound first: an unsolved starter stops here.
    let c = judge(variant)?;
    println!(
        "your staleness bound ({variant}): beside a 3× straggler no worker started more than {} \
         steps ahead of the slowest (the most: {}); staleness 0 = the synchronous server to the bit",
        c.staleness, c.max_ahead
    );

    let train_set = fashion_mnist(Split::Train)?;
    let test = fashion_mnist(Split::Test)?
        .head(if args.quick { 1_000 } else { 5_000 })
        .map_err(lab_error)?;
    let models = [
        Consistency::SyncPs,
        Consistency::AsyncPs,
        Consistency::Ddp,
        Consistency::Ssp {
            staleness: args.staleness,
        },
    ];
    println!(
        "\nthe MLP 784→256→10, {} workers of {} rows, {} steps each, SGD lr 0.05; worker {} is \
         {}× slower in the second half (\"yes\"); accuracy on {} test images\n",
        args.workers,
        args.batch,
        args.steps,
        args.workers - 1,
        args.slowdown,
        test.len()
    );
    println!(
        "{:<18} {:>10} {:>9} {:>9} {:>14}",
        "", "straggler", "wall s", "accuracy", "most ahead"
    );
    let mut figures = Vec::new();
    let mut walls = Vec::new();
    for slow in [false, true] {
        let mut fig = Figure::lines(
            if slow {
                "accuracy-with-straggler"
            } else {
                "accuracy-no-straggler"
            },
            &if slow {
                format!(
                    "Test accuracy against wall time, worker {} {}× slower (higher and further left is better)",
                    args.workers - 1,
                    args.slowdown
                )
            } else {
                "Test accuracy against wall time, equal workers (higher and further left is better)"
                    .to_owned()
            },
            "seconds",
            "test accuracy",
        );
        for consistency in models {
            let job = Job {
                consistency,
                workers: args.workers,
                batch: args.batch,
                steps: args.steps,
                lr: LR,
                hidden: HIDDEN.to_vec(),
                straggler: slow.then_some(Straggler {
                    worker: args.workers - 1,
                    slowdown: args.slowdown,
                }),
                snapshot_every: (args.steps / 10).max(1),
                bound: bound(variant),
                timeout: Duration::from_secs(120),
                // The plain asynchronous server (the stretch goal's rate is
                // judged by `cargo lab check 11 --stretch`).
                staleness_lr: None,
            };
            let t = train(&job, &train_set).map_err(lab_error)?;
            let mut curve = Vec::new();
            for (s, p) in &t.snapshots {
                curve.push([*s, accuracy(&HIDDEN, p, &test).map_err(lab_error)?]);
            }
            let last = accuracy(&HIDDEN, &t.params, &test).map_err(lab_error)?;
            println!(
                "{:<18} {:>10} {:>9.2} {:>8.1}% {:>14}",
                consistency.name(),
                if slow { "yes" } else { "no" },
                t.seconds,
                100.0 * last,
                max_ahead(&t.log)
            );
            fig = fig.with(FigureSeries::measured(consistency.name(), curve));
            walls.push((consistency.name(), slow, t.seconds));
        }
        figures.push(fig);
    }

    println!(
        "\n2. A sharded parameter server against ring all-reduce, one process per simulated \
         host ({} hosts, {} steps of {} rows each, the MLP 784→{}→10, SGD lr {LR})",
        args.hosts, args.net_steps, args.batch, args.net_width
    );
    println!(
        "  {:<18} {:<16} {:>9} {:>12} {:>8} {:>9}",
        "link", "", "step ms", "exchange ms", "wall s", "accuracy"
    );
    let setup = Setup {
        hosts: args.hosts,
        steps: args.net_steps,
        batch: args.batch,
        delay: Duration::from_millis(args.delay_ms),
        rate_mbit: args.rate_mbit,
        width: args.net_width,
        sweep: std::iter::successors(Some(256u64 << 10), |b| Some(b * 4))
            .take_while(|&b| b <= args.sweep_max)
            .collect(),
    };
    let mut across = Vec::new();
    if let Some((measured, hosts_figures)) = across_hosts::run(&setup, test.len())? {
        for pair in measured.chunks(2) {
            if let [ps, ring] = pair {
                let ratio = ring.step_ms / ps.step_ms;
                println!(
                    "  {}: {}",
                    ps.link,
                    if ratio >= 1.0 {
                        format!("the sharded server's steps are {ratio:.2}× faster")
                    } else {
                        format!("the ring's steps are {:.2}× faster", 1.0 / ratio)
                    }
                );
            }
        }
        across = hosts_figures
            .iter()
            .map(|f| format!("{}.svg", f.name))
            .collect();
        figures.extend(hosts_figures);
        println!(
            "  latency floor of one exchange on the long link: sharded PS {} × {} ms, ring \
             all-reduce {} × {} ms ({} ring steps and the reference backend's agreement round)",
            latency_floor(Via::Ps, args.hosts),
            args.delay_ms,
            latency_floor(Via::Ring, args.hosts),
            args.delay_ms,
            2 * (args.hosts - 1)
        );
    }

    // Only now: a starter that fails above leaves no results folder behind.
    let mut run = Run::start(11, args.workers, "threads (shared memory)")?;
    for f in figures {
        run.figure(f)?;
    }
    let names: Vec<String> = models.iter().map(|m| m.name()).collect();
    let wall = |slow: bool| -> Vec<f64> {
        names
            .iter()
            .map(|n| {
                walls
                    .iter()
                    .find(|(m, s, _)| m == n && *s == slow)
                    .map_or(0.0, |w| w.2)
            })
            .collect()
    };
    let (fast, slow) = (wall(false), wall(true));
    run.figure(
        Figure::stacked_bars(
            "wall-time",
            &format!(
                "Wall time of {} steps per worker (lower is better)",
                args.steps
            ),
            names,
            "seconds",
        )
        .with_layer("equal workers", &fast)
        .with_layer(
            "added by the straggler",
            &slow
                .iter()
                .zip(&fast)
                .map(|(s, f)| (s - f).max(0.0))
                .collect::<Vec<_>>(),
        ),
    )?;
    let dir = run.finish()?;
    println!(
        "\nCharts in {}: accuracy-no-straggler.svg, accuracy-with-straggler.svg, wall-time.svg{}.",
        dir.display(),
        if across.is_empty() {
            String::new()
        } else {
            format!(", {}", across.join(", "))
        }
    );
    Ok(())
}
