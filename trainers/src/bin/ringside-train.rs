//! `ringside-train`: data-parallel training with PyTorch DDP's semantics over
//! ringside's collectives (reference, gloo, mpi or nccl).
//!
//! Run plainly it spawns `--nproc` local ranks of itself; under torchrun, mpirun,
//! srun or `ringside launch` it joins their job. Every rank trains a replica on its
//! share of each epoch ([`DistributedSampler`]); rank 0 prints and writes the
//! metrics, the merged Chrome trace and the checkpoints.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use collectives::job::{JobArgs, Joined};
use collectives::{Backend, BufferMut, Communicator, Input, ReduceOp};
use serde_json::json;
use tch::Device;
use trainers::autograd::profile::Profiler;
use trainers::checkpoint::{self, TrainState};
use trainers::data::{self, DataArgs, Dataset, Split};
use trainers::ddp::{Ddp, DdpOptions, StageSplit};
use trainers::lr::{LrSchedule, Scaling};
use trainers::metrics::{EpochRecord, Metrics};
use trainers::models::Arch;
use trainers::optim::{Sgd, SgdConfig};
use trainers::sampler::DistributedSampler;
use trainers::timeline::{self, TID_COMPUTE};
use trainers::train::pending::Pending;
use trainers::train::phases::{Phase, PhaseClock, PhaseTimes};
use trainers::train::step::{Batch, SgdStep, TrainStep};
use trainers::train::window::Window;
use trainers::train::{self, Tally};

/// Data-parallel training (PyTorch DDP semantics) of a small model on Fashion-MNIST.
///
/// Gradients are averaged across ranks in buckets (1 MiB first, then
/// --bucket-cap-mb), started from autograd hooks during the one backward.
/// Steps whose loss and accuracy stay on the device before they are read back
/// together (one wait for the device per 16 steps, not three per step); the
/// progress bar and the step records follow them 16 steps late at most.
const PENDING_STEPS: usize = 16;

#[derive(Debug, Parser)]
#[command(name = "ringside-train", version, about, long_about = None)]
#[command(mut_arg("backend", |a| a.help("Backend: reference, gloo, mpi or nccl (nccl trains on CUDA)")))]
struct Args {
    #[command(flatten)]
    job: JobArgs<1>,
    /// Model.
    #[arg(long, value_enum, default_value = "cnn")]
    model: Arch,
    #[command(flatten)]
    data: DataArgs,
    /// Train on N synthetic examples (test on N/5) instead of reading --data.
    #[arg(long, value_name = "N")]
    synthetic: Option<usize>,
    /// Batch size per rank.
    #[arg(long, default_value_t = 64)]
    batch: usize,
    /// Learning rate, as given: no scaling rule, no warm-up [default: set by
    /// --lr-scaling].
    #[arg(long, conflicts_with_all = ["lr_scaling", "lr_warmup"])]
    lr: Option<f64>,
    /// How the rate grows from 0.01 (tuned for one rank's --batch): `ranks`
    /// multiplies it by the rank count (--accumulate does not change it);
    /// `linear` and `sqrt` scale it by k or √k, k = ranks × --accumulate (the
    /// effective batch over --batch); `none` keeps 0.01.
    #[arg(long, default_value = "ranks", value_parser = ["ranks", "linear", "sqrt", "none"])]
    lr_scaling: String,
    /// Optimizer steps over which the rate rises linearly from 0.01 to the
    /// scaled rate (Goyal et al.'s warm-up).
    #[arg(long, default_value_t = 0, value_name = "STEPS")]
    lr_warmup: u64,
    /// SGD momentum.
    #[arg(long, default_value_t = 0.9)]
    momentum: f64,
    /// Epochs to train.
    #[arg(long, default_value_t = 1)]
    epochs: u64,
    /// Stop after this many optimizer steps in total.
    #[arg(long)]
    steps: Option<u64>,
    /// Micro-batches per optimizer step: all but the last run under no_sync.
    #[arg(long, default_value_t = 1)]
    accumulate: usize,
    /// Clip gradients to this global 2-norm after the sync.
    #[arg(long, value_name = "NORM")]
    clip: Option<f64>,
    /// libtorch intra-op threads per rank.
    #[arg(long, default_value_t = 1)]
    threads: i32,
    /// Bucket cap in MiB [default: 25, with a 1 MiB first bucket; as in PyTorch,
    /// setting it makes the first bucket this size too unless --first-bucket-mb].
    #[arg(long, value_name = "MB")]
    bucket_cap_mb: Option<f64>,
    /// Size limit of the first bucket (the last layers') in MiB.
    #[arg(long, value_name = "MB")]
    first_bucket_mb: Option<f64>,
    /// All-reduce gradients as 16-bit floats (half the bytes; PyTorch's
    /// fp16_compress_hook / bf16_compress_hook): none, fp16 or bf16.
    #[arg(long, default_value = "none", value_parser = ["none", "fp16", "bf16"])]
    grad_compress: String,
    /// Where stages end, whose completion lets buckets start during backward:
    /// auto (where buckets complete), every-layer, or whole (no overlap).
    #[arg(long, default_value = "auto", value_parser = ["auto", "every-layer", "whole"])]
    split: String,
    /// Seed of the initial weights and the data order.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Steps not counted in the throughput (warm-up).
    #[arg(long, default_value_t = 5)]
    warmup: u64,
    /// On a GPU, time the step's phases on one step in N: a timed step waits
    /// for the device after each phase, which stalls the queue of kernels; the
    /// others run without waiting. 1 times every step (an exact split, a slower
    /// run). On the CPU every step is timed.
    #[arg(long, default_value_t = PENDING_STEPS as u64, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..))]
    phase_every: u64,
    /// Write a metrics line every N steps (and every epoch).
    #[arg(long, default_value_t = 50, value_name = "N")]
    log_every: u64,
    /// Write metrics as JSON lines here (rank 0).
    #[arg(long, value_name = "FILE.jsonl")]
    metrics: Option<PathBuf>,
    /// Write every rank's timeline as one Chrome trace here (rank 0).
    #[arg(long, value_name = "FILE.json")]
    trace: Option<PathBuf>,
    /// Record --profile-steps steps after the warm-up with libtorch's profiler
    /// (torch.profiler's Kineto: every op and, on a GPU, every kernel) and write
    /// them here as a Chrome trace (rank 0). Those steps are left out of the
    /// throughput. `benches/profile_summary.py` compares it with PyTorch's.
    #[arg(long, value_name = "FILE.json")]
    profile: Option<PathBuf>,
    /// Steps --profile records.
    #[arg(long, default_value_t = 10, value_name = "N", requires = "profile",
          value_parser = clap::value_parser!(u64).range(1..))]
    profile_steps: u64,
    /// Save a checkpoint (DIR/last.safetensors) after every epoch and at the end.
    /// One live run per DIR: a second is refused, naming the first's pid.
    #[arg(long, value_name = "DIR")]
    checkpoint: Option<PathBuf>,
    /// Resume from DIR/last.safetensors (needs --checkpoint).
    #[arg(long, requires = "checkpoint")]
    resume: bool,
    /// Resume a checkpoint written with another number of ranks: the rest of its
    /// epoch is re-sharded (some examples seen twice, some not at all).
    #[arg(long, requires = "resume")]
    allow_world_change: bool,
    /// Train nothing: load DIR/last.safetensors (needs --checkpoint), evaluate it
    /// on the test set and print its loss and accuracy (with --json, the summary).
    #[arg(long, requires = "checkpoint", conflicts_with_all = ["resume", "no_eval"])]
    evaluate: bool,
    /// Skip the evaluation on the test set.
    #[arg(long)]
    no_eval: bool,
    /// Print one JSON summary line on stdout (rank 0).
    #[arg(long)]
    json: bool,
    /// Keep glibc malloc's defaults (which hand freed activation memory back to
    /// the kernel between steps, so the next step page-faults it in again).
    #[arg(long)]
    default_malloc: bool,
}

/// Every step frees and reallocates the same few megabytes of activations. With
/// glibc's defaults, whether that memory is handed back to the kernel (top-of-heap
/// trimming, or mmap for chunks above a moving threshold) depends on what else
/// sits on the heap, so some runs page-fault millions of times more than others
/// and lose 40% of their throughput. Fixed thresholds make every run the fast one:
/// chunks up to 32 MiB come from the heap, and freed memory stays with the process.
/// (The same as `GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:
/// glibc.malloc.trim_threshold=1073741824`, which benches/ddp_compare.py can give
/// PyTorch too.)
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator parameters; called before any other
    // thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}

fn main() -> anyhow::Result<()> {
    // Before any thread or libtorch starts: Debian's Gloo must win over
    // libtorch's bundled copy.
    collectives::backends::ensure_gloo_first();
    let args = Args::parse();
    if !args.default_malloc {
        keep_freed_memory();
    }
    let Joined { rdv, comm, timeout } = match args.job.join("train/")? {
        Ok(joined) => joined,
        Err(code) => std::process::exit(code),
    };
    let local_rank = rdv.info.local_rank;
    run(&args, comm, local_rank, timeout)?;
    rdv.close(timeout).context("leaving the job's store")?;
    Ok(())
}

fn run(
    args: &Args,
    comm: Box<dyn Communicator>,
    local_rank: usize,
    timeout: Duration,
) -> anyhow::Result<()> {
    let (rank, world) = (comm.rank(), comm.world_size());
    if args.batch == 0 || args.accumulate == 0 {
        bail!("--batch and --accumulate must be at least 1");
    }
    // One live run per checkpoint folder (rank 0 writes it, so rank 0 holds
    // it, until this function returns): a second run into it is refused here,
    // before it reads anything, naming the first's pid.
    let _checkpoint_lock = match &args.checkpoint {
        Some(dir) if rank == 0 && !args.evaluate => Some(checkpoint::lock_folder(dir)?),
        _ => None,
    };
    tch::set_num_threads(args.threads);
    let device = if args.job.backend == Backend::Nccl {
        if !tch::Cuda::is_available() {
            bail!(
                "--backend nccl trains on CUDA, but {}",
                trainers::torch_info()
            );
        }
        Device::Cuda(local_rank % tch::Cuda::device_count().max(1) as usize)
    } else {
        Device::Cpu
    };
    let (train_set, test_set) = load_data(args, device)?;

    tch::manual_seed(args.seed as i64);
    let vs = tch::nn::VarStore::new(device);
    let model = args.model.blueprint().build(&vs.root());
    let cap = args.bucket_cap_mb.map(mib);
    let ddp_opts = DdpOptions {
        bucket_cap_bytes: cap.unwrap_or(trainers::bucket::DEFAULT_BUCKET_CAP_BYTES),
        first_bucket_bytes: args
            .first_bucket_mb
            .map(mib)
            .or(cap)
            .unwrap_or(trainers::bucket::DEFAULT_FIRST_BUCKET_BYTES),
        split: match args.split.as_str() {
            "every-layer" => StageSplit::EveryLayer,
            "whole" => StageSplit::Whole,
            _ => StageSplit::Auto,
        },
        timeout: timeout + Duration::from_secs(10),
        ..DdpOptions::default()
    };
    let sync: std::sync::Arc<dyn trainers::ddp::GradSync> = match args.grad_compress.as_str() {
        "fp16" => std::sync::Arc::new(trainers::ddp::Compressed::fp16()),
        "bf16" => std::sync::Arc::new(trainers::ddp::Compressed::bf16()),
        _ => std::sync::Arc::new(trainers::ddp::Standard),
    };
    let mut ddp = Ddp::with_sync(model, &vs, comm, ddp_opts, sync)?;
    let schedule = lr_schedule(args, world)?;
    let mut lr = schedule.lr_at(0);
    let mut opt = Sgd::new(&vs, SgdConfig::new(lr).momentum(args.momentum))?;
    let ckpt = args.checkpoint.as_ref().map(|d| d.join("last.safetensors"));
    let mut state = TrainState {
        seed: args.seed,
        ..Default::default()
    };
    if let (true, Some(path)) = (args.resume || args.evaluate, &ckpt) {
        if path.exists() {
            state = checkpoint::load(path, &vs, Some(&mut opt))
                .with_context(|| format!("resuming from {}", path.display()))?;
            if args.resume {
                check_world(&state, world, args.allow_world_change, rank, path)?;
            }
            if rank == 0 {
                eprintln!(
                    "resumed from {}: epoch {}, batch {}, step {}",
                    path.display(),
                    state.epoch,
                    state.batch_in_epoch,
                    state.step
                );
            }
        } else if args.evaluate {
            bail!("--evaluate: no checkpoint at {}", path.display());
        } else if rank == 0 {
            eprintln!("no checkpoint at {} yet: starting fresh", path.display());
        }
    }
    if args.evaluate {
        let val = ddp.with_communicator(|model, c| {
            train::evaluate(model, &test_set, &test_shard(&test_set, c)?, 1000, Some(c))
        })??;
        if rank == 0 {
            eprintln!(
                "evaluated {} (step {}) on {} test examples: loss {:.4}, accuracy {:.2}%",
                ckpt.as_deref()
                    .unwrap_or(std::path::Path::new("-"))
                    .display(),
                state.step,
                val.count(),
                val.loss(),
                100.0 * val.accuracy()
            );
            if args.json {
                print_summary(
                    args,
                    &Summary {
                        world,
                        steps: state.step,
                        timed_steps: 0,
                        samples_per_s: 0.0,
                        val: Some(val),
                        exposed: None,
                        phases: None,
                        ddp: &ddp,
                    },
                )?;
            }
        }
        return Ok(());
    }
    if let Some(dir) = &args.checkpoint {
        if rank == 0 {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
    }
    if rank == 0 && !args.evaluate {
        eprintln!(
            "ringside-train: {} on {} rank(s), backend {}, {} params, {}; {}, \
             buckets {:?} B, stages {:?}; {}",
            args.model_name(),
            world,
            args.job.backend,
            trainers::models::param_count(&vs),
            batch_line(args.batch, args.accumulate, world),
            lr_line(args, world, &schedule),
            ddp.bucket_bytes(),
            ddp.stage_labels(),
            trainers::torch_info()
        );
    }

    let mut metrics =
        Metrics::new(rank, world, args.metrics.as_deref(), args.resume)?.log_every(args.log_every);
    let sampler = DistributedSampler::new(train_set.len(), world, rank)?.with_seed(args.seed);
    let eval_sampler = DistributedSampler::for_eval(test_set.len(), world, rank)?;
    let mut clock = PhaseClock::sampled(device, args.phase_every as usize);
    let mut step_fn = SgdStep;
    let max_steps = args.steps.unwrap_or(u64::MAX);
    let global_batch = (args.batch * world * args.accumulate) as f64;
    // Throughput over the steps after the warm-up (and the profiled ones), as
    // wall-clock time with the device synchronised at both ends, leaving out
    // evaluations (see trainers::train::window).
    let mut window = Window::new(device);
    let profile = args.profile.as_ref().filter(|_| rank == 0);
    let profiled = if args.profile.is_some() {
        args.profile_steps
    } else {
        0
    };
    let timed_from = args.warmup + profiled;
    let (mut profiler, mut profile_written): (Option<Profiler>, bool) = (None, false);
    let mut last_val: Option<Tally> = None;
    let start_epoch = state.epoch;
    'epochs: for epoch in start_epoch..args.epochs {
        if state.step >= max_steps {
            break;
        }
        let mut s = sampler.clone();
        s.set_epoch(epoch);
        let indices = s.indices();
        let batches: Vec<&[usize]> = indices.chunks(args.batch).collect();
        let steps_in_epoch = batches.len() / args.accumulate;
        let skip = if epoch == start_epoch {
            state.batch_in_epoch as usize
        } else {
            0
        };
        let done = (skip / args.accumulate) as u64;
        metrics.begin_epoch(
            epoch,
            bar_len(steps_in_epoch as u64, done, state.step, max_steps),
            done,
        );
        let mut tally = Tally::new();
        let mut pending = Pending::new();
        let epoch_start = Instant::now();
        let mut b = skip;
        while b + args.accumulate <= batches.len() {
            if state.step >= max_steps {
                break;
            }
            if state.step >= timed_from {
                window.open();
            }
            if profile.is_some() && state.step == args.warmup {
                profiler = Some(Profiler::start(device)?);
            }
            let t0 = Instant::now();
            // The step counter is in the checkpoint, so a resumed run picks up
            // the warm-up where it was.
            lr = schedule.lr_at(state.step);
            opt.set_lr(lr)?;
            for micro in 0..args.accumulate {
                let batch = clock.time(Phase::Data, || -> anyhow::Result<Batch> {
                    let (x, y) = train_set.batch(batches[b + micro])?;
                    Ok(Batch {
                        x,
                        y,
                        accumulate: args.accumulate,
                    })
                })?;
                // All but the last micro-batch only accumulate their gradients.
                let out = if micro + 1 < args.accumulate {
                    ddp.no_sync(|d| step_fn.forward_backward(d, &batch, &mut clock))?
                } else {
                    step_fn.forward_backward(&mut ddp, &batch, &mut clock)?
                };
                // The step's and the epoch's loss and accuracy (a few argmaxes
                // of 64×10: noise next to the step), left on the device: read
                // back every PENDING_STEPS steps, so the loop never waits for it.
                pending.add_micro(&out.loss, &out.logits, &batch.y)?;
            }
            if let Some(max) = args.clip {
                let t = Instant::now();
                // The norm stays on the device: reading it would wait for it.
                let _norm = ddp.clip_grad_norm(max)?;
                clock.record(Phase::Optimizer, t, Instant::now());
            }
            step_fn.optimizer_step(&mut opt, &mut clock)?;
            clock.end_step();
            // The data and optimizer spans go into DDP's timeline beside its
            // forward, backward and communication spans.
            for span in clock.take_spans() {
                if matches!(span.phase, Phase::Data | Phase::Optimizer) {
                    let name = span.phase.name();
                    ddp.timeline_mut().span(
                        name,
                        name,
                        TID_COMPUTE,
                        span.start,
                        span.end,
                        Default::default(),
                    );
                }
            }
            b += args.accumulate;
            state.step += 1;
            state.batch_in_epoch = b as u64;
            let dt = t0.elapsed().as_secs_f64();
            window.step(global_batch);
            if state.step == args.warmup + profiled
                && let (Some(p), Some(path)) = (profiler.take(), profile)
            {
                p.save(path)?;
                profile_written = true;
                eprintln!(
                    "profile of steps {}-{} written to {}",
                    args.warmup + 1,
                    state.step,
                    path.display()
                );
            }
            pending.end_step(epoch, state.step, lr, global_batch / dt);
            if pending.len() >= PENDING_STEPS {
                for (rec, ended) in pending.drain(&mut tally)? {
                    metrics.step_at(&rec, ended)?;
                }
            }
        }
        for (rec, ended) in pending.drain(&mut tally)? {
            metrics.step_at(&rec, ended)?;
        }
        window.close();
        let epoch_s = epoch_start.elapsed().as_secs_f64();
        let epoch_done = b + args.accumulate > batches.len();
        let val = if args.no_eval {
            None
        } else {
            Some(ddp.with_communicator(|model, c| {
                train::evaluate(model, &test_set, &eval_sampler, 1000, Some(c))
            })??)
        };
        if epoch_done {
            state.epoch = epoch + 1;
            state.batch_in_epoch = 0;
        }
        ddp.with_communicator(|_, c| tally.all_reduce(c))??;
        metrics.end_epoch(&EpochRecord {
            epoch,
            step: state.step,
            loss: tally.loss(),
            accuracy: tally.accuracy(),
            samples_per_s: (tally.count() as f64) / epoch_s.max(1e-9),
            lr,
            val_loss: val.as_ref().map(Tally::loss),
            val_accuracy: val.as_ref().map(Tally::accuracy),
        })?;
        if let Some(path) = &ckpt {
            state.extra.insert("model".into(), args.model_name().into());
            state.extra.insert("world_size".into(), world.to_string());
            ddp.with_communicator(|_, c| {
                checkpoint::save_distributed(c, path, &vs, Some(&opt), &state)
            })??;
        }
        last_val = val.or(last_val);
        if !epoch_done {
            break 'epochs;
        }
    }
    metrics.flush()?;
    // Nothing left to train (a resumed run that had already reached --steps or
    // --epochs): report the restored model rather than no accuracy at all.
    if last_val.is_none() && !args.no_eval {
        last_val = Some(ddp.with_communicator(|model, c| {
            train::evaluate(model, &test_set, &eval_sampler, 1000, Some(c))
        })??);
    }

    let exposed = ddp.timeline().mean_exposed_pct(args.warmup as usize);
    if let Some(path) = &args.trace {
        let mine = serde_json::to_vec(&ddp.timeline().to_chrome_trace())?;
        let all = ddp.with_communicator(|_, c| gather_bytes(c, &mine))??;
        if rank == 0 {
            let parts = all
                .iter()
                .map(|b| serde_json::from_slice(b))
                .collect::<Result<Vec<serde_json::Value>, _>>()?;
            timeline::write_trace(&timeline::merge_chrome_traces(&parts)?, path)?;
            eprintln!("trace of {world} rank(s) written to {}", path.display());
        }
    }
    window.close();
    drop(profiler.take());
    if let Some(path) = profile.filter(|_| !profile_written) {
        eprintln!(
            "profile: no step {}-{} ran in this run (--warmup {}, --profile-steps {}); \
             nothing written to {}",
            args.warmup + 1,
            args.warmup + args.profile_steps,
            args.warmup,
            args.profile_steps,
            path.display()
        );
    }
    let (samples_per_s, timed_steps) = (window.samples_per_s(), window.steps());
    let phases =
        (clock.timed_after(args.warmup as usize) > 0).then(|| clock.median(args.warmup as usize));
    if rank == 0 {
        let acc = last_val.as_ref().map(Tally::accuracy);
        eprintln!(
            "done: {} step(s), {:.1} samples/s (all ranks, {} timed steps), test accuracy {}, \
             exposed communication {}",
            state.step,
            samples_per_s,
            timed_steps,
            acc.map_or("-".into(), |a| format!("{:.2}%", 100.0 * a)),
            exposed.map_or("-".into(), |e| format!("{e:.1}% of step time")),
        );
        if let Some(p) = &phases {
            eprintln!("{}", phase_line(p, args.warmup, &clock));
        }
        if args.json {
            print_summary(
                args,
                &Summary {
                    world,
                    steps: state.step,
                    timed_steps,
                    samples_per_s,
                    val: last_val,
                    exposed,
                    phases,
                    ddp: &ddp,
                },
            )?;
        }
    }
    Ok(())
}

/// What the `--json` line reports.
struct Summary<'a> {
    world: usize,
    steps: u64,
    timed_steps: u64,
    samples_per_s: f64,
    val: Option<Tally>,
    exposed: Option<f64>,
    phases: Option<PhaseTimes>,
    ddp: &'a Ddp,
}

/// Prints the one JSON summary line on stdout.
fn print_summary(args: &Args, s: &Summary<'_>) -> anyhow::Result<()> {
    let phases_ms = s.phases.map(|p| {
        Phase::ALL
            .iter()
            .map(|&ph| (ph.name().to_string(), json!(1e3 * p.get(ph))))
            .collect::<serde_json::Map<_, _>>()
    });
    let line = json!({
        "impl": "ringside",
        "backend": args.job.backend.name(),
        "model": args.model_name(),
        "world_size": s.world,
        "batch_per_rank": args.batch,
        "accumulate": args.accumulate,
        "grad_compress": args.grad_compress,
        "effective_batch": args.batch * args.accumulate * s.world,
        "steps": s.steps,
        "timed_steps": s.timed_steps,
        "samples_per_s": s.samples_per_s,
        "test_accuracy": s.val.as_ref().map(Tally::accuracy),
        "test_loss": s.val.as_ref().map(Tally::loss),
        "exposed_comm_pct": s.exposed,
        "phase_ms": phases_ms,
        "bucket_bytes": s.ddp.bucket_bytes(),
        "threads": args.threads,
        "evaluate_only": args.evaluate,
    });
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    Ok(())
}

/// The batch as the optimizer sees it: per rank, times accumulation, times ranks.
/// Resuming with another number of ranks than the checkpoint's changes the data
/// order (DistributedSampler shards each epoch by world size), so the run would
/// not continue the interrupted one: refused unless asked, and then said.
fn check_world(
    state: &TrainState,
    world: usize,
    allow: bool,
    rank: usize,
    path: &std::path::Path,
) -> anyhow::Result<()> {
    let Some(saved) = state.extra.get("world_size") else {
        return Ok(());
    };
    if saved.parse::<usize>().ok() == Some(world) {
        return Ok(());
    }
    let what = format!(
        "{} was written by a {saved}-rank run and this run has {world}: the sampler shards \
         each epoch by the number of ranks, so the rest of epoch {} would be re-sharded \
         (some examples seen twice, some not at all) and the run would not continue the \
         interrupted one",
        path.display(),
        state.epoch
    );
    if !allow {
        bail!("{what}. Resume with --nproc {saved}, or pass --allow-world-change to go on anyway");
    }
    if rank == 0 {
        eprintln!("warning: {what}; going on (--allow-world-change)");
    }
    Ok(())
}

fn batch_line(batch: usize, accumulate: usize, world: usize) -> String {
    format!(
        "batch {batch} per rank × {accumulate} accumulated × {world} rank(s) = \
         effective batch {}",
        batch * accumulate * world
    )
}

/// The learning-rate schedule `--lr`, `--lr-scaling` and `--lr-warmup` ask for
/// (trainers' `lr::LrSchedule`): base 0.01 at one rank's batch.
fn lr_schedule(args: &Args, world: usize) -> anyhow::Result<LrSchedule> {
    let k = world * args.accumulate;
    Ok(match (args.lr, args.lr_scaling.as_str()) {
        (Some(lr), _) => LrSchedule::new(lr, 1, 1, Scaling::None, 0)?,
        (None, "ranks") => LrSchedule::new(0.01, 1, world, Scaling::Linear, args.lr_warmup)?,
        (None, rule) => LrSchedule::new(0.01, 1, k, rule.parse::<Scaling>()?, args.lr_warmup)?,
    })
}

/// The learning rate and the rule that set it (and, for the default rule, what
/// linear scaling in the whole effective batch would give).
fn lr_line(args: &Args, world: usize, schedule: &LrSchedule) -> String {
    let k = world * args.accumulate;
    let linear = 0.01 * k as f64;
    let warmup = match args.lr_warmup {
        0 => String::new(),
        n => format!(", warming up from 0.01 over {n} steps"),
    };
    let lr = schedule.target();
    match (args.lr, args.lr_scaling.as_str()) {
        (Some(lr), _) => format!(
            "lr {lr} as given (no rule applied; linear scaling from 0.01 per rank's \
             batch would be {linear})"
        ),
        (None, "ranks") if args.accumulate == 1 => {
            format!("lr {lr} (0.01 × {world} rank(s): linear scaling with the rank count{warmup})")
        }
        (None, "ranks") => format!(
            "lr {lr} (0.01 × {world} rank(s); unchanged by --accumulate {}: linear scaling in \
             the effective batch would be {linear}{warmup})",
            args.accumulate
        ),
        (None, rule) => {
            format!("lr {lr} (0.01 scaled by the {rule} rule for {k}× one rank's batch{warmup})")
        }
    }
}

/// The progress bar's length for an epoch of `in_epoch` steps of which `done`
/// are done, when `so_far` steps have run and at most `max` may: the steps this
/// run will really reach, so that `--steps` shows its own ETA, not the epoch's.
fn bar_len(in_epoch: u64, done: u64, so_far: u64, max: u64) -> u64 {
    in_epoch.min(done.saturating_add(max.saturating_sub(so_far)))
}

/// The per-phase split of the median step, and what dominates it.
fn phase_line(p: &PhaseTimes, warmup: u64, clock: &PhaseClock) -> String {
    let timed = clock.timed_after(warmup as usize);
    if timed == 0 {
        // All zeros and "most in data" would read as a measurement.
        return format!(
            "per-phase split: none, no timed step after the {warmup} warm-up step(s) \
             (--warmup {warmup}, one step in {} timed); run more steps to time them",
            clock.every()
        );
    }
    let sampled = if clock.every() > 1 {
        format!(", one step in {} timed (--phase-every)", clock.every())
    } else {
        String::new()
    };
    format!(
        "per-phase split of a step (medians over {timed} step(s) after {warmup} warm-up{sampled}, \
         this rank): {}; total {:.2} ms, most in {}",
        p.summary(),
        1e3 * p.total(),
        p.largest().name()
    )
}

impl Args {
    fn model_name(&self) -> &'static str {
        match self.model {
            Arch::Mlp => "mlp",
            Arch::Cnn => "cnn",
            Arch::Resnet => "resnet",
        }
    }
}

/// This rank's exact share of the test set.
fn test_shard(test_set: &Dataset, c: &dyn Communicator) -> trainers::Result<DistributedSampler> {
    DistributedSampler::for_eval(test_set.len(), c.world_size(), c.rank())
}

fn mib(mb: f64) -> usize {
    (mb * 1024.0 * 1024.0).round().max(0.0) as usize
}

fn load_data(args: &Args, device: Device) -> anyhow::Result<(Dataset, Dataset)> {
    let (train_set, test_set) = match args.synthetic {
        Some(n) => (
            data::synthetic(n, args.seed)?,
            data::synthetic((n / 5).max(1), args.seed + 1)?,
        ),
        None => (args.data.load(Split::Train)?, args.data.load(Split::Test)?),
    };
    Ok((train_set.to_device(device)?, test_set.to_device(device)?))
}

/// Every rank's bytes, on every rank (lengths first, then one padded all_gather).
fn gather_bytes(c: &dyn Communicator, mine: &[u8]) -> anyhow::Result<Vec<Vec<u8>>> {
    let world = c.world_size();
    let mut lens = vec![0i64; world];
    lens[c.rank()] = mine.len() as i64;
    c.all_reduce(
        Input::InPlace,
        &mut BufferMut::from_slice(&mut lens),
        ReduceOp::Sum,
    )?;
    let max = lens.iter().copied().max().unwrap_or(0) as usize;
    let mut all = vec![0u8; max * world];
    all[c.rank() * max..][..mine.len()].copy_from_slice(mine);
    c.all_gather(Input::InPlace, &mut BufferMut::from_slice(&mut all))?;
    Ok(lens
        .iter()
        .enumerate()
        .map(|(r, &n)| all[r * max..][..n as usize].to_vec())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run no longer than its warm-up printed a split of zeros "most in data".
    #[test]
    fn a_run_of_only_warm_up_steps_says_it_timed_none() {
        let mut clock = PhaseClock::new(Device::Cpu);
        for _ in 0..4 {
            clock.end_step();
        }
        let line = phase_line(&PhaseTimes::default(), 5, &clock);
        assert!(
            line.contains("none, no timed step after the 5 warm-up"),
            "{line}"
        );
        assert!(!line.contains("most in"), "{line}");
    }

    /// `--steps 60` in an epoch of 937: the bar is 60 long (its ETA is the
    /// run's), and a resumed epoch counts the steps already done.
    #[test]
    fn the_progress_bar_is_as_long_as_the_steps_this_run_reaches() {
        assert_eq!(bar_len(937, 0, 0, 60), 60);
        assert_eq!(bar_len(937, 0, 0, u64::MAX), 937);
        // Resumed at step 40 of epoch 1 (10 of its steps done), --steps 100.
        assert_eq!(bar_len(937, 10, 40, 100), 70);
        // A later epoch, the limit beyond it.
        assert_eq!(bar_len(50, 0, 1000, 2000), 50);
        assert_eq!(bar_len(937, 5, 60, 60), 5);
    }

    #[test]
    fn the_lr_line_names_the_rule_and_the_effective_batch() {
        assert_eq!(
            batch_line(64, 2, 3),
            "batch 64 per rank × 2 accumulated × 3 rank(s) = effective batch 384"
        );
        let line = |argv: &[&str], world: usize| {
            let args = Args::try_parse_from([&["ringside-train"], argv].concat()).unwrap();
            lr_line(&args, world, &lr_schedule(&args, world).unwrap())
        };
        let l = line(&["--accumulate", "2"], 1);
        assert!(
            l.starts_with("lr 0.01 ") && l.contains("would be 0.02"),
            "{l}"
        );
        assert!(line(&[], 4).contains("linear scaling with the rank count"));
        assert!(line(&["--lr", "0.05"], 1).contains("as given (no rule applied"));
        let l = line(
            &[
                "--lr-scaling",
                "sqrt",
                "--accumulate",
                "4",
                "--lr-warmup",
                "100",
            ],
            4,
        );
        assert!(
            l.starts_with("lr 0.04 ") && l.contains("sqrt rule for 16×"),
            "{l}"
        );
        assert!(l.contains("over 100 steps"), "{l}");
    }

    #[test]
    fn the_schedule_follows_the_rule_and_warms_up() {
        let schedule = |argv: &[&str], world: usize| {
            let args = Args::try_parse_from([&["ringside-train"], argv].concat()).unwrap();
            lr_schedule(&args, world).unwrap()
        };
        assert_eq!(schedule(&[], 3).target(), 0.01 * 3.0);
        let s = schedule(
            &[
                "--lr-scaling",
                "linear",
                "--accumulate",
                "2",
                "--lr-warmup",
                "10",
            ],
            2,
        );
        assert!((s.target() - 0.04).abs() < 1e-15);
        assert_eq!(s.lr_at(0), 0.01);
        assert!((s.lr_at(5) - 0.025).abs() < 1e-12);
        assert_eq!(s.lr_at(10), s.target());
        assert_eq!(schedule(&["--lr-scaling", "none"], 8).target(), 0.01);
        // A rate as given takes no rule and no warm-up.
        assert!(
            Args::try_parse_from(["ringside-train", "--lr", "0.1", "--lr-warmup", "5"]).is_err()
        );
    }
}
