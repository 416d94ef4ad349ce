//! `ringside sweep`: time all_reduce across sizes with the nccl-tests rule and
//! print a table (or, with `--jsonl`, JSON lines: results-file records, which the
//! peer programs print too). `ringside bench -c all_reduce` measures the same with
//! every option; `sweep` is the short form the `peers` runner launches, with the
//! same size flags and defaults as `bench`.

use clap::Args;
use collectives::Backend;
use collectives::algorithms::Algo;
use collectives::bench::{self, Measurement};

use crate::progress;
use collectives::job::{JobArgs, Joined, SizeArgs};

/// Flags follow nccl-tests where they overlap.
#[derive(Debug, Args)]
pub struct SweepArgs {
    #[command(flatten)]
    pub job: JobArgs,
    #[command(flatten)]
    pub sizes: SizeArgs,
    /// Print one results-file record per size as a JSON line on stdout instead of
    /// the table (`bench --json FILE` writes a whole results file instead).
    #[arg(long)]
    pub jsonl: bool,
    /// With `--backend mpi`: also time OpenMPI's `MPI_Allreduce` called bare
    /// (as the C peer calls it) in this same process, iteration by iteration
    /// in turn with ringside's call, and print its records as `mpi-bare`
    /// beside ringside's (`ringside-mpi-beside`: taking turns slows both a
    /// little): what the binding adds, without the spread between two
    /// programs' runs.
    #[arg(long)]
    pub beside_bare: bool,
}

/// The table header nccl-tests users expect.
pub fn table_header() -> String {
    format!(
        "{:>10} {:>12} {:>6} {:>11} {:>11} {:>11} {:>9} {:>9} {:>7}",
        "size(B)", "count", "type", "min(us)", "median(us)", "max(us)", "algbw", "busbw", "#wrong"
    )
}

/// One table row.
pub fn table_row(m: &Measurement) -> String {
    format!(
        "{:>10} {:>12} {:>6} {:>11.2} {:>11.2} {:>11.2} {:>9.3} {:>9.3} {:>7}",
        m.bytes,
        m.bytes / m.dtype.size(),
        m.dtype.name(),
        m.min_us,
        m.median_us,
        m.max_us,
        m.algbw_gbps(),
        m.busbw_gbps(),
        m.wrong.unwrap_or(0)
    )
}

pub fn run(args: SweepArgs) -> anyhow::Result<i32> {
    // Flags that would measure nothing fail here, before any rank starts.
    let sizes = bench::sizes(
        args.sizes.min_bytes.max(4),
        args.sizes.max_bytes,
        args.sizes.factor,
    )?;
    if args.beside_bare && args.job.backend != Backend::Mpi {
        anyhow::bail!(
            "--beside-bare times MPI_Allreduce called bare: it needs --backend mpi (got {})",
            args.job.backend
        );
    }
    let Joined { rdv, comm, timeout } = match args.job.join("sweep/")? {
        Ok(j) => j,
        Err(code) => return Ok(code),
    };
    let lead = comm.rank() == 0;
    let mut name = match (args.job.backend, args.job.connect.algo) {
        (Backend::Reference, Algo::Auto) => {
            format!("ringside-{}", args.job.connect.transport.name())
        }
        (Backend::Reference, a) => format!(
            "ringside-{}-{}",
            args.job.connect.transport.name(),
            a.name()
        ),
        (b, _) => format!("ringside-{b}"),
    };
    // Made right after ringside's communicator, at the same point on every rank.
    let mut bare = if args.beside_bare {
        name.push_str(bench::BESIDE_SUFFIX);
        Some(collectives::backends::bare_all_reduce(
            args.job.backend,
            comm.rank(),
            comm.world_size(),
            timeout,
        )?)
    } else {
        None
    };
    let largest = bench::Case {
        collective: collectives::Collective::AllReduce,
        dtype: collectives::DType::F32,
        op: collectives::ReduceOp::Sum,
        root: 0,
        in_place: true,
        bytes: sizes.last().copied().unwrap_or(0),
    };
    bench::check_fits(
        bench::bytes_needed(&largest, comm.world_size())?,
        rdv.info.local_world_size,
        bench::available_bytes(),
        "-e",
    )?;
    let bar = progress::bar(
        lead && !args.jsonl,
        Some(sizes.len() as u64),
        "{bar:30} {pos}/{len} sizes {msg}",
    )?;
    if lead && !args.jsonl {
        let what = if bare.is_some() {
            format!(
                "{name} and {} (MPI_Allreduce called bare in this process), timed iteration by iteration in turn",
                bench::BARE_MPI_LABEL
            )
        } else {
            name.clone()
        };
        println!(
            "# {what}: all_reduce f32 sum, in place, {} ranks; time = slowest rank per iteration, min/median/max over {} iterations (GB/s = 1e9 B/s)",
            comm.world_size(),
            args.sizes.iters
        );
        if bare.is_some() {
            println!("{} impl", table_header());
        } else {
            println!("{}", table_header());
        }
    }
    let mut wrong = 0;
    for &bytes in &sizes {
        bar.set_message(measure::size::human(bytes as u64));
        let (warmup, iters) = (args.sizes.warmup, args.sizes.iters);
        let measured = match bare.as_deref_mut() {
            Some(b) => {
                let both = bench::all_reduce_f32_beside(comm.as_ref(), b, bytes, warmup, iters)?;
                vec![
                    (name.as_str(), both.ours),
                    (bench::BARE_MPI_LABEL, both.bare),
                ]
            }
            None => vec![(
                name.as_str(),
                bench::all_reduce_f32(comm.as_ref(), bytes, warmup, iters)?,
            )],
        };
        for (label, m) in &measured {
            wrong += m.wrong.unwrap_or(0);
            if lead {
                // With --jsonl, one results-file record per line: the `peers`
                // runner reads these like the C and C++ peers' lines.
                let record =
                    m.to_record(label, args.job.backend.name(), args.job.connect.algo.name());
                let json = serde_json::to_string(&record)?;
                bar.suspend(|| {
                    if args.jsonl {
                        println!("{json}");
                    } else if bare.is_some() {
                        println!("{} {label}", table_row(m));
                    } else {
                        println!("{}", table_row(m));
                    }
                });
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    rdv.close(timeout)?;
    Ok(if wrong > 0 { 1 } else { 0 })
}
