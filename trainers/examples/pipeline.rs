//! Pipeline parallelism: naive split vs GPipe micro-batches, with the measured
//! per-stage utilisation and bubble next to the theoretical `(S-1)/(M+S-1)`.
//!
//! `cargo run -p trainers --release --example pipeline -- --stages 2 --micro-batches 1,2,4,8`

use anyhow::{Result, bail};
use clap::Parser;
use tch::nn;
use trainers::models::{self, MlpConfig};
use trainers::pipeline::{self, Pipeline, StepReport};
use trainers::train::cross_entropy;

/// Trains an MLP cut into equal stages (stage 0 on the CPU and the rest on the GPU
/// when there is one, else every stage on the CPU, each in its own thread) with each
/// micro-batch count, and prints busy time, utilisation and bubble per stage.
#[derive(Debug, Parser)]
struct Args {
    /// Stages (threads / devices).
    #[arg(long, default_value_t = 2)]
    stages: usize,
    /// Micro-batch counts to try (1 = naive model parallelism).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    micro_batches: Vec<usize>,
    /// Examples per step.
    #[arg(long, default_value_t = 128)]
    batch: usize,
    /// Width of the hidden layers (two per stage).
    #[arg(long, default_value_t = 512)]
    width: i64,
    /// Timed steps per micro-batch count (after one warm-up step).
    #[arg(long, default_value_t = 5)]
    steps: usize,
    /// Columns of the timeline chart.
    #[arg(long, default_value_t = 72)]
    columns: usize,
}

fn main() -> Result<()> {
    let args = Args::parse();
    if args.stages == 0 {
        bail!("--stages must be at least 1");
    }
    // One thread per stage, one core each: libtorch's own pool would fight them.
    tch::set_num_threads(1);
    println!("{}", trainers::torch_info());
    let blueprint = || {
        models::mlp(&MlpConfig {
            hidden: vec![args.width; 2 * args.stages],
            ..Default::default()
        })
    };
    // Two layers per stage: cut before fc3, fc5, ...
    let cuts: Vec<String> = (1..args.stages)
        .map(|s| format!("fc{}", 2 * s + 1))
        .collect();
    let cuts: Vec<&str> = cuts.iter().map(String::as_str).collect();
    let devices = pipeline::devices(args.stages);
    let data = trainers::data::synthetic(args.batch, 3)?;
    println!(
        "MLP 784-{}x{}-10 in {} stages on {devices:?}, batch {}",
        args.width,
        2 * args.stages,
        args.stages,
        args.batch
    );
    for &m in &args.micro_batches {
        let mut pipe = Pipeline::split(blueprint(), &cuts, &devices, &nn::Sgd::default(), 0.01)?;
        let mut reports: Vec<StepReport> = Vec::new();
        for k in 0..=args.steps {
            let r = pipe.step(&data.images, &data.labels, m, cross_entropy)?;
            if k > 0 {
                reports.push(r);
            }
        }
        reports.sort_by_key(|r| r.wall);
        let Some(r) = reports.get(reports.len() / 2) else {
            bail!("--steps must be at least 1");
        };
        let busy: Vec<String> = r
            .busy()
            .iter()
            .zip(r.utilisation())
            .map(|(b, u)| format!("{:.1} ms ({:.0}%)", b.as_secs_f64() * 1e3, 100.0 * u))
            .collect();
        println!(
            "\nM={m:<3} wall {:.1} ms (median of {}), update {:.1} ms, loss {:.4}",
            r.wall.as_secs_f64() * 1e3,
            reports.len(),
            r.update().as_secs_f64() * 1e3,
            r.loss
        );
        println!("  busy per stage: {}", busy.join(", "));
        println!(
            "  bubble: measured {:.1}%, theoretical (S-1)/(M+S-1) = {:.1}%",
            100.0 * r.bubble(),
            100.0 * r.theoretical_bubble()
        );
        print!("{}", r.timeline(args.columns));
    }
    println!("\n(digits: forward of micro-batch m, letters: its backward (a = 0), '.': idle)");
    Ok(())
}
