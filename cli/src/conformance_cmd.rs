//! `ringside conformance`: run the conformance suite on this job's ranks.
//!
//! Runs under any launcher, so the same suite checks every backend wherever it
//! runs: `ringside conformance --nproc 4`, or `mpirun -np 4 ringside conformance`.

use clap::Args;
use collectives::conformance::{self, SuiteConfig};

use crate::progress;
use collectives::job::{JobArgs, Joined};

#[derive(Debug, Args)]
pub struct ConformanceArgs {
    #[command(flatten)]
    pub job: JobArgs,
    /// Run the quick subset instead of the full matrix.
    #[arg(long)]
    pub quick: bool,
}

pub fn run(args: ConformanceArgs) -> anyhow::Result<i32> {
    let Joined { rdv, comm, timeout } = match args.job.join("conformance/")? {
        Ok(j) => j,
        Err(code) => return Ok(code),
    };
    let cfg = if args.quick {
        SuiteConfig::quick()
    } else {
        SuiteConfig::full()
    };
    let bar = progress::bar(comm.rank() == 0, None, "{spinner} {pos} cases  {msg}")?;
    let report = conformance::run(comm.as_ref(), &cfg, |done, name| {
        bar.set_position(done as u64);
        bar.set_message(name.to_owned());
    })?;
    bar.finish_and_clear();
    for f in &report.failures {
        eprintln!("FAIL {f}");
    }
    if comm.rank() == 0 && !report.unsupported.is_empty() {
        eprintln!(
            "{} cases not supported by the {} backend (first: {})",
            report.unsupported.len(),
            args.job.backend,
            report.unsupported[0]
        );
    }
    println!(
        "rank {}/{}: {} backend ({} transport, {} algo): {} cases ({} unsupported), {} failed",
        comm.rank(),
        comm.world_size(),
        args.job.backend,
        args.job.connect.transport.name(),
        args.job.connect.algo.name(),
        report.cases,
        report.unsupported.len(),
        report.failures.len()
    );
    rdv.close(timeout)?;
    Ok(if report.failures.is_empty() { 0 } else { 1 })
}
