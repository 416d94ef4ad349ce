//! Lab 1: a first all-reduce, run as a learner runs it (`cargo lab 1`).
//!
//! Every rank checks the by-hand all-reduce (yours from `src/exercise.rs`, or the
//! reference solution with `--solution`) against the sequential sum, then times it
//! against the communicator's own `all_reduce` from 8 bytes up, each size as the
//! slowest rank's median, and rank 0 writes `results/lab01/<UTC time>/` with the
//! results file and its charts.
//!
//! Run plainly it spawns its own ranks; under a launcher it joins them:
//! `ringside launch --nproc-per-node 4 -- target/release/lab01-first-allreduce`.

use anyhow::{Context, bail};
use clap::Parser;
use collectives::bench::{self, Combine, Measurement, Stats};
use collectives::{BufferMut, DType, Input, ReduceOp};
use lab01_first_allreduce::{all_reduce_by_hand, expected, input};
use labkit::{LabError, Run, Variant};

/// Lab 1: an all-reduce by hand from send/recv, timed against all_reduce.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// Two ranks by default: on a 2-core laptop one rank per core, so the
    /// by-hand version's extra trip through rank 0 stands out of the noise (on
    /// 4 ranks over 2 cores, every small message waited for the scheduler).
    #[command(flatten)]
    job: collectives::job::JobArgs<2>,
    /// Largest message to time, in bytes (e.g. 16M).
    #[arg(long, default_value = "16M", value_parser = measure::size::parse_size)]
    max_size: u64,
    /// A short run: messages up to 256 KiB, fewer iterations (what CI runs).
    #[arg(long)]
    quick: bool,
}

fn main() -> std::process::ExitCode {
    // One line per rank, the cause chain included ("rank 2: TODO(lab 01): ...").
    labkit::exit(run(Args::parse()), "")
}

fn run(args: Args) -> anyhow::Result<()> {
    let variant = Variant::from_env();
    let joined = match args.job.join("lab01/")? {
        Ok(j) => j,
        Err(code) => std::process::exit(code),
    };
    let comm = joined.comm.as_ref();
    let (rank, world) = (comm.rank(), comm.world_size());

    // First: is it right? Small integers, so the sum is exact.
    let mut mine = input(rank, 1000);
    all_reduce_by_hand(variant, comm, &mut mine).with_context(|| format!("rank {rank}"))?;
    if mine != expected(world, 1000) {
        bail!("rank {rank}: {variant} does not leave the sum on every rank (`cargo lab check 1`)");
    }
    // ANCHOR: all_reduce
    let mut values = input(rank, 1000);
    comm.all_reduce(
        Input::InPlace,
        &mut BufferMut::from_slice(&mut values),
        ReduceOp::Sum,
    )?;
    // ANCHOR_END: all_reduce
    if values != mine {
        bail!("rank {rank}: all_reduce and the by-hand sum differ");
    }

    let max = if args.quick { 256 << 10 } else { args.max_size };
    let backend = args.job.backend.name();
    let mut run = (rank == 0)
        .then(|| Run::start(1, world, args.job.connect.transport.name()))
        .transpose()?;
    // The bench's rules: no sweep that measures nothing, none beyond memory (the
    // by-hand version holds its buffer and, on rank 0, one receive buffer).
    let sizes = measure::size::sweep_sizes(8, max, 4, 0)?;
    if rank == 0 {
        // The last size timed, not the limit asked for: sizes go up by 4×, so
        // 16M asked for times 8 MiB last ("timing 8 B to 16M" said otherwise).
        println!(
            "lab 1 on {world} ranks ({variant}): by hand and all_reduce agree; timing 8 B to {}",
            measure::size::human(sizes.last().copied().unwrap_or(8))
        );
    }
    bench::check_fits(2 * max, world, bench::available_bytes(), "--max-size")?;
    for bytes in sizes {
        let count = (bytes / 8) as usize;
        let iters = if args.quick { 5 } else { iterations(bytes) };
        let mut buf = vec![1.0f64; count];
        let by_hand = bench::time(comm, 2, iters, Combine::Max, || {
            all_reduce_by_hand(variant, comm, &mut buf).map_err(LabError::into_collective)
        })?;
        let library = bench::time(comm, 2, iters, Combine::Max, || {
            comm.all_reduce(
                Input::InPlace,
                &mut BufferMut::from_slice(&mut buf),
                ReduceOp::Sum,
            )
        })?;
        if let Some(run) = run.as_mut() {
            let algo = args.job.connect.algo.name();
            run.push(
                record(world, bytes, iters, &by_hand).to_record("by hand", backend, "by-hand"),
            )?;
            let label = format!("all_reduce ({algo})");
            run.push(record(world, bytes, iters, &library).to_record(&label, backend, algo))?;
            println!(
                "{:>9}  by hand {:>10.1} µs   all_reduce {:>10.1} µs   ({:.1}×)",
                measure::size::human(bytes),
                by_hand.median,
                library.median,
                by_hand.median / library.median
            );
        }
    }
    if let Some(run) = run {
        let dir = run.finish()?;
        println!(
            "\nThe chart ({}) plots both against message size. Small messages cost \
             their latency either way; for large ones rank 0's link carries n − 1 \
             buffers each way by hand, and all_reduce's ring keeps every link busy.",
            dir.join("latency-all_reduce.svg").display()
        );
    }
    joined.rdv.close(joined.timeout)?;
    Ok(())
}

/// One timed size of an in-place f64 sum over `world` ranks, checked once,
/// exactly, before the timing (above), not per size.
fn record(world: usize, bytes: u64, iters: usize, st: &Stats) -> Measurement {
    Measurement::all_reduce_sum(
        world,
        bytes as usize,
        (bytes / 8) as usize,
        DType::F64,
        iters,
        st,
    )
}

/// Fewer iterations for larger messages, so a default run stays under a minute.
fn iterations(bytes: u64) -> usize {
    match bytes {
        0..=65_536 => 50,
        65_537..=1_048_576 => 20,
        _ => 5,
    }
}
