//! Shared start-up for subcommands that run as ranks: spawn local ranks (or join
//! a launcher's job), rendezvous, and build communicators.

use std::time::Duration;

use anyhow::Context;
use collectives::algorithms::Algo;
use collectives::job;
use collectives::rendezvous::env::Rendezvous;
use collectives::transport::TransportKind;
use collectives::{Backend, Communicator};

/// Either this process launched the ranks (and they are done), or it is one.
pub enum Start {
    /// We were the launcher; the job ended with this exit code.
    Done(i32),
    /// We are a rank, connected to the job's store.
    Rank(Box<Rendezvous>),
}

/// Spawns `nproc` local ranks of this program, or joins the job the
/// environment describes (torchrun, mpirun, srun, `ringside launch`).
pub fn start(nproc: usize, timeout: Duration) -> anyhow::Result<Start> {
    match job::start(nproc, timeout).context("starting the ranks")? {
        job::Start::Done(report) => Ok(Start::Done(report.exit_code())),
        job::Start::Rank(rdv) => Ok(Start::Rank(rdv)),
    }
}

/// Builds a communicator; `prefix` keeps store keys of several communicators apart.
pub fn communicator(
    rdv: &Rendezvous,
    backend: Backend,
    transport: TransportKind,
    algo: Algo,
    timeout: Duration,
    prefix: &str,
) -> anyhow::Result<Box<dyn Communicator>> {
    let mut opts = job::options(rdv)?;
    opts.transport = transport;
    opts.algo = algo;
    opts.timeout = timeout;
    opts.prefix = prefix.to_owned();
    job::communicator(rdv, backend, &opts).with_context(|| {
        format!(
            "connecting the {backend} backend ({} transport)",
            transport.name()
        )
    })
}

/// The flags every rank-running subcommand shares.
#[derive(Debug, clap::Args)]
pub struct JobArgs {
    /// Local ranks to spawn (ignored under a launcher such as torchrun or mpirun).
    #[arg(long, default_value_t = 2)]
    pub nproc: usize,
    /// Backend: reference, gloo, mpi or nccl.
    #[arg(long, default_value = "reference", value_parser = parse_backend)]
    pub backend: Backend,
    /// Reference backend transport: auto, tcp or shm.
    #[arg(long, default_value = "auto", value_parser = parse_transport)]
    pub transport: TransportKind,
    /// all_reduce algorithm: auto, ring, halving-doubling, recursive-doubling, tree.
    #[arg(long, default_value = "auto", value_parser = parse_algo)]
    pub algo: Algo,
    /// Seconds any single wait may take.
    #[arg(long, default_value_t = 120.0)]
    pub timeout: f64,
}

/// A rank of the job, with its communicator.
pub struct Joined {
    /// The job's store (close it when done).
    pub rdv: Box<Rendezvous>,
    /// The communicator the flags asked for.
    pub comm: Box<dyn Communicator>,
    /// The per-wait timeout.
    pub timeout: Duration,
}

impl JobArgs {
    /// Starts or joins the job and connects the communicator; `Err(code)` when
    /// this process was the launcher and the job is over.
    pub fn join(&self, prefix: &str) -> anyhow::Result<Result<Joined, i32>> {
        let timeout = Duration::try_from_secs_f64(self.timeout)
            .context("--timeout must be a non-negative number of seconds")?;
        let rdv = match start(self.nproc, timeout)? {
            Start::Done(code) => return Ok(Err(code)),
            Start::Rank(r) => r,
        };
        let comm = communicator(
            &rdv,
            self.backend,
            self.transport,
            self.algo,
            timeout,
            prefix,
        )?;
        Ok(Ok(Joined { rdv, comm, timeout }))
    }
}

pub fn parse_backend(s: &str) -> Result<Backend, String> {
    Backend::parse(s).ok_or_else(|| format!("unknown backend {s:?} (reference, gloo, mpi, nccl)"))
}
pub fn parse_transport(s: &str) -> Result<TransportKind, String> {
    TransportKind::parse(s).ok_or_else(|| format!("unknown transport {s:?} (auto, tcp, shm)"))
}
pub fn parse_algo(s: &str) -> Result<Algo, String> {
    Algo::parse(s).ok_or_else(|| {
        format!("unknown algorithm {s:?} (auto, ring, halving-doubling, recursive-doubling, tree)")
    })
}

/// Parses `8`, `4K`, `1M`, `64MiB`, `1G` into bytes (powers of 1024, as
/// nccl-tests; the one size syntax is `measure::size::parse_size`).
pub fn parse_size(s: &str) -> Result<usize, String> {
    measure::size::parse_size(s)
        .ok()
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| format!("{s:?} is not a size (examples: 8, 4K, 1M, 64MiB)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_print() {
        assert_eq!(parse_size("8"), Ok(8));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        let err = parse_size("lots").unwrap_err();
        assert_eq!(err, "\"lots\" is not a size (examples: 8, 4K, 1M, 64MiB)");
    }
}
