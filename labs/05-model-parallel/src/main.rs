//! Lab 5: model parallelism, run as a learner runs it (`cargo lab 5`).
//!
//! The CNN is cut into two stages (before `conv2`): stage 0 on the CPU and stage 1 on
//! the GPU when there is one, else both on the CPU, each stage run by its own thread
//! with one libtorch thread. It trains on Fashion-MNIST with each schedule (the naive
//! one, then GPipe; yours from `src/exercise.rs`, or trainers' own with `--solution`)
//! and each micro-batch count M, every run from the same starting parameters on the
//! same batches. It measures each stage's busy time and the step's wall time, and
//! writes `results/lab05/<UTC time>/` with two charts: the bubble (each stage's idle
//! share) and the step time against M, beside the theory.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use lab05_model_parallel::{CUT, Kind, check_on_paper, schedule};
use labkit::{Run, Variant};
use measure::{Figure, FigureSeries};
use tch::nn;
use tch::{Device, Tensor};
use trainers::data::{DataArgs, Dataset, Split};
use trainers::data_parallel::cross_entropy;
use trainers::models;
use trainers::pipeline::{self, GPipe, Pipeline, StepReport, theoretical_bubble};

/// Lab 5: a CNN cut into stages over devices (CPU + GPU, or two CPU threads), trained
/// on Fashion-MNIST stage after stage, then with GPipe's micro-batches; the measured
/// bubble and step time against the theory (p−1)/(m+p−1).
#[derive(Parser)]
#[command(version)]
struct Args {
    #[command(flatten)]
    data: DataArgs,
    /// Examples per step: the batch that is cut into micro-batches.
    #[arg(long, default_value_t = 64)]
    batch: usize,
    /// The micro-batch counts M to measure (1 is the classic naive split).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    micro_batches: Vec<usize>,
    /// The layers to cut before, one stage more than cuts (e.g. conv2,fc1 for three).
    #[arg(long, value_delimiter = ',', default_value = CUT)]
    cut: Vec<String>,
    /// Timed training steps per schedule and M (after 2 warm-up steps).
    #[arg(long, default_value_t = 40)]
    steps: usize,
    /// The SGD learning rate.
    #[arg(long, default_value_t = 0.05)]
    lr: f64,
    /// A short run (what CI runs): batch 32, M = 1, 2, 4, 3 timed steps each.
    #[arg(long)]
    quick: bool,
}

fn main() -> std::process::ExitCode {
    match run(Args::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// What one schedule at one M measured, medians over the timed steps.
struct Measured {
    kind: Kind,
    m: usize,
    /// The whole `step_with` call: split, threads, passes, optimizer.
    step: f64,
    /// Forward and backward passes only (the report's wall time).
    wall: f64,
    /// Each stage's busy time.
    busy: Vec<f64>,
    bubble: f64,
    /// The step whose bubble was the median, for its timeline.
    typical: StepReport,
    /// The loss of every step, warm-up included.
    losses: Vec<f64>,
    accuracy: f64,
}

fn run(args: Args) -> anyhow::Result<()> {
    let variant = Variant::from_env();
    let (batch, ms, steps, warmup, test_rows) = if args.quick {
        (32, vec![1, 2, 4], 3, 1, 500)
    } else {
        (args.batch, args.micro_batches.clone(), args.steps, 2, 2000)
    };
    if ms.is_empty() || ms.iter().any(|&m| m == 0 || m > batch) || steps == 0 {
        bail!("need --steps ≥ 1 and micro-batch counts between 1 and the batch ({batch})");
    }
    let cuts: Vec<&str> = args.cut.iter().map(String::as_str).collect();
    let stages = cuts.len() + 1;

    // On paper first: an unsolved or wrong schedule stops here, in milliseconds.
    for kind in Kind::ALL {
        check_on_paper(variant, kind)
            .with_context(|| format!("the {} schedule (`cargo lab check 5`)", kind.name()))?;
    }

    // One libtorch thread per stage thread: the stages, not libtorch, use the cores.
    tch::set_num_threads(1);
    tch::manual_seed(0);
    let devices = pipeline::devices(stages);
    println!("lab 5 ({variant}): {}", trainers::torch_info());
    if devices.iter().any(|d| d.is_cuda()) {
        println!(
            "stage 0 on the CPU, the others on the GPU ({devices:?}): the workshop's \
             \"part of the model on the CPU, part on the GPU\""
        );
    } else {
        println!(
            "no CUDA GPU (tch::Cuda::is_available() is false): the GPU split is skipped, \
             all {stages} stages run on the CPU, each in its own thread with one libtorch \
             thread, on {} core(s)",
            std::thread::available_parallelism().map_or(1, |n| n.get())
        );
    }

    let train = args.data.load(Split::Train)?;
    let test = args.data.load(Split::Test)?.head(test_rows)?;
    if train.len() < (warmup + steps) * batch {
        bail!(
            "{} steps of {batch} need {} training examples; the set has {}",
            warmup + steps,
            (warmup + steps) * batch,
            train.len()
        );
    }
    // Every run starts from these parameters and sees the same batches.
    let start = nn::VarStore::new(Device::Cpu);
    let _ = models::cnn().build(&start.root());
    println!(
        "CNN cut before {} into {stages} stages; Fashion-MNIST, batch {batch}, {steps} timed \
         steps (+{warmup} warm-up) per schedule and M, SGD lr {}",
        cuts.join(", "),
        args.lr
    );

    let train_one = |kind: Option<Kind>, m: usize| -> anyhow::Result<Measured> {
        // `None`: the unsplit model, one stage on the CPU.
        let (cut, devs): (&[&str], Vec<Device>) = match kind {
            Some(_) => (&cuts, devices.clone()),
            None => (&[], vec![Device::Cpu]),
        };
        let mut pipe = Pipeline::split(models::cnn(), cut, &devs, &nn::Sgd::default(), args.lr)?;
        pipe.copy_from(&start)?;
        let sched = kind.map(|k| schedule(variant, k));
        let mut reports = Vec::with_capacity(steps);
        let mut times = Vec::with_capacity(steps);
        let mut losses = Vec::with_capacity(warmup + steps);
        for k in 0..warmup + steps {
            let idx: Vec<usize> = (k * batch..(k + 1) * batch).collect();
            let (x, y) = train.batch(&idx)?;
            let clock = Instant::now();
            let r = match &sched {
                Some(s) => pipe.step_with(s.as_ref(), &x, &y, m, cross_entropy)?,
                None => pipe.step_with(&GPipe, &x, &y, m, cross_entropy)?,
            };
            let t = clock.elapsed();
            losses.push(r.loss);
            if k >= warmup {
                reports.push(r);
                times.push(ms_of(t));
            }
        }
        reports.sort_by(|a, b| a.bubble().total_cmp(&b.bubble()));
        let typical = reports.swap_remove(reports.len() / 2);
        let busy = (0..pipe.len())
            .map(|s| median(reports.iter().map(|r| ms_of(r.busy()[s])).collect()))
            .collect();
        Ok(Measured {
            kind: kind.unwrap_or(Kind::Naive),
            m,
            step: median(times),
            wall: median(reports.iter().map(|r| ms_of(r.wall)).collect()),
            busy,
            bubble: typical.bubble(),
            typical,
            losses,
            accuracy: accuracy(&pipe, &test)?,
        })
    };

    let unsplit = train_one(None, 1)?;
    println!(
        "\nunsplit, one CPU thread: {:.1} ms per step, test accuracy {:.1}%\n",
        unsplit.step,
        100.0 * unsplit.accuracy
    );
    println!("schedule   M   step ms   busy per stage (ms)   bubble   theory");
    let mut runs: Vec<Measured> = Vec::new();
    for kind in Kind::ALL {
        for &m in &ms {
            let r = train_one(Some(kind), m)?;
            let busy: Vec<String> = r.busy.iter().map(|b| format!("{b:.1}")).collect();
            println!(
                "{:<8} {:>3}   {:>7.1}   {:<20}  {:>5.1}%   {:>5.1}% {}",
                kind.name(),
                m,
                r.step,
                busy.join(" + "),
                100.0 * r.bubble,
                100.0 * kind.bubble(stages, m),
                kind.rule()
            );
            runs.push(r);
        }
    }

    // The same mathematics whatever the schedule and M: the loss curves agree up to
    // float rounding (micro-batches of other sizes sum in another order).
    let reference = &runs[0].losses;
    let gap_at = |step: usize| {
        runs.iter()
            .filter_map(|r| Some((r.losses.get(step)? - reference.get(step)?).abs()))
            .fold(0.0, f64::max)
    };
    let last = reference.len().saturating_sub(1);
    let acc: Vec<f64> = runs.iter().map(|r| r.accuracy).collect();
    println!(
        "\nevery run: loss {:.3} → {:.3} over {} steps, test accuracy {:.1}–{:.1}% on {} test \
         images. The same curve: the runs differ by {:.0e} at step 1 and {:.0e} at step {} \
         (other micro-batch sizes sum in another order; training amplifies rounding).",
        reference.first().copied().unwrap_or(f64::NAN),
        reference.get(last).copied().unwrap_or(f64::NAN),
        reference.len(),
        100.0 * acc.iter().copied().fold(f64::INFINITY, f64::min),
        100.0 * acc.iter().copied().fold(0.0, f64::max),
        test.len(),
        gap_at(0),
        gap_at(last),
        last + 1
    );

    let max_m = ms.iter().copied().max().unwrap_or(1);
    for kind in Kind::ALL {
        if let Some(r) = runs.iter().find(|r| r.kind == kind && r.m == max_m) {
            println!(
                "\n{} at M = {max_m}, a typical step ({:.1} ms of passes; digits: forward of \
                 micro-batch m, letters: its backward, a = 0; '.': idle):\n{}",
                kind.name(),
                r.wall,
                r.typical.timeline(72)
            );
        }
    }

    let figures = draw(&runs, &unsplit, stages, &ms, &devices)?;
    let mut out = Run::start(5, stages, "threads")?;
    for f in figures {
        out.figure(f)?;
    }
    let dir = out.finish()?;
    explain(&runs, &unsplit, stages, max_m, &devices, &dir);
    Ok(())
}

/// GPipe's predicted wall time at `m` micro-batches for stages that take `busy` ms
/// each on the whole batch: the first micro-batch crosses every stage, each further
/// one adds the slowest stage's share, `(Σ t_s + (M−1) · max t_s) / M`.
fn predicted_wall(busy: &[f64], m: usize) -> f64 {
    let sum: f64 = busy.iter().sum();
    let max = busy.iter().copied().fold(0.0, f64::max);
    (sum + (m as f64 - 1.0) * max) / m as f64
}

fn draw(
    runs: &[Measured],
    unsplit: &Measured,
    stages: usize,
    ms: &[usize],
    devices: &[Device],
) -> anyhow::Result<Vec<Figure>> {
    let series = |kind: Kind, f: &dyn Fn(&Measured) -> f64| -> Vec<[f64; 2]> {
        runs.iter()
            .filter(|r| r.kind == kind)
            .map(|r| [r.m as f64, f(r)])
            .collect()
    };
    let naive1 = runs
        .iter()
        .find(|r| r.kind == Kind::Naive && r.m == 1)
        .context("the naive run at M = 1 is missing")?;
    // The step's fixed cost (threads, split, optimizer) beyond the passes, at M = 1.
    let fixed = naive1.step - naive1.wall;
    let sum: f64 = naive1.busy.iter().sum();
    let theory = |f: &dyn Fn(usize) -> f64| ms.iter().map(|&m| [m as f64, f(m)]).collect();
    let place = if devices.iter().any(|d| d.is_cuda()) {
        "CPU + GPU"
    } else {
        "CPU threads"
    };
    let bubble = Figure::lines(
        "bubble",
        &format!("Pipeline bubble: CNN in {stages} stages on {place}, Fashion-MNIST"),
        "micro-batches M",
        "idle share of each stage (%)",
    )
    .with(FigureSeries::measured(
        "naive, measured",
        series(Kind::Naive, &|r| 100.0 * r.bubble),
    ))
    .with(FigureSeries::measured(
        "GPipe, measured",
        series(Kind::GPipe, &|r| 100.0 * r.bubble),
    ))
    .with(FigureSeries::theory(
        "naive, theory (S-1)/S",
        theory(&|_| 100.0 * theoretical_bubble(stages, 1)),
    ))
    .with(FigureSeries::theory(
        "GPipe, theory (S-1)/(M+S-1), equal stages",
        theory(&|m| 100.0 * theoretical_bubble(stages, m)),
    ))
    .with(FigureSeries::theory(
        "GPipe, predicted for these stages' times",
        theory(&|m| 100.0 * (1.0 - sum / (stages as f64 * predicted_wall(&naive1.busy, m)))),
    ));
    let step = Figure::lines(
        "step-time",
        &format!("Step time: CNN in {stages} stages on {place}, batch cut into M"),
        "micro-batches M",
        "ms per training step (median)",
    )
    .with(FigureSeries::measured(
        "naive",
        series(Kind::Naive, &|r| r.step),
    ))
    .with(FigureSeries::measured(
        "GPipe",
        series(Kind::GPipe, &|r| r.step),
    ))
    .with(FigureSeries::measured(
        "unsplit, one CPU thread",
        theory(&|_| unsplit.step),
    ))
    .with(FigureSeries::theory(
        "GPipe, predicted from the naive stage times",
        theory(&|m| predicted_wall(&naive1.busy, m) + fixed),
    ));
    Ok(vec![bubble, step])
}

/// The few lines that say what the charts show, with this run's numbers.
fn explain(
    runs: &[Measured],
    unsplit: &Measured,
    stages: usize,
    max_m: usize,
    devices: &[Device],
    dir: &std::path::Path,
) {
    let find = |kind, m| runs.iter().find(|r| r.kind == kind && r.m == m);
    let (Some(naive), Some(gpipe), Some(gpipe1)) = (
        find(Kind::Naive, max_m),
        find(Kind::GPipe, max_m),
        find(Kind::GPipe, 1),
    ) else {
        return;
    };
    let busy = &gpipe1.busy;
    let mean = busy.iter().sum::<f64>() / busy.len() as f64;
    let max = busy.iter().copied().fold(0.0, f64::max);
    println!(
        "{}: the naive schedule idles each stage {:.0}% of the step at any M (one stage \
         works at a time; theory {:.0}%). GPipe's idle share falls from {:.0}% at M = 1 \
         to {:.0}% at M = {max_m}; (S-1)/(M+S-1) says {:.0}% for equal stages.",
        dir.join("bubble.svg").display(),
        100.0 * naive.bubble,
        100.0 * theoretical_bubble(stages, 1),
        100.0 * gpipe1.bubble,
        100.0 * gpipe.bubble,
        100.0 * theoretical_bubble(stages, max_m)
    );
    println!(
        "Why above the line: the stages are not equal (busy {} ms at M = 1), so the faster \
         one waits for the slower at every micro-batch: even with M → ∞ it idles \
         1 − mean/max = {:.0}%. Smaller micro-batches also run less efficiently, and the \
         stage threads share {} with everything else on the machine.",
        busy.iter()
            .map(|b| format!("{b:.1}"))
            .collect::<Vec<_>>()
            .join(" + "),
        100.0 * (1.0 - mean / max),
        if devices.iter().any(|d| d.is_cuda()) {
            "the CPU stage's core".to_owned()
        } else {
            format!(
                "{} core(s)",
                std::thread::available_parallelism().map_or(1, |n| n.get())
            )
        }
    );
    println!(
        "{}: at M = {max_m} a GPipe step takes {:.1} ms, a naive one {:.1} ms, the unsplit \
         model on one thread {:.1} ms per step. {}",
        dir.join("step-time.svg").display(),
        gpipe.step,
        naive.step,
        unsplit.step,
        if gpipe.step < 0.95 * naive.step.min(unsplit.step) {
            format!(
                "Splitting alone buys no time (naive is {:.2}× the unsplit step); \
                 overlapping the stages does ({:.2}× faster than naive).",
                naive.step / unsplit.step,
                naive.step / gpipe.step
            )
        } else {
            "Here GPipe does not beat them: the overlap was lost (a busy machine, stages \
             too unequal, or micro-batches too small to run efficiently; see the \
             timeline above)."
                .to_owned()
        }
    );
}

/// Test accuracy of the pipeline's current parameters, 500 images at a time.
fn accuracy(pipe: &Pipeline, test: &Dataset) -> anyhow::Result<f64> {
    let n = test.len();
    let mut right = 0.0;
    let mut from = 0;
    while from < n {
        let len = 500.min(n - from);
        let x = test.images.f_narrow(0, from as i64, len as i64)?;
        let y = test.labels.f_narrow(0, from as i64, len as i64)?;
        let logits = pipe.forward(&x)?;
        let hits: Tensor = logits
            .f_argmax(-1, false)?
            .f_eq_tensor(&y.f_to_device(logits.device())?)?;
        right += hits.f_sum(tch::Kind::Float)?.f_double_value(&[])?;
        from += len;
    }
    Ok(right / n.max(1) as f64)
}

fn ms_of(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}
