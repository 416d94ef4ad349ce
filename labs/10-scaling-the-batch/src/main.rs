//! Lab 10: scaling the batch, run as a learner runs it (`cargo lab 10`).
//!
//! Trains the MLP on Fashion-MNIST at effective batches 64, 256 and 1024
//! (more ranks, and gradient accumulation under `no_sync`), with the linear
//! and square-root learning-rate rules, with and without warm-up, and with
//! your compression hook (fp16, bf16) against f32. Every configuration sees
//! the same number of samples from the same start. Ranks are threads of this
//! process, each with its own communicator over shared memory and one libtorch
//! thread. Writes `results/lab10/<UTC time>/`.

use anyhow::Context;
use clap::Parser;
use lab10_scaling_the_batch::{Budget, Config, Trained, Wire, fashion_mnist, lab_error, sync};
use labkit::{Run, Variant};
use measure::{Figure, FigureSeries};
use trainers::data::Split;
use trainers::ddp;
use trainers::lr::Scaling;

/// Lab 10: batch size, learning-rate scaling, warm-up and gradient compression.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// Training samples per configuration (60,000 is one epoch).
    #[arg(long, default_value_t = 300_000)]
    samples: usize,
    /// Learning rate at the base batch of 64 (SGD, momentum 0.9).
    #[arg(long, default_value_t = 0.01)]
    base_lr: f64,
    /// Samples over which the rate warms up.
    #[arg(long, default_value_t = 60_000)]
    warmup_samples: usize,
    /// The test accuracy whose time to reach is compared.
    #[arg(long, default_value_t = 0.86)]
    target: f64,
    /// A short run: few samples, three configurations (what CI runs).
    #[arg(long)]
    quick: bool,
}

fn main() -> std::process::ExitCode {
    labkit::exit(run(Args::parse()), "")
}

fn configs(quick: bool) -> Vec<Config> {
    let c = |world, accumulate, scaling, warmup, wire| Config {
        world,
        batch: 64,
        accumulate,
        scaling,
        warmup,
        wire,
    };
    use Scaling::{Linear, None, Sqrt};
    use Wire::{Bf16, F32, Fp16};
    if quick {
        return vec![
            c(1, 1, None, false, F32),
            c(2, 2, Linear, true, F32),
            c(2, 2, Linear, true, Fp16),
        ];
    }
    vec![
        c(1, 1, None, false, F32),
        c(2, 2, Linear, true, F32),
        c(1, 4, Linear, true, F32),
        c(2, 2, Sqrt, true, F32),
        c(2, 8, Linear, true, F32),
        c(2, 8, Sqrt, true, F32),
        c(2, 8, Linear, false, F32),
        c(2, 32, Linear, true, F32),
        c(2, 32, Sqrt, true, F32),
        c(2, 2, Linear, true, Fp16),
        c(2, 2, Linear, true, Bf16),
    ]
}

fn run(mut args: Args) -> anyhow::Result<()> {
    if args.quick {
        (args.samples, args.warmup_samples) = (6_144, 2_048);
    }
    let variant = Variant::from_env();
    tch::set_num_threads(1);

    // Your hook first, on random gradients: an unsolved starter stops here.
    for wire in [Wire::Fp16, Wire::Bf16] {
        let m = ddp::check::compression(2, sync(variant, wire), 100_000, 1.0).map_err(lab_error)?;
        println!(
            "your {} hook ({variant}), 2 ranks: max |Δ| against the f32 mean {:.1e} (gradients \
             up to {:.1}), {} bytes on the wire for {} as f32",
            wire.name(),
            m.max_diff,
            m.max_grad,
            m.wire_bytes,
            m.f32_bytes
        );
    }

    let train = fashion_mnist(Split::Train)?;
    let test = fashion_mnist(Split::Test)?;
    let budget = Budget {
        samples: args.samples,
        base_lr: args.base_lr,
        base_batch: 64,
        warmup_samples: args.warmup_samples,
        eval_every: args.samples / 12,
        eval_rows: if args.quick { 1_000 } else { 5_000 },
    };
    println!(
        "\nthe MLP on Fashion-MNIST, {} samples per configuration, base rate {} at batch 64, \
         warm-up over {} samples, accuracy on {} test images\n",
        budget.samples, budget.base_lr, budget.warmup_samples, budget.eval_rows
    );
    println!(
        "{:<34} {:>6} {:>7} {:>9} {:>9} {:>10} {:>12}",
        "configuration",
        "steps",
        "lr",
        "accuracy",
        "train s",
        format!("s to {:.0}%", 100.0 * args.target),
        "all-reduced/step"
    );
    let mut done: Vec<(Config, Trained)> = Vec::new();
    for cfg in configs(args.quick) {
        let t = lab10_scaling_the_batch::train(variant, &cfg, &budget, &train, &test)
            .with_context(|| cfg.label())?;
        println!(
            "{:<34} {:>6} {:>7.3} {:>8.1}% {:>9.1} {:>10} {:>12}",
            cfg.label(),
            t.steps,
            t.lr,
            100.0 * t.final_accuracy(),
            t.seconds,
            t.time_to(args.target)
                .map_or("not reached".into(), |s| format!("{s:.1}")),
            format!("{:.0} KiB", t.bytes_per_step / 1024.0)
        );
        done.push((cfg, t));
    }

    // Only now: a starter that fails above leaves no results folder behind.
    let mut run = Run::start(10, 2, "shm (thread ranks)")?;
    let mut curves = Figure::lines(
        "accuracy-vs-time",
        "Test accuracy against training time, same samples for each (higher and further left is better)",
        "training seconds",
        "test accuracy",
    );
    for (cfg, t) in &done {
        curves = curves.with(FigureSeries::measured(cfg.label(), t.curve.clone()));
    }
    run.figure(curves)?;

    // Bars in two colours: the time to the target where it was reached, the
    // whole training time where it was not.
    let to_target: Vec<Option<f64>> = done.iter().map(|(_, t)| t.time_to(args.target)).collect();
    run.figure(
        Figure::stacked_bars(
            "time-to-target",
            &format!(
                "Training seconds to {:.0}% test accuracy (lower is better)",
                100.0 * args.target
            ),
            done.iter().map(|(c, _)| c.label()).collect(),
            "seconds",
        )
        .with_layer(
            "reached: seconds to the target",
            &to_target
                .iter()
                .map(|t| t.unwrap_or(0.0))
                .collect::<Vec<_>>(),
        )
        .with_layer(
            "never reached: all training seconds",
            &done
                .iter()
                .zip(&to_target)
                .map(|((_, t), r)| if r.is_some() { 0.0 } else { t.seconds })
                .collect::<Vec<_>>(),
        ),
    )?;

    let wires: Vec<&(Config, Trained)> = done
        .iter()
        .filter(|(c, _)| c.world == 2 && c.effective_batch() == 256 && c.warmup)
        .filter(|(c, _)| c.scaling == Scaling::Linear)
        .collect();
    let kib: Vec<f64> = wires
        .iter()
        .map(|(_, t)| t.bytes_per_step / 1024.0)
        .collect();
    run.figure(
        Figure::stacked_bars(
            "compression",
            "All-reduce payload per optimizer step, 2 ranks, B=256 (lower is better)",
            wires
                .iter()
                .map(|(c, _)| c.wire.name().to_owned())
                .collect(),
            "KiB per step",
        )
        .with_layer("gradients all-reduced", &kib),
    )?;
    for (c, t) in &wires {
        println!(
            "{}: {:.0} KiB per step, final accuracy {:.1}%",
            c.wire.name(),
            t.bytes_per_step / 1024.0,
            100.0 * t.final_accuracy()
        );
    }
    let dir = run.finish()?;
    println!(
        "\nCharts in {}: accuracy-vs-time.svg, time-to-target.svg, compression.svg.",
        dir.display()
    );
    Ok(())
}
