//! Lab 3: Hogwild!, run as a learner runs it (`cargo lab 3`).
//!
//! For 1, 2 and 4 worker processes in turn, the parent puts a fresh CNN's
//! parameters in shared memory (your `fill`, or trainers' with `--solution`) and
//! starts the workers: this same program, re-run with trainers' Hogwild role in its
//! environment. Each worker points its model at the shared numbers (`attach`) and
//! trains on its share of one epoch of Fashion-MNIST with the lock-free `update`.
//! The parent samples the workers' losses as they go, then evaluates the shared
//! parameters on the test set. `results/lab03/<UTC time>/` gets the loss-vs-time
//! chart and the test accuracy per worker count.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use labkit::{Run, Variant};
use measure::{Figure, FigureSeries};
use trainers::data::DataArgs;
use trainers::hogwild::{self, HogwildConfig, HogwildReport, Sharing, WorkerProgram};
use trainers::models::Arch;

/// Lab 3: N worker processes train one CNN in shared memory, lock-free (Hogwild!),
/// on Fashion-MNIST; the training loss against wall time for 1, 2 and 4 workers.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// Worker counts to compare, one run each.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    workers: Vec<usize>,
    /// How the workers get the shared memory: a descriptor passed over a Unix
    /// socket (PyTorch's default on Linux), or a named file in /dev/shm.
    #[arg(long, value_enum, default_value_t = Sharing::FileDescriptor)]
    sharing: Sharing,
    /// The model: cnn or mlp (not resnet: its batch-norm statistics are not shared).
    #[arg(long, value_enum, default_value_t = Arch::Cnn)]
    model: Arch,
    /// Training images per run, split evenly among its workers (60000: one epoch).
    #[arg(long, default_value_t = 24_000)]
    examples: usize,
    /// Images per step.
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// SGD learning rate.
    #[arg(long, default_value_t = 0.05)]
    lr: f64,
    /// Local SGD: each worker trains a private copy for this many steps, then adds
    /// their delta into the shared parameters (1: every step writes straight into
    /// them, Hogwild!). Trainers' own delta push, whatever `--solution` says.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    local_steps: u64,
    #[command(flatten)]
    data: DataArgs,
    /// Seconds a run may take before its workers are killed.
    #[arg(long, default_value_t = 300)]
    timeout: u64,
    /// A short run: the MLP on 6,000 images (what CI runs).
    #[arg(long)]
    quick: bool,
}

fn main() -> ExitCode {
    let variant = Variant::from_env();
    // A worker is this same program, re-run by the parent with the role set: it
    // must use the same pieces as the parent.
    if let Some(report) = hogwild::worker_from_env_with(lab03_hogwild::pieces(variant)) {
        return match report {
            Ok(_) => ExitCode::SUCCESS,
            Err(e) => {
                // The parent shows the end of this in its report.
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        };
    }
    match run(Args::parse(), variant) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args, variant: Variant) -> anyhow::Result<()> {
    let (model, examples) = if args.quick {
        (Arch::Mlp, 6_000)
    } else {
        (args.model, args.examples)
    };
    if args.workers.is_empty() || args.workers.contains(&0) {
        bail!("--workers takes counts of 1 or more, e.g. 1,2,4");
    }
    if tch::Cuda::is_available() {
        println!(
            "a CUDA device is present but not used: Hogwild shares CPU memory between \
             processes (a memory file mapped by each), and every worker computes on the CPU"
        );
    }
    // Each worker computes with one thread (as PyTorch's Hogwild example sets
    // torch.set_num_threads): the processes are the parallelism.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "lab 3 ({variant}): {model:?} on {examples} Fashion-MNIST images per run, batch {}, \
         lr {}, {:?} sharing, {cores} CPU cores{}",
        args.batch,
        args.lr,
        args.sharing,
        if args.local_steps > 1 {
            format!(
                "; local SGD: each worker pushes its delta every {} steps (trainers' push)",
                args.local_steps
            )
        } else {
            String::new()
        }
    );

    let launcher = WorkerProgram::current_exe()?;
    let mut reports: Vec<(usize, HogwildReport)> = Vec::new();
    for &workers in &args.workers {
        let config = HogwildConfig {
            workers,
            steps: examples.div_ceil(workers * args.batch),
            batch: args.batch,
            lr: args.lr,
            model,
            hidden: vec![256],
            data: Some(args.data.data.clone()),
            samples: examples,
            sharing: args.sharing,
            timeout: Duration::from_secs(args.timeout),
            sample_every: Duration::from_millis(if args.quick { 100 } else { 250 }),
            local_steps: args.local_steps as usize,
            ..Default::default()
        };
        // The same initial parameters for every run: the parent builds the model
        // from libtorch's global generator.
        tch::manual_seed(1);
        let report = hogwild::run_with(&config, &launcher, lab03_hogwild::pieces(variant))
            .with_context(|| format!("{workers} workers"))?;
        for path in &report.stale_removed {
            println!("  removed {} (left by a killed run)", path.display());
        }
        let steps: u64 = report.workers.iter().map(|w| w.steps).sum();
        println!(
            "{workers} worker(s): {:>5.1} s, {steps} steps of {} shared parameters, test loss \
             {:.3} -> {:.3}, test accuracy {:.1}% ({} images)",
            report.elapsed.as_secs_f64(),
            report.parameters,
            report.initial_loss,
            report.final_loss,
            100.0 * report.final_accuracy,
            report.evaluated_on
        );
        reports.push((workers, report));
    }

    let max_workers = args.workers.iter().copied().max().unwrap_or(1);
    let sharing = match args.sharing {
        Sharing::FileDescriptor => "file-descriptor",
        Sharing::FileSystem => "file-system",
    };
    let mut run = Run::start(3, max_workers, sharing)?;
    let (loss, accuracy) = figures(&reports, model);
    run.figure(loss)?;
    run.figure(accuracy)?;
    let dir = run.finish()?;

    let one = reports.iter().find(|(w, _)| *w == 1).map(|(_, r)| r);
    println!(
        "\nThe chart ({}) plots the training loss (each point the mean batch loss of the \
         steps all workers did since the previous one) against wall time. Every run sees \
         the same {examples} images; more workers share them, so each run's curve ends \
         sooner while the {cores} cores have work to spare, and no sooner once the \
         workers outnumber the cores.",
        dir.join("loss-vs-time.svg").display()
    );
    if let Some(one) = one {
        for (w, r) in reports.iter().filter(|(w, _)| *w > 1) {
            println!(
                "  {w} workers: {:.2}× the speed of 1 worker, test accuracy {:+.1} points",
                one.elapsed.as_secs_f64() / r.elapsed.as_secs_f64(),
                100.0 * (r.final_accuracy - one.final_accuracy)
            );
        }
        println!(
            "The updates of different workers overwrite each other now and then (no lock); \
             compare the accuracies to see what that costs."
        );
    }
    Ok(())
}

/// The loss-vs-time chart (one line per worker count, its test accuracy and time
/// in the legend) and the test accuracy per worker count.
fn figures(reports: &[(usize, HogwildReport)], model: Arch) -> (Figure, Figure) {
    let mut loss = Figure::lines(
        "loss-vs-time",
        &format!("Hogwild on Fashion-MNIST ({model:?}): training loss of the shared parameters"),
        "wall time (s)",
        "training loss",
    );
    let mut acc = Vec::new();
    let mut counts = Vec::new();
    for (workers, r) in reports {
        let points = r.curve.iter().map(|p| [p.seconds, p.loss]).collect();
        let name = format!(
            "{workers} worker{}: {:.1} s, test acc {:.1}%",
            if *workers == 1 { "" } else { "s" },
            r.elapsed.as_secs_f64(),
            100.0 * r.final_accuracy
        );
        loss = loss.with(FigureSeries::measured(name, points));
        acc.push(100.0 * r.final_accuracy);
        counts.push(format!("{workers}"));
    }
    // Worker counts are categories (1, 2, 4): bars, not a line between them.
    let accuracy = Figure::grouped_bars(
        "test-accuracy",
        "Test accuracy of the shared parameters after the same images",
        "worker processes",
        counts,
        "test accuracy (%)",
    )
    .with_layer("Hogwild", &acc);
    (loss, accuracy)
}
