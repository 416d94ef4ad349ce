//! Lab 14: tensor parallelism, run as a learner runs it (`cargo lab 14`).
//!
//! First your row-parallel forward: the split MLP on 2, 3 and 4 ranks against
//! the unsplit one, 10 SGD steps on Fashion-MNIST. Then the same model size
//! split two ways, data parallel (the batch split, every gradient
//! all-reduced) and tensor parallel (the block split, activations
//! all-reduced), at several batches: parameters and activations per rank,
//! bytes per step, step time. Ranks are threads of this process, each with its
//! own communicator over shared memory and one libtorch thread. Writes
//! `results/lab14/<UTC time>/`.

use clap::Parser;
use lab14_tensor_parallel::{TOLERANCE, fashion_mnist, judge, lab_error};
use labkit::{Run, Variant};
use measure::{Figure, FigureSeries};
use trainers::data::Split as DataSplit;
use trainers::tensor_parallel::TpConfig;
use trainers::tensor_parallel::check::{self, Footprint, Split};

/// Lab 14: a Megatron-style tensor-parallel MLP against the unsplit model and
/// against data parallelism.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// The block's width (hidden size 4 × width).
    #[arg(long, default_value_t = 256)]
    width: i64,
    /// Global batches to measure at.
    #[arg(long, value_delimiter = ',', default_value = "64,256,1024,2048")]
    batches: Vec<usize>,
    /// Rank counts to measure at.
    #[arg(long, value_delimiter = ',', default_value = "2,4")]
    worlds: Vec<usize>,
    /// Steps per measurement (the first two are not timed).
    #[arg(long, default_value_t = 20)]
    steps: usize,
    /// A short run: a narrow model, two batches, two ranks (what CI runs).
    #[arg(long)]
    quick: bool,
}

fn main() -> std::process::ExitCode {
    labkit::exit(run(Args::parse()), "")
}

const MIB: f64 = 1024.0 * 1024.0;

fn run(mut args: Args) -> anyhow::Result<()> {
    if args.quick {
        (args.width, args.batches, args.worlds, args.steps) = (64, vec![32, 128], vec![2], 4);
    }
    let variant = Variant::from_env();
    tch::set_num_threads(1);
    let train = fashion_mnist(DataSplit::Train)?;

    // Your layer first: an unsolved starter stops here.
    println!(
        "your row-parallel forward ({variant}) against the unsplit MLP, 10 SGD steps of 32 images:"
    );
    for world in [2, 3, 4] {
        let e = judge(variant, world, &train)?;
        println!(
            "  {world} ranks: first logits within {:.1e}, parameters within {:.1e} after 10 steps \
             (they moved up to {:.2}; allowed {TOLERANCE:e}); all-reduces per step: {} in \
             forward, {} in backward",
            e.first_logits_diff,
            e.max_diff,
            e.moved,
            e.forward_all_reduces[0],
            e.backward_all_reduces[0]
        );
    }

    let config = TpConfig::fashion_mnist(args.width);
    let params = config.parameters_per_rank(0, 1);
    println!(
        "\nthe model: embedding {}→{w} (replicated), block {w}→{h}→{w} (split), head {w}→{} \
         (replicated): {params} parameters",
        config.input,
        config.classes,
        w = config.width,
        h = config.hidden,
    );
    println!(
        "\n{:<16} {:>5} {:>6} {:>12} {:>12} {:>13} {:>10} {:>6} {:>8}",
        "split",
        "ranks",
        "batch",
        "params/rank",
        "activ./rank",
        "payload KiB",
        "sent KiB",
        "calls",
        "step ms"
    );
    let mut rows: Vec<(Split, usize, usize, Footprint)> = Vec::new();
    for &world in &args.worlds {
        for &batch in &args.batches {
            for split in [Split::Data, Split::Tensor] {
                let f = check::footprint(config, split, world, batch, args.steps, &train)
                    .map_err(lab_error)?;
                println!(
                    "{:<16} {:>5} {:>6} {:>12} {:>12} {:>13.0} {:>10.0} {:>6} {:>8.2}",
                    split.name(),
                    world,
                    batch,
                    f.parameters,
                    f.activations,
                    f.bytes_per_step as f64 / 1024.0,
                    f.ring_bytes_sent_per_step / 1024.0,
                    f.all_reduces_per_step,
                    f.step.as_secs_f64() * 1e3
                );
                rows.push((split, world, batch, f));
            }
        }
    }
    // Data parallelism all-reduces 4·P bytes, tensor parallelism 2·4·B·width:
    // equal at B = P / (2·width).
    let crossover = params as f64 / (2.0 * config.width as f64);
    println!(
        "\nbytes per step: data parallel {:.0} KiB whatever the batch, tensor parallel 2 × batch × \
         {} × 4 B; they cross at batch {crossover:.0} (= parameters / (2 × width))",
        params as f64 * 4.0 / 1024.0,
        config.width
    );

    // Only now: a starter that fails above leaves no results folder behind.
    let top = args.worlds.iter().copied().max().unwrap_or(2);
    let mut run = Run::start(14, top, "shm (thread ranks)")?;
    let series = |value: &dyn Fn(&Footprint) -> f64| -> Vec<FigureSeries> {
        let mut out = Vec::new();
        for &world in &args.worlds {
            for split in [Split::Data, Split::Tensor] {
                let points = rows
                    .iter()
                    .filter(|(s, w, _, _)| *s == split && *w == world)
                    .map(|(_, _, b, f)| [*b as f64, value(f)])
                    .collect();
                out.push(FigureSeries::measured(
                    format!("{}, {world} ranks", split.name()),
                    points,
                ));
            }
        }
        out
    };
    let mut bytes = Figure::lines(
        "bytes-per-step",
        &format!(
            "Bytes each rank sends per step (ring all-reduce), {params} parameters (lower is better)"
        ),
        "global batch (images)",
        "KiB sent per rank per step",
    );
    for s in series(&|f| f.ring_bytes_sent_per_step / 1024.0) {
        bytes = bytes.with(s);
    }
    run.figure(bytes)?;
    let mut time = Figure::lines(
        "step-time",
        "Median step time, threads on this machine's cores (lower is better)",
        "global batch (images)",
        "ms per step",
    );
    for s in series(&|f| f.step.as_secs_f64() * 1e3) {
        time = time.with(s);
    }
    run.figure(time)?;

    // Memory per rank at the smallest and the largest batch: parameters,
    // their gradients and SGD's momentum (3 × parameters), and the
    // activations kept for backward.
    let (small, large) = (
        args.batches.iter().copied().min().unwrap_or(0),
        args.batches.iter().copied().max().unwrap_or(0),
    );
    let at: Vec<&(Split, usize, usize, Footprint)> = rows
        .iter()
        .filter(|(_, _, b, _)| *b == small || *b == large)
        .collect();
    run.figure(
        Figure::stacked_bars(
            "memory-per-rank",
            &format!(
                "Memory per rank at global batches {small} and {large}, f32 (lower is better)"
            ),
            at.iter()
                .map(|(s, w, b, _)| {
                    let s = if *s == Split::Data { "DP" } else { "TP" };
                    format!("{s} {w}r B={b}")
                })
                .collect(),
            "MiB",
        )
        .with_layer(
            "parameters + gradients + momentum",
            &at.iter()
                .map(|(_, _, _, f)| 3.0 * 4.0 * f.parameters as f64 / MIB)
                .collect::<Vec<_>>(),
        )
        .with_layer(
            "activations kept for backward",
            &at.iter()
                .map(|(_, _, _, f)| 4.0 * f.activations as f64 / MIB)
                .collect::<Vec<_>>(),
        ),
    )?;
    let dir = run.finish()?;
    println!(
        "\nCharts in {}: bytes-per-step.svg, step-time.svg, memory-per-rank.svg.",
        dir.display()
    );
    Ok(())
}
