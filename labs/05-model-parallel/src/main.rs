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
use trainers::pipeline::{self, GPipe, Phase, Pipeline, StepReport, theoretical_bubble};

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
    /// Timed training steps per schedule and M, taken in 4 rounds over all settings
    /// (plus one untimed step per round, two in the first).
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
    labkit::exit(run(Args::parse()), "")
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
    /// What each pass and hand-over cost, over all timed steps (see [`Costs`]).
    costs: Costs,
    /// GPipe's step modelled from each timed step's own costs ([`predict`]), the
    /// median bubble and wall time: from a naive run, GPipe as predicted from the
    /// stages' costs alone; from a GPipe run, as they ran overlapped.
    model: Option<Prediction>,
    /// The step whose bubble was the median, for its timeline.
    typical: StepReport,
    /// The loss of every step, warm-up included.
    losses: Vec<f64>,
    accuracy: f64,
}

/// One setting while it trains.
struct Live {
    pipe: Pipeline,
    sched: Box<dyn pipeline::Schedule>,
    reports: Vec<StepReport>,
    times: Vec<f64>,
    losses: Vec<f64>,
}

impl Live {
    /// The medians over the timed steps, and the test accuracy reached.
    fn finish(mut self, kind: Kind, m: usize, test: &Dataset) -> anyhow::Result<Measured> {
        let costs = Costs::of(&self.reports);
        let stages = self.pipe.len();
        let model = self
            .reports
            .iter()
            .map(|r| predict(&Costs::of(std::slice::from_ref(r)), stages, m))
            .collect::<anyhow::Result<Vec<_>>>()
            .ok()
            .map(|p| Prediction {
                wall: median(p.iter().map(|p| p.wall).collect()),
                bubble: median(p.iter().map(|p| p.bubble).collect()),
            });
        self.reports
            .sort_by(|a, b| a.bubble().total_cmp(&b.bubble()));
        let typical = self.reports.swap_remove(self.reports.len() / 2);
        let busy = (0..self.pipe.len())
            .map(|s| median(self.reports.iter().map(|r| ms_of(r.busy()[s])).collect()))
            .collect();
        Ok(Measured {
            kind,
            m,
            step: median(self.times),
            wall: median(self.reports.iter().map(|r| ms_of(r.wall)).collect()),
            busy,
            bubble: typical.bubble(),
            costs,
            model,
            typical,
            losses: self.losses,
            accuracy: accuracy(&self.pipe, test)?,
        })
    }
}

fn run(args: Args) -> anyhow::Result<()> {
    let variant = Variant::from_env();
    let (batch, ms, steps, warmup, rounds, test_rows) = if args.quick {
        (32, vec![1, 2, 4], 3, 1, 1, 500)
    } else {
        (
            args.batch,
            args.micro_batches.clone(),
            args.steps,
            2,
            4,
            2000,
        )
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
    let total = warmup + rounds - 1 + steps;
    if train.len() < total * batch {
        bail!(
            "{total} steps of {batch} need {} training examples; the set has {}",
            total * batch,
            train.len()
        );
    }
    // Every run starts from these parameters and sees the same batches.
    let start = nn::VarStore::new(Device::Cpu);
    let _ = models::cnn().build(&start.root());
    println!(
        "CNN cut before {} into {stages} stages; Fashion-MNIST, batch {batch}, {steps} timed \
         steps (+{} untimed) per schedule and M in {rounds} round(s), SGD lr {}",
        cuts.join(", "),
        total - steps,
        args.lr
    );

    // Every setting: the unsplit model first (`None`: one stage on the CPU), then each
    // schedule at each M, each its own copy of the starting parameters.
    let settings: Vec<(Option<Kind>, usize)> = std::iter::once((None, 1))
        .chain(
            Kind::ALL
                .into_iter()
                .flat_map(|k| ms.iter().map(move |&m| (Some(k), m))),
        )
        .collect();
    let mut live = Vec::with_capacity(settings.len());
    for &(kind, _) in &settings {
        let (cut, devs): (&[&str], Vec<Device>) = match kind {
            Some(_) => (&cuts, devices.clone()),
            None => (&[], vec![Device::Cpu]),
        };
        let mut pipe = Pipeline::split(models::cnn(), cut, &devs, &nn::Sgd::default(), args.lr)?;
        pipe.copy_from(&start)?;
        let sched = kind.map_or_else(|| Box::new(GPipe) as _, |k| schedule(variant, k));
        live.push(Live {
            pipe,
            sched,
            reports: Vec::with_capacity(steps),
            times: Vec::with_capacity(steps),
            losses: Vec::with_capacity(total),
        });
    }
    // In rounds, every setting in turn: whatever else the machine does meanwhile
    // (another program, the CPU's clock) falls on all of them alike instead of on
    // whichever setting runs at that moment. Within a round a setting runs its steps
    // back to back, as training does, after one untimed step that warms its memory up.
    let per_round = steps.div_ceil(rounds);
    let mut done = 0;
    for round in 0..rounds {
        let timed = per_round.min(steps - done);
        let untimed = if round == 0 { warmup } else { 1 };
        for (l, &(_, m)) in live.iter_mut().zip(&settings) {
            for k in 0..untimed + timed {
                // Every setting sees the same batches in the same order.
                let step = l.losses.len();
                let idx: Vec<usize> = (step * batch..(step + 1) * batch).collect();
                let (x, y) = train.batch(&idx)?;
                let clock = Instant::now();
                let r = l
                    .pipe
                    .step_with(l.sched.as_ref(), &x, &y, m, cross_entropy)?;
                let t = clock.elapsed();
                l.losses.push(r.loss);
                if k >= untimed {
                    l.reports.push(r);
                    l.times.push(ms_of(t));
                }
            }
        }
        done += timed;
    }
    let mut measured = Vec::with_capacity(live.len());
    for (l, &(kind, m)) in live.into_iter().zip(&settings) {
        measured.push(l.finish(kind.unwrap_or(Kind::Naive), m, &test)?);
    }
    let mut measured = measured.into_iter();
    let unsplit = measured.next().context("the unsplit run is missing")?;
    let runs: Vec<Measured> = measured.collect();
    println!(
        "\nunsplit, one CPU thread: {:.1} ms per step, test accuracy {:.1}%\n",
        unsplit.step,
        100.0 * unsplit.accuracy
    );
    println!("schedule   M   step ms   busy per stage (ms)   bubble   theory");
    for r in &runs {
        let busy: Vec<String> = r.busy.iter().map(|b| format!("{b:.1}")).collect();
        println!(
            "{:<8} {:>3}   {:>7.1}   {:<20}  {:>5.1}%   {:>5.1}% {}",
            r.kind.name(),
            r.m,
            r.step,
            busy.join(" + "),
            100.0 * r.bubble,
            100.0 * r.kind.bubble(stages, r.m),
            r.kind.rule()
        );
    }
    let max_m = ms.iter().copied().max().unwrap_or(1);
    // Memory, on paper from the action lists: 1F1B (the stretch goal; trainers' own
    // here, not the learner's) idles as GPipe does but frees micro-batches early.
    let peaks = |s: &dyn pipeline::Schedule| -> anyhow::Result<Vec<usize>> {
        (0..stages)
            .map(|k| Ok(pipeline::peak_in_flight(&s.actions(k, stages, max_m)?)))
            .collect()
    };
    println!(
        "micro-batches whose activations each stage holds at its peak, M = {max_m}: \
         GPipe {:?}, 1F1B (trainers' OneFOneB, same bubble) {:?}",
        peaks(&GPipe)?,
        peaks(&pipeline::OneFOneB)?
    );

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

/// What one pass and the moments between passes cost, as steps measured them (means,
/// in ms): the inputs of the model that predicts GPipe's bubble ([`predict`]). Means,
/// not medians: a step's wall time is a sum of these, and on a busy machine the rare
/// pass or hand-over that loses its core for a while is part of the sum.
#[derive(Debug, Clone)]
struct Costs {
    /// `pass[s][0][m]`: stage `s`'s forward of micro-batch `m`; `pass[s][1][m]` its
    /// backward. Per micro-batch, not the phase's total over M: a stage's time is not
    /// proportional to its micro-batch's size (a fixed cost per pass; vector units
    /// and, on a GPU, streaming processors less full at small sizes).
    pass: Vec<[Vec<f64>; 2]>,
    /// From a pass's end to the start of the neighbour's pass that waited for it (the
    /// message, the thread wake-up, the copy to the neighbour's device).
    handover: f64,
    /// Between two passes of one stage whose input was already there.
    between: f64,
    /// From the step's start to stage 0's first pass (the stage threads start).
    start: f64,
}

impl Costs {
    /// The costs in `reports` (all of one setting).
    fn of(reports: &[StepReport]) -> Costs {
        let Some(first) = reports.first() else {
            return Costs {
                pass: Vec::new(),
                handover: 0.0,
                between: 0.0,
                start: 0.0,
            };
        };
        let (stages, m_count) = (first.stages, first.micro_batches);
        let find = |r: &StepReport, s: usize, m: usize, p: Phase| {
            r.spans
                .iter()
                .find(|x| x.stage == s && x.micro_batch == m && x.phase == p)
                .cloned()
        };
        let pass = (0..stages)
            .map(|s| {
                [Phase::Forward, Phase::Backward].map(|p| {
                    (0..m_count)
                        .map(|m| {
                            mean(
                                reports
                                    .iter()
                                    .filter_map(|r| find(r, s, m, p))
                                    .map(|x| ms_of(x.end.saturating_sub(x.start)))
                                    .collect(),
                            )
                        })
                        .collect()
                })
            })
            .collect();
        let (mut handover, mut between, mut start) = (Vec::new(), Vec::new(), Vec::new());
        for r in reports {
            for s in 0..stages {
                let own: Vec<&pipeline::Span> = r
                    .spans
                    .iter()
                    .filter(|x| x.stage == s && x.phase != Phase::Update)
                    .collect();
                if s == 0 {
                    if let Some(x) = own.first() {
                        start.push(ms_of(x.start));
                    }
                }
                for (i, x) in own.iter().enumerate() {
                    // Where this pass's input came from: a neighbour's pass, or none
                    // (stage 0's forward, the last stage's backward after its forward).
                    let from = match x.phase {
                        Phase::Forward if s > 0 => find(r, s - 1, x.micro_batch, Phase::Forward),
                        Phase::Backward if s + 1 < stages => {
                            find(r, s + 1, x.micro_batch, Phase::Backward)
                        }
                        _ => None,
                    };
                    let prev_end = i.checked_sub(1).map(|j| own[j].end);
                    match (from, prev_end) {
                        // The stage waited for its neighbour: a hand-over.
                        (Some(f), p) if p.is_none_or(|p| p <= f.end) => {
                            handover.push(ms_of(x.start.saturating_sub(f.end)));
                        }
                        // The input was there when the stage came free.
                        (_, Some(p)) => between.push(ms_of(x.start.saturating_sub(p))),
                        _ => {}
                    }
                }
            }
        }
        Costs {
            pass,
            handover: mean(handover),
            between: mean(between),
            start: mean(start),
        }
    }

    /// Each stage's total forward and backward time over the micro-batches.
    fn phase_totals(&self) -> (Vec<f64>, Vec<f64>) {
        let sum = |s: &[Vec<f64>; 2], p: usize| s[p].iter().sum::<f64>();
        (
            self.pass.iter().map(|s| sum(s, 0)).collect(),
            self.pass.iter().map(|s| sum(s, 1)).collect(),
        )
    }
}

/// GPipe's passes at one M, predicted.
#[derive(Debug, Clone, Copy)]
struct Prediction {
    /// The wall time of the passes (ms).
    wall: f64,
    /// The idle share of the stages.
    bubble: f64,
}

/// GPipe's step at `m` micro-batches replayed with `costs`
/// ([`pipeline::simulate_timed`]): each pass starts when its stage is free and its
/// input has arrived, so the schedule's own dependencies, the stages' unequal and
/// per-micro-batch times, the hand-overs and the threads' start decide the wall time
/// and the bubble. With equal stages and free hand-overs this is `(S-1)/(M+S-1)`.
fn predict(costs: &Costs, stages: usize, m: usize) -> anyhow::Result<Prediction> {
    let time = |t: f64| Duration::from_secs_f64(t.max(0.0) / 1e3);
    let pass = |s: usize, a: pipeline::Action| {
        let (p, mb) = match a {
            pipeline::Action::Forward(mb) => (0, mb),
            pipeline::Action::Backward(mb) => (1, mb),
        };
        time(
            costs
                .pass
                .get(s)
                .and_then(|x| x[p].get(mb))
                .copied()
                .unwrap_or(0.0),
        )
    };
    let timing = pipeline::Timing {
        pass: &pass,
        handover: time(costs.handover),
        between: time(costs.between),
        start: time(costs.start),
    };
    let r = pipeline::simulate_timed(&GPipe, stages, m, &timing)?;
    Ok(Prediction {
        wall: ms_of(r.wall),
        bubble: r.bubble(),
    })
}

/// GPipe's run at one M beside what the model predicted for it.
struct Modelled<'a> {
    /// GPipe's run.
    gpipe: &'a Measured,
    /// The naive run at the same M, whose stages ran one at a time.
    naive: &'a Measured,
    /// From the costs of the stages alone: the naive run's.
    alone: Prediction,
    /// From the costs as GPipe's stages ran overlapped: its own.
    overlapped: Prediction,
}

/// GPipe at `m` against the model, with both sets of costs (every M has both runs).
fn model_at(runs: &[Measured], m: usize) -> Option<Modelled<'_>> {
    let at = |kind| runs.iter().find(|r| r.kind == kind && r.m == m);
    let (gpipe, naive) = (at(Kind::GPipe)?, at(Kind::Naive)?);
    Some(Modelled {
        gpipe,
        naive,
        alone: naive.model?,
        overlapped: gpipe.model?,
    })
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
    let theory = |f: &dyn Fn(usize) -> f64| ms.iter().map(|&m| [m as f64, f(m)]).collect();
    // The model at each M (see `predict`), where both schedules ran.
    let predicted = |f: &dyn Fn(&Modelled<'_>) -> f64| -> Vec<[f64; 2]> {
        ms.iter()
            .filter_map(|&m| model_at(runs, m).map(|p| [m as f64, f(&p)]))
            .collect()
    };
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
        "GPipe, model: its schedule replayed with its measured pass and hand-over times",
        predicted(&|p| 100.0 * p.overlapped.bubble),
    ))
    .with(FigureSeries::theory(
        "GPipe, model with the stages' times alone (naive run, no contention)",
        predicted(&|p| 100.0 * p.alone.bubble),
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
        "GPipe, model with the stages' times alone (naive run at each M)",
        // The step's fixed cost beyond the passes (split, optimizer) as the naive run
        // at that M paid it.
        predicted(&|p| p.alone.wall + p.naive.step - p.naive.wall),
    ));
    Ok(vec![bubble, step])
}

/// The few lines that say what the charts show, with this run's numbers: only what
/// the numbers support is claimed.
fn explain(
    runs: &[Measured],
    unsplit: &Measured,
    stages: usize,
    max_m: usize,
    devices: &[Device],
    dir: &std::path::Path,
) {
    let of = |kind| runs.iter().filter(move |r: &&Measured| r.kind == kind);
    let find = |kind, m| of(kind).find(|r| r.m == m);
    let (Some(naive1), Some(gpipe1), Some(gpipe_max)) = (
        find(Kind::Naive, 1),
        find(Kind::GPipe, 1),
        find(Kind::GPipe, max_m),
    ) else {
        return;
    };
    let Some(fastest) = of(Kind::GPipe).min_by(|a, b| a.step.total_cmp(&b.step)) else {
        return;
    };
    let pct = |x: f64| 100.0 * x;
    let lo = of(Kind::Naive)
        .map(|r| r.bubble)
        .fold(f64::INFINITY, f64::min);
    let hi = of(Kind::Naive).map(|r| r.bubble).fold(0.0, f64::max);
    println!(
        "{}: the naive schedule idles each stage {:.0}–{:.0}% of the step (theory \
         (S-1)/S = {:.0}%: one stage works at a time, and every micro-batch more wakes the \
         other thread twice more). GPipe's idle share falls from {:.0}% at M = 1 to {:.0}% \
         at M = {max_m}, where (S-1)/(M+S-1) says {:.0}% for equal stages.",
        dir.join("bubble.svg").display(),
        pct(lo),
        pct(hi),
        pct(theoretical_bubble(stages, 1)),
        pct(gpipe1.bubble),
        pct(gpipe_max.bubble),
        pct(theoretical_bubble(stages, max_m))
    );
    let list = |t: &[f64]| {
        t.iter()
            .map(|b| format!("{b:.1}"))
            .collect::<Vec<_>>()
            .join(" + ")
    };
    // The model: GPipe's schedule replayed at each M with each stage's per-micro-batch
    // pass times and the hand-overs, as the stages ran overlapped (GPipe's own run)
    // and as they ran alone (the naive run at the same M).
    println!(
        "\nGPipe's bubble against the model (`predict`: GPipe's schedule replayed pass by \
         pass, each stage's forward and backward of each micro-batch at that M's size, \
         the hand-over between stages, the gap between a stage's passes and the threads' \
         start), with the costs as GPipe's stages ran overlapped and as they ran alone \
         (the naive run at the same M):\n    M   measured   overlapped (error)   alone (error)   \
         hand-over  between  start (ms)   passes: measured / model ms"
    );
    let mut worst: f64 = 0.0;
    let mut worst_alone: f64 = 0.0;
    for p in ms_of_runs(runs).filter_map(|m| model_at(runs, m)) {
        let g = p.gpipe;
        let err = |q: &Prediction| q.bubble / g.bubble - 1.0;
        worst = worst.max(err(&p.overlapped).abs());
        worst_alone = worst_alone.max(err(&p.alone).abs());
        println!(
            "  {:>3}   {:>7.1}%   {:>5.1}% ({:>+4.0}%)       {:>5.1}% ({:>+4.0}%)    \
             {:>5.2}     {:>5.2}   {:>5.2}        {:.1} / {:.1}",
            g.m,
            pct(g.bubble),
            pct(p.overlapped.bubble),
            pct(err(&p.overlapped)),
            pct(p.alone.bubble),
            pct(err(&p.alone)),
            g.costs.handover,
            g.costs.between,
            g.costs.start,
            g.wall,
            p.overlapped.wall
        );
    }
    let Some(naive_max) = runs.iter().find(|r| r.kind == Kind::Naive && r.m == max_m) else {
        return;
    };
    // How much longer the same passes computed when GPipe overlapped the stages than
    // when the naive schedule ran them one at a time: the model alone leaves it out.
    let sum: f64 = naive_max.busy.iter().sum();
    let growth = gpipe_max.busy.iter().sum::<f64>() / sum - 1.0;
    let shared = if devices.iter().any(|d| d.is_cuda()) {
        "the CPU stage's core".to_owned()
    } else {
        format!(
            "the {} core(s)",
            std::thread::available_parallelism().map_or(1, |n| n.get())
        )
    };
    let verdict = if worst <= 0.15 {
        format!("within {:.0}% of the measurement at every M", pct(worst))
    } else {
        format!("off by up to {:.0}%", pct(worst))
    };
    println!(
        "With the costs as GPipe's stages ran, the model is {verdict} (target 15%). With \
         the stages' costs alone it is off by up to {:.0}%: overlapped, the stages computed \
         {:+.0}% longer than one at a time at M = {max_m} (two stages computing at once \
         share caches, memory bandwidth and {shared} with everything else running).",
        pct(worst_alone),
        pct(growth)
    );
    // The bubble GPipe keeps as M → ∞ with these per-micro-batch times: each phase
    // lasts as long as its slowest stage.
    let (f_max, b_max) = naive_max.costs.phase_totals();
    let (f_1, b_1) = naive1.costs.phase_totals();
    let slowest = |t: &[f64]| t.iter().copied().fold(0.0, f64::max);
    let work: f64 = f_max.iter().chain(&b_max).sum();
    let floor = 1.0 - work / (stages as f64 * (slowest(&f_max) + slowest(&b_max)));
    println!(
        "Why not on (S-1)/(M+S-1): per stage, the forward passes took {} ms and the \
         backward passes {} ms at M = {max_m} (at M = 1: {} and {}; not 1/M of the work \
         each, a stage's time is not proportional to its micro-batch's size). GPipe runs \
         the phases one after the other, so each phase lasts as long as its slowest \
         stage: with these unequal stages each idles {:.0}% even as M → ∞. Besides, every \
         micro-batch costs each boundary two messages and two thread wake-ups.",
        list(&f_max),
        list(&b_max),
        list(&f_1),
        list(&b_1),
        pct(floor),
    );
    let verdict = if fastest.step < 0.95 * naive1.step.min(unsplit.step) {
        format!(
            "{:.2}× faster than the naive split ({:.1} ms) and {:.2}× faster than the \
             unsplit model on one thread ({:.1} ms).",
            naive1.step / fastest.step,
            naive1.step,
            unsplit.step / fastest.step,
            unsplit.step
        )
    } else {
        format!(
            "no faster than the naive split ({:.1} ms) or the unsplit model on one thread \
             ({:.1} ms): the overlap was lost (a busy machine, unequal stages, micro-batches \
             too small; see the timelines above).",
            naive1.step, unsplit.step
        )
    };
    let naive_note = if naive1.step >= 0.9 * unsplit.step {
        " The naive split alone buys nothing over one thread: the stages must overlap."
    } else {
        ""
    };
    println!(
        "{}: GPipe's fastest step, at M = {}, takes {:.1} ms: {verdict}{naive_note}",
        dir.join("step-time.svg").display(),
        fastest.m,
        fastest.step,
    );
}

/// The micro-batch counts GPipe ran, in order.
fn ms_of_runs(runs: &[Measured]) -> impl Iterator<Item = usize> + '_ {
    runs.iter().filter(|r| r.kind == Kind::GPipe).map(|r| r.m)
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

/// The mean, 0 for none.
fn mean(v: Vec<f64>) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use trainers::pipeline::{Action, Timing, simulate_timed};

    /// The model reads its costs back out of a step and replays them: a step replayed
    /// with known, unequal costs (per stage, per phase, per micro-batch, hand-overs,
    /// gaps, a late start) gives back those costs, and [`predict`] from them gives back
    /// the step's wall time and bubble.
    #[test]
    fn costs_read_from_a_step_predict_that_step() {
        let ms = |t: f64| Duration::from_secs_f64(t / 1e3);
        let pass = |s: usize, a: Action| match (s, a) {
            (0, Action::Forward(m)) => ms(3.0 + 0.5 * m as f64),
            (0, Action::Backward(_)) => ms(2.0),
            (_, Action::Forward(_)) => ms(2.0),
            (_, Action::Backward(m)) => ms(4.0 - 0.25 * m as f64),
        };
        let timing = Timing {
            pass: &pass,
            handover: ms(0.4),
            between: ms(0.1),
            start: ms(1.0),
        };
        for m in [1, 2, 4, 8] {
            let step = simulate_timed(&GPipe, 2, m, &timing).unwrap();
            let costs = Costs::of(std::slice::from_ref(&step));
            assert!((costs.handover - 0.4).abs() < 1e-6, "M={m}: {costs:?}");
            assert!((costs.start - 1.0).abs() < 1e-6, "M={m}: {costs:?}");
            assert!((costs.pass[0][0][m - 1] - (3.0 + 0.5 * (m - 1) as f64)).abs() < 1e-6);
            let p = predict(&costs, 2, m).unwrap();
            assert!((p.wall - ms_of(step.wall)).abs() < 1e-3, "M={m}");
            assert!((p.bubble - step.bubble()).abs() < 1e-6, "M={m}");
        }
    }
}
