//! Lab 12: DDP recipes and pitfalls, run as a learner runs it (`cargo lab 12`).
//!
//! First your SyncBatchNorm statistics against BatchNorm on all the rows.
//! Then an MLP with batch norm trains on 4 ranks of 4 rows each three ways:
//! local BN, local BN with DDP's buffer broadcast, and SyncBN with your
//! statistics, beside one process with all 16 rows; every rank's running
//! statistics and test accuracy are compared. Last, the checkpoint and
//! inference recipes on the SyncBN model: rank 0 saves as DDP names it
//! (`module.`), a barrier, every rank loads; then one device loads it, in eval
//! mode, against the distributed evaluation; and checkpoints both ways with
//! PyTorch (`interop.py`). Ranks are threads, each with its own communicator
//! over shared memory. Writes `results/lab12/<UTC time>/`.

use std::sync::Mutex;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use lab12_ddp_recipes::{
    EVAL_ROWS, TOLERANCE, distributed_accuracy, fashion_mnist, judge, lab_error, moments,
    plain_model, resume, tally,
};
use labkit::{Run, Variant};
use measure::{Figure, FigureSeries};
use tch::Tensor;
use trainers::checkpoint;
use trainers::data::{Dataset, Split};
use trainers::parity::{max_diff, snapshot};
use trainers::sync_bn::Norm;
use trainers::sync_bn::check::{BnMode, Trained, running_stats};
use trainers::thread_ranks::with_data_ranks;

/// Lab 12: batch norm under DDP, saving and loading, inference on one device.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// Training steps of each configuration.
    #[arg(long, default_value_t = 600)]
    steps: usize,
    /// Ranks.
    #[arg(long, default_value_t = 4)]
    world: usize,
    /// Rows per rank per step (small: where local statistics are noisy).
    #[arg(long, default_value_t = 4)]
    batch: usize,
    /// A short run (what CI runs).
    #[arg(long)]
    quick: bool,
    /// The Python with PyTorch for the interop part (relative to the workspace).
    #[arg(long, default_value = ".ringside/venv/bin/python")]
    python: String,
}

fn main() -> std::process::ExitCode {
    labkit::exit(run(Args::parse()), "")
}

const SIZES: [i64; 4] = [784, 256, 256, 10];

fn run(mut args: Args) -> anyhow::Result<()> {
    if args.quick {
        args.steps = 60;
    }
    let variant = Variant::from_env();
    tch::set_num_threads(1);
    let train = fashion_mnist(Split::Train)?;
    let test = fashion_mnist(Split::Test)?;
    let test = if args.quick {
        test.head(2_000).map_err(lab_error)?
    } else {
        test
    };

    // Your statistics first: an unsolved starter stops here.
    println!(
        "your SyncBatchNorm statistics ({variant}) against BatchNorm on all the rows, 10 steps:"
    );
    for world in [2, 3] {
        let e = judge(variant, world, &train)?;
        println!(
            "  {world} ranks of 8 rows: weights and running statistics within {:.1e} of one \
             process with {} rows (allowed {TOLERANCE:e})",
            e.max_diff,
            world * 8
        );
    }

    let (world, b) = (args.world, args.batch);
    println!(
        "\nthe MLP {SIZES:?} with batch norm after each hidden layer, {world} ranks of {b} rows, {} \
         steps; test accuracy in eval mode (running statistics) on {} images:",
        args.steps,
        test.len()
    );
    let dir = tempdir()?;
    let metrics_file = dir.join("metrics.jsonl");
    let modes = [
        (
            "local BN",
            BnMode {
                norm: Norm::Local,
                broadcast_buffers: false,
                metrics: None,
            },
        ),
        (
            "local BN + broadcast_buffers",
            BnMode {
                norm: Norm::Local,
                broadcast_buffers: true,
                metrics: None,
            },
        ),
        (
            "SyncBN (yours)",
            BnMode {
                norm: Norm::Sync(moments(variant)),
                broadcast_buffers: false,
                metrics: Some(metrics_file.clone()),
            },
        ),
    ];
    let mut spread = Figure::lines(
        "running-mean-spread",
        &format!(
            "How far each rank's running mean is from rank 0's, {world} ranks of {b} rows (lower is better)"
        ),
        "step",
        "max |running mean − rank 0's| (first BN layer)",
    );
    let mut accuracy_low = Vec::new();
    let mut accuracy_range = Vec::new();
    let mut labels = Vec::new();
    let mut sync_ranks: Option<Vec<Trained>> = None;
    for (name, mode) in modes {
        let ranks = running_stats(&SIZES, world, b, args.steps, &train, mode).map_err(lab_error)?;
        let points = (0..args.steps)
            .step_by((args.steps / 60).max(1))
            .map(|s| {
                let d = ranks
                    .iter()
                    .map(|r| {
                        r.running_means[s]
                            .f_sub(&ranks[0].running_means[s])?
                            .f_abs()?
                            .f_max()?
                            .f_double_value(&[])
                    })
                    .try_fold(0f64, |m, d| d.map(|d| m.max(d)))?;
                Ok([(s + 1) as f64, d])
            })
            .collect::<Result<Vec<_>, tch::TchError>>()?;
        spread = spread.with(FigureSeries::measured(name, points));
        let accs = ranks
            .iter()
            .map(|r| accuracy(&r.variables, &test))
            .collect::<anyhow::Result<Vec<f64>>>()?;
        let (lo, hi) = (
            accs.iter().copied().fold(f64::INFINITY, f64::min),
            accs.iter().copied().fold(0.0, f64::max),
        );
        println!(
            "  {name:<30} per rank {}   (spread of running means at the end {:.2e})",
            accs.iter()
                .map(|a| format!("{:.1}%", 100.0 * a))
                .collect::<Vec<_>>()
                .join(" "),
            ranks
                .iter()
                .map(|r| {
                    r.running_means.last().map_or(0.0, |t| {
                        t.f_sub(ranks[0].running_means.last().unwrap_or(t))
                            .and_then(|d| d.f_abs()?.f_max()?.f_double_value(&[]))
                            .unwrap_or(f64::NAN)
                    })
                })
                .fold(0.0, f64::max)
        );
        labels.push(name.to_owned());
        accuracy_low.push(100.0 * lo);
        accuracy_range.push(100.0 * (hi - lo));
        if name.starts_with("SyncBN") {
            sync_ranks = Some(ranks);
        }
    }
    let one = running_stats(
        &SIZES,
        1,
        world * b,
        args.steps,
        &train,
        BnMode {
            norm: Norm::Local,
            broadcast_buffers: false,
            metrics: None,
        },
    )
    .map_err(lab_error)?;
    let one_acc = accuracy(&one[0].variables, &test)?;
    println!(
        "  {:<30} {:.1}%",
        format!("one process, {} rows", world * b),
        100.0 * one_acc
    );
    labels.push(format!("one process, {} rows", world * b));
    accuracy_low.push(100.0 * one_acc);
    accuracy_range.push(0.0);

    // The recipes, on SyncBN's rank 0.
    let sync_ranks = sync_ranks.context("no SyncBN run")?;
    let trained = &sync_ranks[0].variables;
    let file = dir.join("ddp.safetensors");
    println!(
        "\ncheckpoint: rank 0 saves the DDP model's state dict (names with `module.`), barrier, every rank loads"
    );
    let loaded = save_then_load(world, trained, &file)?;
    for (rank, (strict, vars)) in loaded.iter().enumerate() {
        if rank == 0 {
            println!(
                "  a strict load without removing the prefix fails: {}",
                strict.lines().next().unwrap_or("")
            );
        }
        let d = max_diff(vars, trained).map_err(lab_error)?;
        if d != 0.0 {
            anyhow::bail!("rank {rank} loaded weights {d:e} away from rank 0's");
        }
    }
    println!("  with the prefix consumed, all {world} ranks hold rank 0's weights to the bit");

    // Mid-epoch resume: 50 batches per epoch, stopped inside the second.
    let subset = train.head(world * 16 * 50).map_err(lab_error)?;
    let r =
        resume(world, 16, 75, 120, &subset, &dir.join("resume.safetensors")).map_err(lab_error)?;
    let (epoch, batch, step) = r.stopped_at;
    println!(
        "  resume: stopped at epoch {epoch}, batch {batch} (step {step}), saved by rank 0, loaded \
         by every rank with its momentum and the sampler's place, resumed to step 120: max |Δ| \
         from the uninterrupted run {:e}{}",
        r.max_diff,
        if r.max_diff == 0.0 {
            " (bit-identical)"
        } else {
            ""
        }
    );
    if r.max_diff != 0.0 {
        anyhow::bail!(
            "the resumed run differs from the uninterrupted one by {:e}",
            r.max_diff
        );
    }

    println!("\ninference on one device of the DDP-trained (SyncBN) model:");
    let (correct, count) =
        distributed_accuracy(&SIZES, world, trained, &test).map_err(lab_error)?;
    // A fresh plain model (other random weights) that only the file fills.
    let from_file = |train: bool| {
        with_one_rank(&test, |comm, d| {
            let (vs, m) = trainers::sync_bn::check::model(&SIZES, Norm::Local, 7)?;
            checkpoint::load_state_dict(&file, &vs, Some(checkpoint::DDP_PREFIX))?;
            tally(comm, &m, d, 0..d.len(), train)
        })
    };
    let one_device = from_file(false)?;
    let forgot_eval = from_file(true)?;
    println!(
        "  distributed evaluation ({world} ranks, eval mode):        {correct} of {count} = {:.2}%",
        100.0 * correct as f64 / count as f64
    );
    println!(
        "  one device, wrapper stripped, eval mode:               {} of {} = {:.2}%  (the same: {})",
        one_device.0,
        one_device.1,
        100.0 * one_device.0 as f64 / one_device.1 as f64,
        if one_device == (correct, count) {
            "yes"
        } else {
            "NO"
        }
    );
    println!(
        "  one device, model.eval() forgotten (batch statistics): {} of {} = {:.2}%",
        forgot_eval.0,
        forgot_eval.1,
        100.0 * forgot_eval.0 as f64 / forgot_eval.1 as f64
    );
    if one_device != (correct, count) {
        anyhow::bail!("the one-device evaluation disagrees with the distributed one");
    }

    println!("\nPyTorch interop (safetensors, the same names, eval mode, batches of {EVAL_ROWS}):");
    let interop = pytorch_interop(&args, &dir, &file, &test, one_device);
    let metrics = std::fs::read_to_string(&metrics_file)
        .with_context(|| format!("reading {}", metrics_file.display()));
    let _ = std::fs::remove_dir_all(&dir);
    let metrics = metrics?;
    for line in interop? {
        println!("  {line}");
    }

    // Only now: a starter that fails above leaves no results folder behind.
    let mut run = Run::start(12, world, "shm (thread ranks)")?;
    run.figure(spread)?;
    run.figure(
        Figure::stacked_bars(
            "test-accuracy",
            &format!("Test accuracy of each rank's model in eval mode, {world} ranks of {b} rows (higher is better)"),
            labels,
            "% correct",
        )
        .with_layer("the lowest rank", &accuracy_low)
        .with_layer("up to the highest rank", &accuracy_range),
    )?;
    let pct = |c: (u64, u64)| 100.0 * c.0 as f64 / c.1.max(1) as f64;
    run.figure(
        Figure::stacked_bars(
            "inference",
            "Test accuracy of the SyncBN model, evaluated three ways (the first two must agree)",
            vec![
                format!("distributed, {world} ranks"),
                "one device, eval mode".into(),
                "one device, eval() forgotten".into(),
            ],
            "% correct",
        )
        .with_layer(
            "accuracy",
            &[pct((correct, count)), pct(one_device), pct(forgot_eval)],
        ),
    )?;
    // The SyncBN run's metrics: loss and accuracy over every rank's rows,
    // summed with one all-reduce per step and written by rank 0 alone.
    let mut loss = Vec::new();
    for line in metrics.lines() {
        let v: serde_json::Value = serde_json::from_str(line)?;
        if v["kind"] == "step" {
            let step = v["step"].as_f64().context("a step line without step")?;
            loss.push([step, v["loss"].as_f64().unwrap_or(f64::NAN)]);
        }
    }
    std::fs::write(run.dir().join("metrics.jsonl"), &metrics)?;
    println!(
        "\nmetrics: rank 0 logged {} steps of the SyncBN run's loss and accuracy over all {world} \
         ranks' rows to metrics.jsonl (JSON lines: no maintained crate writes TensorBoard's event \
         files, so the chart below stands in for it)",
        loss.len()
    );
    run.figure(
        Figure::lines(
            "training-loss",
            &format!("SyncBN training loss over all {world} ranks' rows, logged by rank 0 (lower is better)"),
            "step",
            "cross-entropy",
        )
        .with(FigureSeries::measured("mean over every rank's rows", loss)),
    )?;
    let out = run.finish()?;
    println!(
        "\nCharts in {}: running-mean-spread.svg, test-accuracy.svg, inference.svg, training-loss.svg.",
        out.display()
    );
    Ok(())
}

/// Eval-mode accuracy of a plain model holding `vars` on `test`.
fn accuracy(vars: &[(String, Tensor)], test: &Dataset) -> anyhow::Result<f64> {
    let vars = Mutex::new(Some(
        vars.iter()
            .map(|(n, t)| (n.clone(), t.copy()))
            .collect::<Vec<_>>(),
    ));
    let (c, n) = with_one_rank(test, |comm, d| {
        let vars = vars
            .lock()
            .map_err(|_| trainers::Error::InvalidArgument("a rank panicked".into()))?
            .take()
            .unwrap_or_default();
        let (_vs, m) = plain_model(&SIZES, &vars)?;
        tally(comm, &m, d, 0..d.len(), false)
    })?;
    Ok(c as f64 / n.max(1) as f64)
}

/// `f` with a one-rank communicator (a plain model never communicates; its
/// forward takes one anyway) and a handle on `data`.
fn with_one_rank(
    data: &Dataset,
    f: impl Fn(&dyn collectives::Communicator, &Dataset) -> trainers::Result<trainers::train::Tally>
    + Sync,
) -> anyhow::Result<(u64, u64)> {
    let out = with_data_ranks(1, data, Duration::from_secs(30), |_, comm, d| {
        let t = f(comm.as_ref(), &d)?;
        Ok((t.correct(), t.count()))
    })
    .map_err(lab_error)?;
    Ok(out
        .into_iter()
        .next()
        .context("no rank")?
        .map_err(lab_error)?)
}

/// What one rank saw: the strict load's error, then the variables it loaded.
type Loaded = (String, Vec<(String, Tensor)>);

/// The recipe: rank 0 writes `vars` under DDP's names (`module.` + name),
/// every rank waits at a barrier, then loads into a plain model: first
/// strictly as saved (which fails, its error returned), then with the prefix
/// consumed.
fn save_then_load(
    world: usize,
    vars: &[(String, Tensor)],
    file: &std::path::Path,
) -> anyhow::Result<Vec<Loaded>> {
    let to_save = Mutex::new(Some(
        vars.iter()
            .map(|(n, t)| (format!("{}{n}", checkpoint::DDP_PREFIX), t.copy()))
            .collect::<Vec<_>>(),
    ));
    let empty = Dataset {
        images: Tensor::zeros([1, 784], tch::kind::FLOAT_CPU),
        labels: Tensor::zeros([1], tch::kind::INT64_CPU),
    };
    let out = with_data_ranks(world, &empty, Duration::from_secs(30), |rank, comm, _| {
        if rank == 0 {
            let sd = to_save
                .lock()
                .map_err(|_| trainers::Error::InvalidArgument("a rank panicked".into()))?
                .take()
                .unwrap_or_default();
            checkpoint::save_state_dict(file, &sd)?;
        }
        // Without it the other ranks could read a file rank 0 has not
        // finished writing, or the previous epoch's.
        comm.barrier()?;
        let (vs, _m) = trainers::sync_bn::check::model(&SIZES, Norm::Local, 1000 + rank as i64)?;
        let strict = match checkpoint::load_state_dict(file, &vs, None) {
            Ok(()) => "loaded (unexpected)".to_owned(),
            Err(e) => e.to_string(),
        };
        checkpoint::load_state_dict(file, &vs, Some(checkpoint::DDP_PREFIX))?;
        Ok((strict, snapshot(&vs)))
    })
    .map_err(lab_error)?;
    out.into_iter()
        .map(|r| r.map_err(|e| anyhow::anyhow!(lab_error(e))))
        .collect()
}

/// A fresh folder under the system's temporary directory.
fn tempdir() -> anyhow::Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("ringside-lab12-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// Both directions, on `test`: a model PyTorch trained and saved, loaded here
/// strictly and evaluated (the counts must be PyTorch's own); the SyncBN model
/// (`ours_file`, DDP's names) saved here under its own names, loaded by
/// PyTorch and evaluated (the counts must be `ours`). Without a Python with
/// PyTorch, one line saying so.
fn pytorch_interop(
    args: &Args,
    dir: &std::path::Path,
    ours_file: &std::path::Path,
    test: &Dataset,
    ours: (u64, u64),
) -> anyhow::Result<Vec<String>> {
    let root = measure::manifest::workspace_dir();
    let python = root.join(&args.python);
    if !python.exists() {
        return Ok(vec![format!(
            "skipped: no Python with PyTorch at {} (`cargo xtask setup` makes it)",
            python.display()
        )]);
    }
    let script = root.join("labs/12-ddp-recipes/interop.py");
    let sizes = SIZES.map(|s| s.to_string()).join(",");
    let run = |cmd: &str, file: &std::path::Path| -> anyhow::Result<(u64, u64)> {
        let out = std::process::Command::new(&python)
            .arg(&script)
            .arg(cmd)
            .args(["--file", &file.to_string_lossy()])
            .args(["--data", trainers::data::DEFAULT_DIR, "--sizes", &sizes])
            .args(["--mean", &trainers::data::MEAN.to_string()])
            .args(["--std", &trainers::data::STD.to_string()])
            .args(["--rows", &EVAL_ROWS.to_string()])
            .args(["--limit", &test.len().to_string()])
            .output()
            .context("starting interop.py")?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout.lines().find(|l| l.starts_with('{'));
        let Some(line) = line.filter(|_| out.status.success()) else {
            anyhow::bail!(
                "interop.py {cmd} failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        };
        let v: serde_json::Value = serde_json::from_str(line)?;
        Ok((
            v["correct"].as_u64().context("no correct")?,
            v["count"].as_u64().context("no count")?,
        ))
    };
    let same = |a: (u64, u64), b: (u64, u64)| if a == b { "the same" } else { "DIFFERENT" };
    let mut said = Vec::new();
    // PyTorch -> ringside, by PyTorch's own names.
    let theirs_file = dir.join("pytorch.safetensors");
    let theirs = run("write", &theirs_file)?;
    let here = with_one_rank(test, |comm, d| {
        let (vs, m) = trainers::sync_bn::check::model(&SIZES, Norm::Local, 8)?;
        checkpoint::load_state_dict(&theirs_file, &vs, None)?;
        tally(comm, &m, d, 0..d.len(), false)
    })?;
    said.push(format!(
        "PyTorch trained and saved a model; PyTorch evaluates it {} of {}, ringside (a strict \
         load) {} of {}: {}",
        theirs.0,
        theirs.1,
        here.0,
        here.1,
        same(here, theirs)
    ));
    // ringside -> PyTorch: the SyncBN model under its own names.
    let plain = dir.join("ringside.safetensors");
    let (vs, _m) = trainers::sync_bn::check::model(&SIZES, Norm::Local, 7).map_err(lab_error)?;
    checkpoint::load_state_dict(ours_file, &vs, Some(checkpoint::DDP_PREFIX)).map_err(lab_error)?;
    checkpoint::save_state_dict(&plain, &snapshot(&vs)).map_err(lab_error)?;
    let torch_eval = run("evaluate", &plain)?;
    said.push(format!(
        "ringside's SyncBN model, loaded by PyTorch: {} of {}, ringside {} of {}: {}",
        torch_eval.0,
        torch_eval.1,
        ours.0,
        ours.1,
        same(torch_eval, ours)
    ));
    if here != theirs || torch_eval != ours {
        anyhow::bail!("PyTorch and ringside disagree: {}", said.join("; "));
    }
    Ok(said)
}
