//! Lab 9: which backend? Run as a learner runs it (`cargo lab 9`).
//!
//! Needs your guesses first (`src/exercise.rs`). Then, on one job of `--nproc`
//! ranks, every rank times every collective over a size sweep with the
//! reference backend (shared memory and TCP), Gloo and MPI, and trains the CNN
//! with DDP on each; rank 0 derives the decision table and writes
//! `results/lab09/<UTC time>/` (results, `table.md`, `table.json`, charts).
//!
//! MPI needs an MPI launcher: run plainly, the program starts itself under
//! `mpirun` when there is one (OpenMPI here), so all backends share the job;
//! `--no-mpirun` spawns the ranks itself and leaves MPI out.

use std::process::Command;
use std::time::Instant;

use anyhow::Context;
use clap::Parser;
use collectives::algorithms::Algo;
use collectives::bench::{self, Case, Combine, Settings};
use collectives::job::{self, ConnectArgs, SpawnArgs};
use collectives::rendezvous::env::RankInfo;
use collectives::transport::TransportKind;
use collectives::{Backend, Collective, Communicator, ReduceOp};
use lab09_which_backend::{Pick, decide, guesses, latest_records, table, validate};
use labkit::{Run, Variant};
use measure::{Figure, FigureSeries};
use tch::nn::{self, OptimizerConfig};
use trainers::data::{self, Split};
use trainers::ddp::{Ddp, DdpOptions};
use trainers::sampler::DistributedSampler;

/// Lab 9: Gloo, MPI and the reference backend on the same job, and a decision
/// table from this machine's measurements.
#[derive(Parser)]
#[command(version)]
struct Args {
    #[command(flatten)]
    spawn: SpawnArgs<2>,
    #[command(flatten)]
    connect: ConnectArgs,
    /// Largest message of the sweep, in bytes.
    #[arg(long, default_value = "4M", value_parser = measure::size::parse_size)]
    max_size: u64,
    /// DDP training steps per backend (after 3 warm-up steps).
    #[arg(long, default_value_t = 20)]
    ddp_steps: usize,
    /// Do not start under mpirun (MPI is then left out).
    #[arg(long)]
    no_mpirun: bool,
    /// A short run: small sweep, few steps, no mpirun (what CI runs).
    #[arg(long)]
    quick: bool,
}

fn main() -> std::process::ExitCode {
    // This program links libtorch, whose bundled Gloo must not serve the Gloo
    // backend: re-executes with Debian's libgloo first (as ringside-train does).
    collectives::backends::ensure_gloo_first();
    labkit::exit(run(Args::parse()), "")
}

fn run(args: Args) -> anyhow::Result<()> {
    let variant = Variant::from_env();
    // Guesses first: the point is to predict before measuring.
    let mine = guesses(variant)?;
    validate(&mine)?;
    if !args.quick && !args.no_mpirun && !RankInfo::launched_from_env()? {
        if let Some(code) = under_mpirun(args.spawn.nproc)? {
            std::process::exit(code);
        }
    }
    let timeout = args.connect.timeout()?;
    let rdv = labkit::rank(args.spawn.nproc, timeout)?;
    let (rank, world) = (rdv.info.rank, rdv.info.world_size);
    let say = |s: String| {
        if rank == 0 {
            println!("{s}");
        }
    };
    let max = if args.quick { 64 << 10 } else { args.max_size };
    let sizes = measure::size::sweep_sizes(8, max, 8, 0)?;
    bench::check_fits(
        2 * max * world as u64,
        world,
        bench::available_bytes(),
        "--max-size",
    )?;
    let mut run = (rank == 0)
        .then(|| Run::start(9, world, "several"))
        .transpose()?;
    say(format!(
        "lab 9 on {world} ranks ({variant}, launched by {}): every collective, 8 B to {}",
        rdv.info.launcher.name(),
        measure::size::human(max)
    ));

    let train = data::load(data::DEFAULT_DIR, Split::Train)?;
    let contenders = [
        (Pick::ReferenceShm, Backend::Reference, TransportKind::Shm),
        (Pick::ReferenceTcp, Backend::Reference, TransportKind::Tcp),
        (Pick::Gloo, Backend::Gloo, TransportKind::Tcp),
        (Pick::Mpi, Backend::Mpi, TransportKind::Auto),
    ];
    let mut ddp_rates = Vec::new();
    for (pick, backend, transport) in contenders {
        if let Some(why) = backend.launcher_problem(rdv.info.launcher) {
            say(format!(
                "{}: skipped, {why} (run without --no-mpirun, or under mpirun)",
                pick.label()
            ));
            continue;
        }
        let prefix = format!("lab09-{}/", pick.label());
        let comm = match job::connect(&rdv, backend, transport, Algo::Auto, timeout, &prefix) {
            Ok(c) => c,
            Err(e) => {
                say(format!(
                    "{}: skipped, {:#}",
                    pick.label(),
                    anyhow::Error::new(e)
                ));
                continue;
            }
        };
        let t0 = Instant::now();
        for collective in Collective::ALL {
            for &bytes in &sizes {
                let case = Case {
                    in_place: false,
                    ..Case::f32_sum(collective, bytes as usize)
                };
                let s = Settings {
                    warmup: 2,
                    iters: if args.quick {
                        3
                    } else if bytes <= 64 << 10 {
                        30
                    } else {
                        8
                    },
                    check: false,
                    combine: Combine::Max,
                };
                let m = bench::run(comm.as_ref(), &case, &s)
                    .with_context(|| format!("{} {collective} {bytes} B", pick.label()))?;
                if let (Some(run), Some(m)) = (run.as_mut(), m) {
                    run.push(m.to_record(pick.label(), backend.name(), "auto"))?;
                }
            }
        }
        let steps = if args.quick { 2 } else { args.ddp_steps };
        let rate = ddp_rate(comm, &train, rank, world, steps)
            .with_context(|| format!("DDP training with {}", pick.label()))?;
        say(format!(
            "{:<14} sweep of {} collectives in {:.1} s; DDP {rate:.0} samples/s",
            pick.label(),
            Collective::ALL.len(),
            t0.elapsed().as_secs_f64()
        ));
        ddp_rates.push((pick, rate));
    }
    let gpu = Err(if tch::Cuda::is_available() {
        "a CUDA GPU is here, but this lab times CPU tensors only so far (NCCL: `ringside bench \
         --backend nccl`)"
            .to_owned()
    } else {
        "no CUDA GPU here (NCCL needs one)".to_owned()
    });

    if let Some(mut run) = run {
        let records = run.records().to_vec();
        let hosts = latest_records(&labkit::results_root().join("lab08"));
        let decisions = decide(&records, &ddp_rates, gpu, hosts.as_deref());
        let (md, json) = table(&decisions, &mine);
        std::fs::write(run.dir().join("table.md"), &md)?;
        std::fs::write(
            run.dir().join("table.json"),
            serde_json::to_string_pretty(&json)?,
        )?;
        println!("\n{md}");
        let memcpy = labkit::limits::memcpy_gbps(64 << 20);
        match labkit::limits::loopback_tcp_gbps(64 << 20) {
            Ok(tcp) => println!(
                "This machine's limits: one core copies {memcpy:.2} GB/s (shared memory), one \
                 loopback TCP connection carries {tcp:.2} GB/s: compare the busbw charts."
            ),
            Err(e) => println!("one core copies {memcpy:.2} GB/s; loopback TCP: {e}"),
        }
        run.figure(relative_figure(&records, &sizes))?;
        run.figure(
            Figure::stacked_bars(
                "ddp-throughput",
                &format!("DDP training of the CNN on {world} ranks (higher is better)"),
                ddp_rates
                    .iter()
                    .map(|(p, _)| p.label().to_owned())
                    .collect(),
                "samples/s",
            )
            .with_layer(
                "samples/s",
                &ddp_rates.iter().map(|r| r.1).collect::<Vec<_>>(),
            ),
        )?;
        let dir = run.finish()?;
        println!(
            "The table is in {}; all_reduce-relative.svg shows each backend's all_reduce \
             time against the best at each size, latency-*.svg and busbw-*.svg every collective.",
            dir.join("table.md").display()
        );
    }
    rdv.close(timeout)?;
    Ok(())
}

/// Starts this program under `mpirun -np nproc` when there is one; the exit
/// code of that job, or `None` (no mpirun: go on without MPI).
fn under_mpirun(nproc: usize) -> anyhow::Result<Option<i32>> {
    let found = Command::new("mpirun").arg("--version").output();
    if !found.is_ok_and(|o| o.status.success()) {
        println!("mpi: no mpirun on PATH, so MPI is left out");
        return Ok(None);
    }
    let me = std::env::current_exe()?;
    let mut cmd = Command::new("mpirun");
    // OpenMPI refuses root without these; more ranks than cores is fine here.
    if std::env::var("USER").is_ok_and(|u| u == "root") || is_root() {
        cmd.args(["--allow-run-as-root"]);
    }
    cmd.args(["--oversubscribe", "-np", &nproc.to_string()])
        .arg(me)
        .args(std::env::args().skip(1));
    println!("lab 9: starting under mpirun so MPI shares the job: {cmd:?}");
    let status = cmd.status().context("running mpirun")?;
    Ok(Some(status.code().unwrap_or(1)))
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| {
        use std::os::unix::fs::MetadataExt;
        m.uid() == 0
    })
}

/// DDP training of the CNN for `steps` timed steps (after 3) with `comm`:
/// samples per second of all ranks, timed as the slowest rank.
fn ddp_rate(
    comm: Box<dyn Communicator>,
    train: &trainers::data::Dataset,
    rank: usize,
    world: usize,
    steps: usize,
) -> anyhow::Result<f64> {
    tch::set_num_threads(1);
    tch::manual_seed(0);
    let vs = nn::VarStore::new(tch::Device::Cpu);
    let model = trainers::models::cnn().build(&vs.root());
    let mut ddp = Ddp::new(model, &vs, comm, DdpOptions::default())?;
    let mut opt = nn::Sgd {
        momentum: 0.9,
        ..Default::default()
    }
    .build(&vs, 0.01 * world as f64)?;
    let indices = DistributedSampler::new(train.len(), world, rank)?.indices();
    let batch = 64;
    let mut timed = 0.0;
    for (s, idx) in indices.chunks(batch).take(3 + steps).enumerate() {
        let t0 = Instant::now();
        let (x, y) = train.batch(idx)?;
        opt.zero_grad();
        let _ = ddp.forward_backward(&x, |l| l.cross_entropy_for_logits(&y))?;
        opt.step();
        if s >= 3 {
            timed += t0.elapsed().as_secs_f64();
        }
    }
    let slowest = ddp.all_reduce_f64(vec![timed], ReduceOp::Max)?[0];
    Ok((world * batch * steps) as f64 / slowest)
}

/// Each backend's all_reduce median time over the best backend's at each size.
fn relative_figure(records: &[measure::Record], sizes: &[u64]) -> Figure {
    let mut fig = Figure::lines(
        "all_reduce-relative",
        "all_reduce time relative to the fastest backend at each size (1 = fastest, lower is better)",
        "message size (bytes)",
        "time / fastest",
    );
    let ar: Vec<&measure::Record> = records
        .iter()
        .filter(|r| r.collective == Collective::AllReduce)
        .collect();
    let labels: std::collections::BTreeSet<&str> = ar.iter().map(|r| r.label.as_str()).collect();
    for label in labels {
        let points = sizes
            .iter()
            .filter_map(|&b| {
                let mine = ar
                    .iter()
                    .find(|r| r.bytes == b && r.label == label)?
                    .median_us;
                let best = ar
                    .iter()
                    .filter(|r| r.bytes == b)
                    .map(|r| r.median_us)
                    .fold(f64::INFINITY, f64::min);
                Some([b as f64, mine / best])
            })
            .collect();
        fig = fig.with(FigureSeries::measured(label, points));
    }
    fig
}
