//! `ringside tour`: the main job. Spawns local ranks of the reference backend,
//! checks every collective over shared memory and TCP, and prints a short
//! all_reduce size sweep for both transports side by side.

use std::time::{Duration, Instant};

use clap::Args;
use collectives::algorithms::Algo;
use collectives::bench::{self, Measurement};
use collectives::conformance::{self, SuiteConfig};
use collectives::transport::TransportKind;
use collectives::{Backend, Communicator};
use indicatif::{ProgressBar, ProgressStyle};

use crate::job::{self, Start, human};

#[derive(Debug, Args)]
pub struct TourArgs {
    /// Local ranks to spawn.
    #[arg(long, default_value_t = 2)]
    pub nproc: usize,
    /// Largest all_reduce in the sweep.
    #[arg(long, default_value = "16M", value_parser = job::parse_size)]
    pub max_bytes: usize,
    /// Timed iterations per size.
    #[arg(short = 'n', long, default_value_t = 20)]
    pub iters: usize,
    /// Seconds any single wait may take.
    #[arg(long, default_value_t = 60.0)]
    pub timeout: f64,
}

const TRANSPORTS: [TransportKind; 2] = [TransportKind::Shm, TransportKind::Tcp];

pub fn run(args: TourArgs) -> anyhow::Result<i32> {
    let timeout = Duration::try_from_secs_f64(args.timeout)?;
    let rdv = match job::start(args.nproc, timeout)? {
        Start::Done(code) => return Ok(code),
        Start::Rank(r) => r,
    };
    let lead = rdv.info.rank == 0;
    let say = |s: String| {
        if lead {
            println!("{s}");
        }
    };
    say(format!(
        "ringside tour: the reference backend on {} local ranks (launched by {})\n",
        rdv.info.world_size, rdv.info.launcher
    ));
    let comms: Vec<Box<dyn Communicator>> = TRANSPORTS
        .iter()
        .map(|&t| {
            job::communicator(
                &rdv,
                Backend::Reference,
                t,
                Algo::Auto,
                timeout,
                &format!("tour-{}/", t.name()),
            )
        })
        .collect::<anyhow::Result<_>>()?;

    say("1. Every collective, checked exactly against a sequential reference".into());
    let mut failed = 0;
    for (t, comm) in TRANSPORTS.iter().zip(&comms) {
        let bar = if lead {
            ProgressBar::new_spinner()
        } else {
            ProgressBar::hidden()
        };
        bar.set_style(ProgressStyle::with_template(
            "   {spinner} {prefix}: {pos} cases {msg}",
        )?);
        bar.set_prefix(t.name());
        let started = Instant::now();
        let report = conformance::run(comm.as_ref(), &SuiteConfig::quick(), |done, name| {
            bar.set_position(done as u64);
            bar.set_message(name.to_owned());
        })?;
        bar.finish_and_clear();
        for f in &report.failures {
            eprintln!("FAIL ({}) {f}", t.name());
        }
        failed += report.failures.len();
        say(format!(
            "   {:>3}: {} cases (10 collectives x dtypes x ops x sizes x in/out-of-place), {} wrong, {:.0} ms",
            t.name(),
            report.cases,
            report.failures.len(),
            started.elapsed().as_secs_f64() * 1e3
        ));
    }

    say(format!(
        "\n2. all_reduce, f32 sum, in place: time = slowest rank, median of {} iterations; busbw = algbw x 2(n-1)/n",
        args.iters
    ));
    say(format!(
        "   {:>8} | {:>12} {:>12} | {:>12} {:>12} | {:>6}",
        "size", "shm (us)", "busbw GB/s", "tcp (us)", "busbw GB/s", "#wrong"
    ));
    let sizes = bench::sizes(8, args.max_bytes, 8);
    for bytes in sizes {
        let row: Vec<Measurement> = comms
            .iter()
            .map(|c| bench::all_reduce_f32(c.as_ref(), bytes, 3, args.iters))
            .collect::<collectives::Result<_>>()?;
        let wrong: usize = row.iter().map(|m| m.wrong).sum();
        failed += wrong;
        say(format!(
            "   {:>8} | {:>12.2} {:>12.3} | {:>12.2} {:>12.3} | {:>6}",
            human(bytes),
            row[0].median_us,
            row[0].busbw_gbps(),
            row[1].median_us,
            row[1].busbw_gbps(),
            wrong
        ));
    }
    say(String::from(
        "\nNext: `cargo run -p ringside -- sweep --transport tcp` for a full nccl-tests style sweep,\n\
         `cargo run -p ringside -- conformance --nproc 4` for the full conformance matrix,\n\
         `cargo run -p ringside -- launch --nproc-per-node 2 -- <program>` to run your own ranks.",
    ));
    rdv.close(timeout)?;
    Ok(if failed == 0 { 0 } else { 1 })
}
