//! Where a `DataParallel` step's time goes: replicate, scatter/gather, threading,
//! gradient reduce, against the same steps on one device.
//!
//! `cargo run -p trainers --release --example data_parallel -- --replicas 2 --model cnn`

use std::time::Duration;

use anyhow::Result;
use clap::Parser;
use tch::nn::{self, ModuleT, OptimizerConfig};
use trainers::data_parallel::{self, DataParallel, Replication, StepTimings};
use trainers::models::Arch;

/// Trains a few steps with DataParallel (all GPUs, or N CPU replicas in threads) and
/// prints the per-step overheads, then the same steps on one device.
#[derive(Debug, Parser)]
struct Args {
    /// CPU replicas when there is no GPU (with GPUs: every GPU is used).
    #[arg(long, default_value_t = 2)]
    replicas: usize,
    /// The model.
    #[arg(long, value_enum, default_value_t = Arch::Cnn)]
    model: Arch,
    /// How replicas get the parameters (`share` only for CPU replicas).
    #[arg(long, value_enum, default_value_t = Replication::Copy)]
    replication: Replication,
    /// Examples per step (the whole batch, before scattering).
    #[arg(long, default_value_t = 64)]
    batch: usize,
    /// Steps to time (after one warm-up step).
    #[arg(long, default_value_t = 10)]
    steps: usize,
    /// libtorch intra-op threads per process.
    #[arg(long, default_value_t = 1)]
    threads: i32,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn main() -> Result<()> {
    let args = Args::parse();
    tch::set_num_threads(args.threads);
    println!("{}", trainers::torch_info());
    let devices = data_parallel::devices(args.replicas);
    let arch = args.model;
    let mut dp = DataParallel::new(move || arch.blueprint(), &devices, args.replication)?;
    let mut opt = nn::Sgd::default().build(dp.var_store(), 0.05)?;
    let data = trainers::data::synthetic(args.batch * (args.steps + 1), 7)?;
    let batch = |k: usize| data.batch(&(k * args.batch..(k + 1) * args.batch).collect::<Vec<_>>());

    println!(
        "{:?} over {devices:?}, replication {:?}, batch {}",
        args.model, args.replication, args.batch
    );
    println!(
        "{:>4} {:>7} {:>9} {:>8} {:>7} {:>9} {:>7} {:>8} {:>8} {:>8}",
        "step",
        "loss",
        "replicate",
        "scatter",
        "gather",
        "threading",
        "reduce",
        "fwd max",
        "bwd max",
        "total"
    );
    let mut all: Vec<StepTimings> = Vec::new();
    for k in 0..=args.steps {
        let (x, y) = batch(k)?;
        let t = dp.step(&x, &y, data_parallel::cross_entropy, &mut opt)?;
        let max = |d: &[Duration]| d.iter().copied().max().unwrap_or_default();
        println!(
            "{:>4} {:>7.4} {:>9.3} {:>8.3} {:>7.3} {:>9.3} {:>7.3} {:>8.3} {:>8.3} {:>8.3}{}",
            k,
            t.loss_value,
            ms(t.replicate),
            ms(t.scatter),
            ms(t.gather),
            ms(t.threading()),
            ms(t.reduce),
            ms(max(&t.forward_busy)),
            ms(max(&t.backward_busy)),
            ms(t.total),
            if k == 0 { "  (warm-up)" } else { "" }
        );
        if k > 0 {
            all.push(t);
        }
    }
    let med = |f: &dyn Fn(&StepTimings) -> Duration| median(all.iter().map(|t| ms(f(t))).collect());
    let total = med(&|t| t.total);
    println!("median over {} steps (ms):", all.len());
    for (name, v) in [
        ("replicate", med(&|t| t.replicate)),
        ("scatter/gather", med(&|t| t.scatter_gather())),
        ("threading", med(&|t| t.threading())),
        ("grad reduce", med(&|t| t.reduce)),
        ("compute (slowest replica)", med(&|t| t.compute())),
        ("loss on device 0", med(&|t| t.loss)),
        ("optimizer", med(&|t| t.optimizer)),
        ("step total", total),
    ] {
        println!("  {name:<26} {v:>8.3}  {:>5.1}%", 100.0 * v / total);
    }

    // The same steps on one device, for comparison.
    let vs = nn::VarStore::new(devices[0]);
    let model = arch.blueprint().build(&vs.root());
    let mut opt = nn::Sgd::default().build(&vs, 0.05)?;
    let mut single = Vec::new();
    for k in 0..=args.steps {
        let (x, y) = batch(k)?;
        let (x, y) = (x.to_device(devices[0]), y.to_device(devices[0]));
        let clock = std::time::Instant::now();
        let loss = data_parallel::cross_entropy(&model.forward_t(&x, true), &y)?;
        opt.backward_step(&loss);
        let _ = loss.double_value(&[]);
        if k > 0 {
            single.push(ms(clock.elapsed()));
        }
    }
    let one = median(single);
    println!(
        "one device, same batches: median step {one:.3} ms; the data-parallel step takes \
         {:.2}x as long",
        total / one
    );
    Ok(())
}
