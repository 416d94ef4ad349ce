//! Lab 4: DataParallel, run as a learner runs it (`cargo lab 4`).
//!
//! Trains the CNN on Fashion-MNIST with trainers' `DataParallel` (your pieces from
//! `src/exercise.rs`, or trainers' own with `--solution`) over 1, 2 and 4 CPU
//! replicas, and over the GPUs when there are any, from the same initial weights
//! on the same batches; times where each step goes (compute, replicate,
//! scatter/gather, threading, gradient reduce) and draws it as a stacked bar per
//! replica count in `results/lab04/<UTC time>/`. Then the checkpoint gotcha: the
//! wrapper's `state_dict` does not load into the plain model, and the fix.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use lab04_data_parallel::{fashion_mnist, lab_error, pieces};
use labkit::{Run, Variant};
use measure::Figure;
use tch::nn::{self, ModuleT, OptimizerConfig};
use tch::{Cuda, Device, Kind};
use trainers::checkpoint;
use trainers::data::{DataArgs, Dataset, Split};
use trainers::data_parallel::{self, DataParallel, Replication, StepTimings};
use trainers::models;

/// Lab 4: DataParallel's overheads beside its compute, and the checkpoint gotcha.
#[derive(Parser)]
#[command(version)]
struct Args {
    #[command(flatten)]
    data: DataArgs,
    /// CPU replica counts to compare (one bar each).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    replicas: Vec<usize>,
    /// Examples per step, the whole batch before scattering.
    #[arg(long, default_value_t = 256)]
    batch: usize,
    /// Timed steps per replica count, after 2 warm-up steps.
    #[arg(long, default_value_t = 40)]
    steps: usize,
    /// libtorch threads per replica thread (1: each replica thread computes on
    /// one core, so 2 replicas can use 2 cores).
    #[arg(long, default_value_t = 1)]
    threads: i32,
    /// SGD learning rate.
    #[arg(long, default_value_t = 0.05)]
    lr: f64,
    /// Seed of the initial weights (the same for every replica count).
    #[arg(long, default_value_t = 4)]
    seed: i64,
    /// A short run: batch 64, 2 timed steps, the test split only (what CI runs).
    #[arg(long)]
    quick: bool,
}

fn main() -> std::process::ExitCode {
    labkit::exit(run(Args::parse()), "lab 4: ")
}

/// One bar: what a configuration measured.
struct Measured {
    label: String,
    /// Medians over the timed steps, in ms.
    compute: f64,
    replicate: f64,
    scatter_gather: f64,
    threading: f64,
    reduce: f64,
    rest: f64,
    total: f64,
    loss: f64,
    accuracy: f64,
}

fn run(mut args: Args) -> anyhow::Result<()> {
    let variant = Variant::from_env();
    let (warmup, eval_rows) = (2, if args.quick { 500 } else { 2000 });
    if args.quick {
        args.batch = 64;
        args.steps = 2;
    }
    tch::set_num_threads(args.threads);
    println!("lab 4 ({variant}): {}", trainers::torch_info());

    // Real data: Fashion-MNIST. The quick run trains on the test split's head (the
    // train split takes seconds to decode in a debug build).
    let test = fashion_mnist(&args.data.data, Split::Test)?;
    let train = if args.quick {
        test.head(args.batch * (warmup + args.steps))
            .map_err(lab_error)?
    } else {
        fashion_mnist(&args.data.data, Split::Train)?
    };
    let eval = test.head(eval_rows).map_err(lab_error)?;
    let needed = args.batch * (warmup + args.steps);
    if train.len() < needed {
        bail!(
            "{} steps of {} need {needed} examples, the data has {}",
            warmup + args.steps,
            args.batch,
            train.len()
        );
    }

    let mut configs: Vec<(String, Vec<Device>)> = args
        .replicas
        .iter()
        .map(|&n| {
            let label = format!("{n} CPU replica{}", if n == 1 { "" } else { "s" });
            (label, vec![Device::Cpu; n.max(1)])
        })
        .collect();
    if Cuda::is_available() && Cuda::device_count() > 0 {
        let gpus = Cuda::device_count() as usize;
        println!(
            "CUDA: {gpus} GPU(s); bars for 1..={gpus} GPUs after the CPU ones (GPU \
             timings are taken on the host while CUDA runs asynchronously: each step's \
             total is exact, its split between the pieces approximate)"
        );
        for n in 1..=gpus {
            configs.push((
                format!("{n} GPU{}", if n == 1 { "" } else { "s" }),
                (0..n).map(Device::Cuda).collect(),
            ));
        }
    } else {
        println!(
            "no GPU bars: tch::Cuda::is_available() is false on this machine; CPU \
             replicas in threads only"
        );
    }
    println!(
        "CNN on Fashion-MNIST, batch {}, {} timed steps after {warmup} warm-up steps, \
         the same initial weights and batches for every bar",
        args.batch, args.steps
    );

    let mut measured = Vec::new();
    let mut last = None;
    for (label, devices) in &configs {
        let (m, dp) = measure_config(&args, variant, label, devices, &train, &eval, warmup)?;
        println!(
            "{label:>15}: step {:7.1} ms = compute {:6.1} + replicate {:5.2} + \
             scatter/gather {:5.2} + threading {:5.2} + reduce {:5.2} + loss/optimizer \
             {:5.2} | {:6.0} samples/s | loss {:.4}, test accuracy {:.1}%",
            m.total,
            m.compute,
            m.replicate,
            m.scatter_gather,
            m.threading,
            m.reduce,
            m.rest,
            args.batch as f64 / m.total * 1e3,
            m.loss,
            m.accuracy * 100.0
        );
        measured.push(m);
        if devices.iter().all(|d| *d == Device::Cpu) {
            last = Some(dp);
        }
    }

    let mut run = Run::start(4, 1, "threads")?;
    run.figure(figure(&args, &measured))?;
    if let Some(mut dp) = last {
        checkpoint_gotcha(&mut dp, &eval)?;
    }
    let dir = run.finish()?;
    let losses = measured.iter().map(|m| m.loss);
    let (lo, hi) = losses.fold((f64::INFINITY, 0.0f64), |(lo, hi), l| {
        (lo.min(l), hi.max(l))
    });
    println!(
        "\nThe chart ({}) stacks each step's median time per replica count: the \
         compute on the slowest replica at the bottom, then DataParallel's overheads \
         (replicate, scatter/gather, threading), the gradient reduce, and the loss and \
         optimizer on the first device. Splitting the batch shrinks each replica's \
         compute only while there is a core (or GPU) per replica; the overheads are \
         paid every step whatever the batch. After the same steps from the same \
         weights every bar's loss is {lo:.4} to {hi:.4}: the replicas compute the \
         one-device step (the CNN's ReLUs let last-bit differences grow a little).",
        dir.join("step-time.svg").display(),
    );
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Trains `warmup + steps` steps over `devices` from the seed's weights and returns
/// the medians of the timed steps, with the wrapper for the checkpoint gotcha.
fn measure_config(
    args: &Args,
    variant: Variant,
    label: &str,
    devices: &[Device],
    train: &Dataset,
    eval: &Dataset,
    warmup: usize,
) -> anyhow::Result<(Measured, DataParallel)> {
    tch::manual_seed(args.seed);
    let mut dp =
        DataParallel::new(models::cnn, devices, Replication::Copy)?.with_pieces(pieces(variant));
    let mut opt = nn::Sgd::default().build(dp.var_store(), args.lr)?;
    let mut timings: Vec<StepTimings> = Vec::new();
    for step in 0..warmup + args.steps {
        let idx: Vec<usize> = (step * args.batch..(step + 1) * args.batch).collect();
        let (x, y) = train.batch(&idx)?;
        let t = dp
            .step(&x, &y, data_parallel::cross_entropy, &mut opt)
            .map_err(lab_error)
            .with_context(|| format!("{label}, step {step}"))?;
        if step >= warmup {
            timings.push(t);
        }
    }
    let med =
        |f: &dyn Fn(&StepTimings) -> Duration| median(timings.iter().map(|t| ms(f(t))).collect());
    let rest = |t: &StepTimings| {
        t.total.saturating_sub(
            t.compute() + t.replicate + t.scatter_gather() + t.threading() + t.reduce,
        )
    };
    let accuracy = accuracy(&mut dp, eval).map_err(lab_error)?;
    Ok((
        Measured {
            label: label.to_owned(),
            compute: med(&|t| t.compute()),
            replicate: med(&|t| t.replicate),
            scatter_gather: med(&|t| t.scatter_gather()),
            threading: med(&|t| t.threading()),
            reduce: med(&|t| t.reduce),
            rest: med(&rest),
            total: med(&|t| t.total),
            loss: timings.last().map_or(f64::NAN, |t| t.loss_value),
            accuracy,
        },
        dp,
    ))
}

/// Test accuracy through the replicas (`DataParallel::forward`: your scatter,
/// parallel_apply in eval mode and gather), 1000 rows at a time.
fn accuracy(dp: &mut DataParallel, eval: &Dataset) -> trainers::Result<f64> {
    let mut correct = 0.0;
    for start in (0..eval.len()).step_by(1000) {
        let idx: Vec<usize> = (start..(start + 1000).min(eval.len())).collect();
        let (x, y) = eval.batch(&idx)?;
        let logits = dp.forward(&x)?.f_to_device(Device::Cpu)?;
        correct += logits
            .f_argmax(-1, false)?
            .f_eq_tensor(&y)?
            .f_sum(Kind::Float)?
            .f_double_value(&[])?;
    }
    Ok(correct / eval.len() as f64)
}

fn figure(args: &Args, m: &[Measured]) -> Figure {
    let layer = |f: fn(&Measured) -> f64| m.iter().map(f).collect::<Vec<_>>();
    Figure::stacked_bars(
        "step-time",
        &format!(
            "DataParallel step, CNN on Fashion-MNIST, batch {} (median of {} steps)",
            args.batch, args.steps
        ),
        m.iter().map(|m| m.label.clone()).collect(),
        "ms per step",
    )
    .with_layer("compute (slowest replica)", &layer(|m| m.compute))
    .with_layer("replicate", &layer(|m| m.replicate))
    .with_layer("scatter + gather", &layer(|m| m.scatter_gather))
    .with_layer("threading", &layer(|m| m.threading))
    .with_layer("gradient reduce", &layer(|m| m.reduce))
    .with_layer("loss + optimizer", &layer(|m| m.rest))
}

/// Saves the wrapper's `state_dict` (PyTorch's names: `module.conv1.weight`, ...),
/// loads it strictly into a plain CNN (an error naming the keys), then with the
/// prefix removed (the fix), and checks the plain model predicts as the wrapper does.
fn checkpoint_gotcha(dp: &mut DataParallel, eval: &Dataset) -> anyhow::Result<()> {
    let file = std::env::temp_dir().join(format!("lab04-{}.safetensors", std::process::id()));
    let result = gotcha_with(dp, eval, &file);
    // Best effort: the file was only there to be loaded.
    let _ = std::fs::remove_file(&file);
    result
}

fn gotcha_with(dp: &mut DataParallel, eval: &Dataset, file: &Path) -> anyhow::Result<()> {
    let state = dp.state_dict();
    println!(
        "\nThe checkpoint gotcha: the wrapper's state_dict names its {} tensors as \
         PyTorch's DataParallel does ({}, ...); saved as they are:",
        state.len(),
        state.first().map_or("", |(n, _)| n.as_str())
    );
    // ANCHOR: gotcha
    checkpoint::save_state_dict(file, &dp.state_dict())?;
    let vs = nn::VarStore::new(Device::Cpu);
    let plain = models::cnn().build(&vs.root());
    let Err(e) = checkpoint::load_state_dict(file, &vs, None) else {
        bail!("the plain CNN loaded the wrapper's names: the gotcha is gone?");
    };
    println!("  load into the plain CNN: {e}");
    // The fix: drop the wrapper's prefix on load (PyTorch:
    // consume_prefix_in_state_dict_if_present(sd, "module.")), or save the wrapped
    // model's own variables (`dp.var_store()`, PyTorch's `dp.module.state_dict()`).
    checkpoint::load_state_dict(file, &vs, Some(checkpoint::DDP_PREFIX))?;
    // ANCHOR_END: gotcha
    let (x, _) = eval.batch(&(0..eval.len().min(500)).collect::<Vec<_>>())?;
    let want = dp
        .forward(&x)
        .map_err(lab_error)?
        .f_to_device(Device::Cpu)?;
    let got = tch::no_grad(|| plain.forward_t(&x, false));
    let diff = (got - want).abs().max().double_value(&[]);
    println!(
        "  with the `module.` prefix removed on load it loads, and the plain CNN's \
         logits match the wrapper's (max |Δ| {diff:.1e} over {} test images)",
        x.size()[0]
    );
    if diff > 1e-4 {
        bail!("the loaded plain model computes other logits (max |Δ| {diff:e})");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn args_parse() {
        use clap::CommandFactory;
        super::Args::command().debug_assert();
    }
}
