//! `ringside conformance`: run the conformance suite on this job's ranks.
//!
//! Runs under any launcher, so the same suite checks every backend wherever it
//! runs: `ringside conformance --nproc 4`, or `mpirun -np 4 ringside conformance`.

use std::time::Duration;

use clap::Args;
use collectives::Backend;
use collectives::algorithms::Algo;
use collectives::conformance::{self, SuiteConfig};
use collectives::transport::TransportKind;
use indicatif::{ProgressBar, ProgressStyle};

use crate::job::{self, Start};
use crate::sweep::{parse_algo, parse_backend, parse_transport};

#[derive(Debug, Args)]
pub struct ConformanceArgs {
    /// Local ranks to spawn (ignored under a launcher).
    #[arg(long, default_value_t = 2)]
    pub nproc: usize,
    /// Backend to check.
    #[arg(long, default_value = "reference", value_parser = parse_backend)]
    pub backend: Backend,
    /// Reference backend transport: auto, tcp or shm.
    #[arg(long, default_value = "auto", value_parser = parse_transport)]
    pub transport: TransportKind,
    /// all_reduce algorithm: auto, ring, halving-doubling, recursive-doubling, tree.
    #[arg(long, default_value = "auto", value_parser = parse_algo)]
    pub algo: Algo,
    /// Run the quick subset instead of the full matrix.
    #[arg(long)]
    pub quick: bool,
    /// Seconds any single wait may take.
    #[arg(long, default_value_t = 60.0)]
    pub timeout: f64,
}

pub fn run(args: ConformanceArgs) -> anyhow::Result<i32> {
    let timeout = Duration::try_from_secs_f64(args.timeout)?;
    let rdv = match job::start(args.nproc, timeout)? {
        Start::Done(code) => return Ok(code),
        Start::Rank(r) => r,
    };
    let comm = job::communicator(
        &rdv,
        args.backend,
        args.transport,
        args.algo,
        timeout,
        "conformance/",
    )?;
    let cfg = if args.quick {
        SuiteConfig::quick()
    } else {
        SuiteConfig::full()
    };
    let bar = if comm.rank() == 0 {
        ProgressBar::new_spinner()
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(ProgressStyle::with_template(
        "{spinner} {pos} cases  {msg}",
    )?);
    let report = conformance::run(comm.as_ref(), &cfg, |done, name| {
        bar.set_position(done as u64);
        bar.set_message(name.to_owned());
    })?;
    bar.finish_and_clear();
    for f in &report.failures {
        eprintln!("FAIL {f}");
    }
    println!(
        "rank {}/{}: {} backend ({} transport, {} algo): {} cases, {} failed",
        comm.rank(),
        comm.world_size(),
        args.backend,
        args.transport.name(),
        args.algo.name(),
        report.cases,
        report.failures.len()
    );
    rdv.close(timeout)?;
    Ok(if report.failures.is_empty() { 0 } else { 1 })
}
