//! Lab 13: sharded data parallelism, run as a learner runs it (`cargo lab 13`).
//!
//! First your gradient path: ZeRO-1, ZeRO-2 and ZeRO-3 against DDP on 2 and 3
//! ranks, 10 SGD steps on Fashion-MNIST. Then each stage (and DDP) trains a
//! wider MLP on 2 and 4 ranks, each configuration in a child process of its
//! own so that its resident memory is its own: the model state each rank
//! holds at its peak (counted), the process's peak RSS, the bytes each rank
//! sends per step and the step time. Ranks are threads, each with its own
//! communicator over shared memory and one libtorch thread. Writes
//! `results/lab13/<UTC time>/`.

use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use lab13_sharded_data_parallel::{TOLERANCE, fashion_mnist, judge};
use labkit::{Run, Variant};
use measure::Figure;
use trainers::data::{self, Split};
use trainers::zero::check::{self, Measured};
use trainers::zero::{Memory, Stage, ZeroConfig};

/// Lab 13: ZeRO-1, ZeRO-2 and ZeRO-3 (FSDP) against DDP.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// Width of the MLP's hidden layers.
    #[arg(long, default_value_t = 1024)]
    width: i64,
    /// Hidden layers (each a unit of width² + width parameters).
    #[arg(long, default_value_t = 4)]
    layers: usize,
    /// Rank counts to measure at.
    #[arg(long, value_delimiter = ',', default_value = "2,4")]
    worlds: Vec<usize>,
    /// Rows per rank per step.
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Steps per configuration (the first two are not timed).
    #[arg(long, default_value_t = 12)]
    steps: usize,
    /// A short run: a smaller model (width 512, 3 layers), 2 ranks (what CI runs).
    #[arg(long)]
    quick: bool,
    /// Internal: measure one configuration ("STAGE:WORLD", stage 0–3) in this
    /// process and print one line for the parent.
    #[arg(long, hide = true)]
    child: Option<String>,
}

fn main() -> std::process::ExitCode {
    labkit::exit(run(Args::parse()), "")
}

const MIB: f64 = 1024.0 * 1024.0;

fn config(args: &Args) -> ZeroConfig {
    let mut sizes = vec![784];
    sizes.extend(std::iter::repeat_n(args.width, args.layers));
    sizes.push(10);
    ZeroConfig { sizes }
}

/// A `/proc/self/status` field in KiB.
fn status_kib(field: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .with_context(|| format!("no {field} in /proc/self/status"))
}

/// The child: one configuration, its RSS growth from just before the ranks
/// start to its peak (Linux resets the peak on writing 5 to clear_refs).
fn child(args: &Args, spec: &str) -> anyhow::Result<()> {
    let (stage, world) = spec.split_once(':').context("--child STAGE:WORLD")?;
    let stage = Stage::ALL[stage.parse::<usize>()?.min(3)];
    let world: usize = world.parse()?;
    let cfg = config(args);
    let data = data::synthetic(world * args.batch * args.steps, 13)?;
    if let Err(e) = std::fs::write("/proc/self/clear_refs", "5") {
        // Older kernels and some sandboxes refuse it: the peak then also
        // covers the start-up, which the table's RSS column overstates.
        eprintln!("could not reset the peak RSS ({e}); the RSS figures include start-up");
    }
    let before = status_kib("VmRSS:")?;
    let m = check::measure(stage, &cfg, world, args.batch, args.steps, &data)?;
    let peak = status_kib("VmHWM:")?;
    println!(
        "measured {} {} {} {} {} {} {} {} {}",
        m.peak.params,
        m.peak.grads,
        m.peak.state,
        m.payload[0],
        m.payload[1],
        m.payload[2],
        m.ring_bytes_sent,
        m.step.as_nanos(),
        peak.saturating_sub(before)
    );
    Ok(())
}

/// One configuration's numbers, from its child's line.
struct Row {
    stage: Stage,
    world: usize,
    m: Measured,
    rss_kib: u64,
}

fn spawn(args: &Args, stage: usize, world: usize) -> anyhow::Result<(Measured, u64)> {
    let out = Command::new(std::env::current_exe()?)
        .args(["--width", &args.width.to_string()])
        .args(["--layers", &args.layers.to_string()])
        .args(["--batch", &args.batch.to_string()])
        .args(["--steps", &args.steps.to_string()])
        .args(["--child", &format!("{stage}:{world}")])
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let Some(line) = stdout.lines().find_map(|l| l.strip_prefix("measured ")) else {
        bail!(
            "the child measuring {} on {world} ranks failed ({}): {}",
            Stage::ALL[stage].name(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let v: Vec<f64> = line
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .context("the child's line")?;
    if v.len() != 9 {
        bail!("the child's line has {} numbers, not 9: {line}", v.len());
    }
    let m = Measured {
        peak: Memory {
            params: v[0] as i64,
            grads: v[1] as i64,
            state: v[2] as i64,
        },
        payload: [v[3] as u64, v[4] as u64, v[5] as u64],
        ring_bytes_sent: v[6],
        step: Duration::from_nanos(v[7] as u64),
        loss: f64::NAN,
    };
    Ok((m, v[8] as u64))
}

fn run(mut args: Args) -> anyhow::Result<()> {
    tch::set_num_threads(1);
    if let Some(spec) = args.child.clone() {
        return child(&args, &spec);
    }
    if args.quick {
        (args.width, args.layers, args.worlds, args.steps) = (512, 3, vec![2], 4);
    }
    let variant = Variant::from_env();
    let train = fashion_mnist(Split::Train)?;

    // Your gradient path first: an unsolved starter stops here.
    println!("your gradient path ({variant}) against DDP, 10 SGD steps of 16 images per rank:");
    for world in [2, 3] {
        let mut said = Vec::new();
        for stage in [Stage::One, Stage::Two, Stage::Three] {
            let e = judge(variant, stage, world, &train)?;
            said.push(format!("{} {:.1e}", stage.name(), e.max_diff));
        }
        println!(
            "  {world} ranks: max |Δ| from DDP {} (allowed {TOLERANCE:e})",
            said.join(", ")
        );
    }

    let cfg = config(&args);
    let psi = cfg.parameters();
    println!(
        "\nthe MLP {:?}: ψ = {psi} parameters ({:.1} MiB as f32); SGD with momentum, so DDP holds \
         3ψ per rank; {} rows per rank per step",
        cfg.sizes,
        4.0 * psi as f64 / MIB,
        args.batch
    );
    println!(
        "\n{:<7} {:>5} {:>12} {:>12} {:>12} {:>12} {:>11} {:>12} {:>8}",
        "",
        "ranks",
        "params MiB",
        "grads MiB",
        "momentum MiB",
        "state/DDP",
        "RSS/rank MiB",
        "sent MiB/step",
        "step ms"
    );
    let mut rows: Vec<Row> = Vec::new();
    for &world in &args.worlds {
        for (i, &stage) in Stage::ALL.iter().enumerate() {
            let (m, rss_kib) = spawn(&args, i, world)?;
            let ddp = rows
                .iter()
                .find(|r| r.world == world && r.stage == Stage::Ddp)
                .map_or(m.peak.total(), |r| r.m.peak.total());
            println!(
                "{:<7} {:>5} {:>12.2} {:>12.2} {:>12.2} {:>12.2} {:>11.1} {:>12.2} {:>8.2}",
                stage.name(),
                world,
                4.0 * m.peak.params as f64 / MIB,
                4.0 * m.peak.grads as f64 / MIB,
                4.0 * m.peak.state as f64 / MIB,
                m.peak.total() as f64 / ddp as f64,
                rss_kib as f64 / 1024.0 / world as f64,
                m.ring_bytes_sent / MIB,
                m.step.as_secs_f64() * 1e3
            );
            rows.push(Row {
                stage,
                world,
                m,
                rss_kib,
            });
        }
    }
    println!(
        "\n(n−1)/n ψ per collective with the ring: DDP all-reduces (2×), ZeRO-1/2 reduce-scatter \
         and all-gather (2×), ZeRO-3 all-gathers twice, forward and backward (3×: 1.5× DDP)"
    );

    // Only now: a starter that fails above leaves no results folder behind.
    let top = args.worlds.iter().copied().max().unwrap_or(2);
    let mut run = Run::start(13, top, "shm (thread ranks)")?;
    let labels: Vec<String> = rows
        .iter()
        .map(|r| format!("{} {}r", r.stage.name(), r.world))
        .collect();
    let layer = |f: &dyn Fn(&Row) -> f64| rows.iter().map(f).collect::<Vec<_>>();
    run.figure(
        Figure::stacked_bars(
            "memory-per-rank",
            "Model state per rank at its peak, counted, f32 (lower is better)",
            labels.clone(),
            "MiB",
        )
        .with_layer(
            "parameters",
            &layer(&|r| 4.0 * r.m.peak.params as f64 / MIB),
        )
        .with_layer("gradients", &layer(&|r| 4.0 * r.m.peak.grads as f64 / MIB))
        .with_layer("momentum", &layer(&|r| 4.0 * r.m.peak.state as f64 / MIB)),
    )?;
    run.figure(
        Figure::stacked_bars(
            "rss-per-rank",
            "Peak resident memory the training added to its process, per rank (lower is better)",
            labels.clone(),
            "MiB",
        )
        .with_layer(
            "RSS growth / ranks",
            &layer(&|r| r.rss_kib as f64 / 1024.0 / r.world as f64),
        ),
    )?;
    let sent = |r: &Row, k: usize| {
        let share = (r.world - 1) as f64 / r.world as f64;
        let times = if k == 0 { 2.0 } else { 1.0 };
        times * share * r.m.payload[k] as f64 / MIB
    };
    run.figure(
        Figure::stacked_bars(
            "bytes-per-step",
            "Bytes each rank sends per step, ring algorithms (lower is better)",
            labels.clone(),
            "MiB per step",
        )
        .with_layer("all-reduce", &layer(&|r| sent(r, 0)))
        .with_layer("reduce-scatter", &layer(&|r| sent(r, 1)))
        .with_layer("all-gather", &layer(&|r| sent(r, 2))),
    )?;
    run.figure(
        Figure::stacked_bars(
            "step-time",
            "Median step time, threads on this machine's cores (lower is better)",
            labels,
            "ms",
        )
        .with_layer("step", &layer(&|r| r.m.step.as_secs_f64() * 1e3)),
    )?;
    let dir = run.finish()?;
    println!(
        "\nCharts in {}: memory-per-rank.svg, rss-per-rank.svg, bytes-per-step.svg, step-time.svg.",
        dir.display()
    );
    Ok(())
}
