//! Lab 2: the baseline, run as a learner runs it (`cargo lab 2`).
//!
//! Trains the CNN on Fashion-MNIST on one device with a training step (yours from
//! `src/exercise.rs`, or the real one with `--solution`), times the step's four
//! phases (data, forward, backward, optimizer), evaluates the model on the test
//! set, and writes `results/lab02/<UTC time>/` with the results file and its
//! charts: the median step's phases as one stacked bar per device (the CPU, and
//! `cuda:0` when a CUDA GPU exists), and the training loss.

use std::time::Instant;

use anyhow::Context;
use clap::Parser;
use lab02_baseline::{load, train};
use labkit::{Run, Variant};
use measure::{Figure, FigureSeries};
use tch::Device;
use trainers::data::DataArgs;
use trainers::train::baseline::{Baseline, BaselineRun};
use trainers::train::phases::Phase;

/// Lab 2: single-device training of the CNN on Fashion-MNIST, the step timed by phase.
#[derive(Parser)]
#[command(version)]
struct Args {
    #[command(flatten)]
    data: DataArgs,
    /// Optimizer steps per device.
    #[arg(long, default_value_t = 1500)]
    steps: usize,
    /// Examples per step.
    #[arg(long, default_value_t = 64)]
    batch: usize,
    /// SGD learning rate.
    #[arg(long, default_value_t = 0.01)]
    lr: f64,
    /// SGD momentum.
    #[arg(long, default_value_t = 0.9)]
    momentum: f64,
    /// Seed of the initial weights and the data order.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// libtorch's CPU threads [default: libtorch's choice, one per core].
    #[arg(long)]
    threads: Option<i32>,
    /// Train on the CPU only, even when a CUDA GPU exists.
    #[arg(long)]
    cpu_only: bool,
    /// A short run: 30 steps, 1,000 test examples (what CI runs).
    #[arg(long)]
    quick: bool,
}

fn main() -> std::process::ExitCode {
    labkit::exit(run(Args::parse()), "lab 2: ")
}

fn run(args: Args) -> anyhow::Result<()> {
    let variant = Variant::from_env();
    if let Some(n) = args.threads {
        tch::set_num_threads(n);
    }
    let (steps, test_len) = if args.quick {
        (30, 1_000)
    } else {
        (args.steps, 10_000)
    };
    let t = Instant::now();
    let (train_set, test_set) = load(&args.data.data, test_len)?;
    println!(
        "lab 2 ({variant}): Fashion-MNIST, {} training and {} test images loaded in {:.1} s",
        train_set.len(),
        test_set.len(),
        t.elapsed().as_secs_f64()
    );

    let mut devices = vec![Device::Cpu];
    if args.cpu_only {
        println!("cuda:0 skipped: --cpu-only");
    } else if tch::Cuda::is_available() {
        devices.push(Device::Cuda(0));
    } else {
        println!(
            "cuda:0 skipped: no CUDA device here ({})",
            trainers::torch_info()
        );
    }

    let mut results = Vec::new();
    for &device in &devices {
        let config = Baseline {
            steps,
            batch: args.batch,
            lr: args.lr,
            momentum: args.momentum,
            seed: args.seed,
            warmup: if args.quick { 3 } else { 10 },
            device,
            ..Baseline::default()
        };
        let name = device_name(device);
        let t = Instant::now();
        let r = train(variant, &config, &train_set, &test_set)
            .with_context(|| format!("training on {name}"))?;
        let (first, last) = (r.losses[0], r.losses[r.losses.len() - 1]);
        println!(
            "{name}: {steps} steps of {} in {:.1} s, loss {first:.3} -> {last:.3}, test accuracy \
             {:.2}% (loss {:.4}), {:.0} samples/s",
            args.batch,
            t.elapsed().as_secs_f64(),
            100.0 * r.test.accuracy(),
            r.test.loss(),
            r.samples_per_s
        );
        println!(
            "  median step {:.2} ms: {}",
            1e3 * r.median.total(),
            r.median.summary()
        );
        results.push((name, r));
    }

    let mut run = Run::start(2, 1, "none")?;
    run.figure(phases_figure(&results))?;
    run.figure(loss_figure(&results))?;
    let dir = run.finish()?;
    println!();
    for (name, r) in &results {
        let m = &r.median;
        let top = m.largest();
        let compute = m.get(Phase::Forward) + m.get(Phase::Backward);
        println!(
            "On {name} the bottleneck is {} ({:.0}% of the step); forward + backward are \
             {:.0}%, loading the batch {:.1}%, the optimizer {:.1}%.",
            top.name(),
            100.0 * m.get(top) / m.total(),
            100.0 * compute / m.total(),
            100.0 * m.get(Phase::Data) / m.total(),
            100.0 * m.get(Phase::Optimizer) / m.total(),
        );
    }
    if let [(_, cpu), (gpu, g)] = results.as_slice() {
        println!(
            "{gpu} runs the step {:.1}x faster than the CPU ({:.0} vs {:.0} samples/s).",
            cpu.median.total() / g.median.total(),
            g.samples_per_s,
            cpu.samples_per_s
        );
    }
    println!(
        "The chart {} stacks each phase's median time into one bar per device; {} \
         plots the training loss.",
        dir.join("phases.svg").display(),
        dir.join("loss.svg").display()
    );
    Ok(())
}

fn device_name(device: Device) -> String {
    match device {
        Device::Cuda(i) => format!("cuda:{i}"),
        _ => "cpu".into(),
    }
}

/// One stacked bar per device: each phase's median milliseconds.
fn phases_figure(results: &[(String, BaselineRun)]) -> Figure {
    let categories = results
        .iter()
        .map(|(name, r)| format!("{name} ({:.0} samples/s)", r.samples_per_s))
        .collect();
    Phase::ALL.iter().fold(
        Figure::stacked_bars(
            "phases",
            "Where a training step's time goes (median step, batch of 64)",
            categories,
            "ms per step",
        ),
        |fig, &p| {
            let ms: Vec<f64> = results.iter().map(|(_, r)| 1e3 * r.median.get(p)).collect();
            fig.with_layer(p.name(), &ms)
        },
    )
}

/// The training loss per step, one line per device.
fn loss_figure(results: &[(String, BaselineRun)]) -> Figure {
    results.iter().fold(
        Figure::lines("loss", "Training loss", "step", "cross-entropy"),
        |fig, (name, r)| {
            let points = r
                .losses
                .iter()
                .enumerate()
                .map(|(k, &l)| [(k + 1) as f64, l])
                .collect();
            fig.with(FigureSeries::measured(name.as_str(), points))
        },
    )
}
