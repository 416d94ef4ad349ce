//! The job flags, declared once for every program that runs as ranks
//! (`ringside sweep`, `bench` and `conformance`, `ringside-train`, the labs):
//! how many local ranks to spawn, which backend, how it connects, how long a
//! wait may take. A program flattens them into its own arguments and picks
//! its default `--nproc`:
//!
//! ```no_run
//! use clap::Parser;
//!
//! #[derive(Parser)]
//! struct Args {
//!     #[command(flatten)]
//!     job: collectives::job::JobArgs<4>,
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let args = Args::parse();
//! let Ok(joined) = args.job.join("lab/")? else {
//!     return Ok(()); // we launched the ranks; they are done
//! };
//! # Ok(()) }
//! ```
//!
//! `--transport`, `--algo` and `--timeout` have environment forms
//! (`RINGSIDE_TRANSPORT`, `RINGSIDE_ALGO`, `RINGSIDE_TIMEOUT`, as
//! [`Options::new`](crate::backends::Options::new) reads them), which the flags
//! override. Gloo's algorithm also has its own, `RINGSIDE_GLOO_ALGO`, which
//! applies where no algorithm was asked for (`--algo auto`; see
//! [`crate::backends::gloo`]).
//!
//! The values parse with each type's own `parse` (so `ref`, `hd` or
//! `ring_chunked` work as they do in the environment forms), not with clap's
//! `ValueEnum`, whose matching and error text would be a second copy of the
//! names.

use std::time::Duration;

use super::{JoinError, connect_with, options, start_rank};
use crate::algorithms::Algo;
use crate::rendezvous::env::Rendezvous;
use crate::transport::TransportKind;
use crate::{Backend, Communicator};

/// `--nproc`, with this program's default `NPROC`.
#[derive(Clone, Debug, clap::Args)]
pub struct SpawnArgs<const NPROC: usize = 2> {
    /// Local ranks to spawn (ignored under a launcher such as torchrun or mpirun).
    #[arg(long, default_value_t = NPROC)]
    pub nproc: usize,
}

/// `--timeout`: how long any single wait may take, in every program that
/// runs ranks (also those that connect several backends in turn, as the
/// tour); `--notice`: when a wait is worth a line (the flight recorder's; see
/// [`crate::flight`]).
#[derive(Clone, Debug, clap::Args)]
pub struct TimeoutArgs {
    /// Seconds any single wait may take.
    #[arg(long, default_value_t = 120.0, env = "RINGSIDE_TIMEOUT")]
    pub timeout: f64,
    /// Seconds a wait may make no progress before the rank says so and looks
    /// for a deadlock (reference backend).
    #[arg(long, default_value_t = 5.0, env = "RINGSIDE_NOTICE")]
    pub notice: f64,
    /// Gloo, MPI, NCCL: check each collective against every rank's through
    /// the store before calling it (slower; also `RINGSIDE_DEBUG_COLLECTIVES=1`).
    #[arg(long)]
    pub debug_collectives: bool,
}

impl TimeoutArgs {
    /// `--timeout` as a duration.
    pub fn timeout(&self) -> Result<Duration, JoinError> {
        Duration::try_from_secs_f64(self.timeout).map_err(JoinError::Timeout)
    }
    /// `--notice` as a duration.
    pub fn notice(&self) -> Result<Duration, JoinError> {
        Duration::try_from_secs_f64(self.notice).map_err(JoinError::Notice)
    }
}

/// How a communicator connects: `--transport`, `--algo`, `--timeout`.
#[derive(Clone, Debug, clap::Args)]
pub struct ConnectArgs {
    /// Reference backend transport: auto, tcp or shm.
    #[arg(long, default_value = "auto", env = "RINGSIDE_TRANSPORT", value_parser = parse_transport)]
    pub transport: TransportKind,
    /// all_reduce algorithm: auto, ring, halving-doubling, recursive-doubling,
    /// tree, hierarchical (reference backend; nodes of LOCAL_WORLD_SIZE ranks); auto, ring, ring-chunked, halving-doubling,
    /// bcube (Gloo; others mean auto).
    #[arg(long, default_value = "auto", env = "RINGSIDE_ALGO", value_parser = parse_algo)]
    pub algo: Algo,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub wait: TimeoutArgs,
}

/// nccl-tests' size and iteration flags, `-b -e -f -n -w`, for every program
/// that sweeps sizes (`ringside bench`, `ringside sweep`, the `peers` runner);
/// `ITERS` is its default `-n`.
#[derive(Clone, Debug, clap::Args)]
pub struct SizeArgs<const ITERS: usize = 20> {
    /// Smallest message (bytes; K/M/G suffixes are powers of 1024).
    #[arg(short = 'b', long = "minbytes", default_value = "8", value_parser = parse_size)]
    pub min_bytes: usize,
    /// Largest message.
    #[arg(short = 'e', long = "maxbytes", default_value = "64M", value_parser = parse_size)]
    pub max_bytes: usize,
    /// Multiply the size by this each step.
    #[arg(short = 'f', long = "stepfactor", default_value_t = 2)]
    pub factor: usize,
    /// Timed iterations per size.
    #[arg(short = 'n', long = "iters", default_value_t = ITERS)]
    pub iters: usize,
    /// Warm-up iterations per size (not timed).
    #[arg(
        short = 'w',
        long = "warmup_iters",
        alias = "warmup",
        default_value_t = 5
    )]
    pub warmup: usize,
}

/// `--load N`: busy loops beside a benchmark (`ringside bench`, `peers`), to
/// measure on "a laptop busy with other work" on purpose ([`crate::launch::Load`]).
#[derive(Clone, Debug, clap::Args)]
pub struct LoadArgs {
    /// Run N CPU-bound busy loops (nice 0, each in a session of its own, like
    /// programs started elsewhere) beside the measurement, for as long as it
    /// runs, peers included: the "busy laptop" case, reproducibly.
    #[arg(long, default_value_t = 0)]
    pub load: usize,
}

/// Parses `8`, `4K`, `1M`, `64MiB`, `1G` into bytes (powers of 1024, as
/// nccl-tests; the one size syntax is `measure::size::parse_size`).
pub fn parse_size(s: &str) -> Result<usize, String> {
    let n = measure::size::parse_size(s).map_err(|e| {
        format!(
            "{s:?} is not a size: {} (examples: 8, 4K, 1M, 64MiB)",
            e.why
        )
    })?;
    usize::try_from(n).map_err(|_| format!("{s:?} is not a size: number too large"))
}

/// The flags every rank-running program shares; `NPROC` is its default `--nproc`.
#[derive(Clone, Debug, clap::Args)]
pub struct JobArgs<const NPROC: usize = 2> {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub spawn: SpawnArgs<NPROC>,
    /// Backend: reference, gloo, mpi or nccl.
    #[arg(long, default_value = "reference", value_parser = parse_backend)]
    pub backend: Backend,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub connect: ConnectArgs,
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

impl ConnectArgs {
    /// `--timeout` as a duration.
    pub fn timeout(&self) -> Result<Duration, JoinError> {
        self.wait.timeout()
    }

    /// Connects a communicator of `backend` among the job's ranks; `prefix`
    /// keeps the store keys of several communicators apart.
    pub fn communicator(
        &self,
        rdv: &Rendezvous,
        backend: Backend,
        prefix: &str,
    ) -> Result<Box<dyn Communicator>, JoinError> {
        let mut opts = options(rdv).map_err(JoinError::Options)?;
        opts.transport = self.transport;
        opts.algo = self.algo;
        opts.timeout = self.timeout()?;
        opts.flight.notice = self.wait.notice()?;
        opts.debug_collectives |= self.wait.debug_collectives;
        // A rank may work alone as long as any wait may last unless the
        // limit was set apart (the labs set it short).
        if std::env::var_os("RINGSIDE_IDLE_LIMIT").is_none() {
            opts.flight.idle_limit = opts.timeout;
        }
        opts.prefix = prefix.to_owned();
        connect_with(rdv, backend, &opts)
    }
}

impl<const NPROC: usize> JobArgs<NPROC> {
    /// Starts or joins the job and connects the communicator; `Ok(Err(code))`
    /// when this process was the launcher and the job ended with exit `code`.
    pub fn join(&self, prefix: &str) -> Result<Result<Joined, i32>, JoinError> {
        let timeout = self.connect.timeout()?;
        let rdv = match start_rank(self.spawn.nproc, timeout)? {
            Ok(rdv) => rdv,
            Err(code) => return Ok(Err(code)),
        };
        let comm = self.connect.communicator(&rdv, self.backend, prefix)?;
        Ok(Ok(Joined { rdv, comm, timeout }))
    }
}

/// `--backend`'s parser.
pub fn parse_backend(s: &str) -> Result<Backend, String> {
    Backend::parse(s).ok_or_else(|| format!("unknown backend {s:?} (reference, gloo, mpi, nccl)"))
}

/// `--transport`'s parser.
pub fn parse_transport(s: &str) -> Result<TransportKind, String> {
    TransportKind::parse(s).ok_or_else(|| format!("unknown transport {s:?} (auto, tcp, shm)"))
}

/// `--algo`'s parser.
pub fn parse_algo(s: &str) -> Result<Algo, String> {
    Algo::parse(s).ok_or_else(|| {
        format!(
            "unknown algorithm {s:?} (auto, ring, halving-doubling, recursive-doubling, tree, \
             hierarchical, ring-chunked, bcube)"
        )
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[test]
    fn sizes_parse_and_say_what_is_wrong() {
        assert_eq!(parse_size("8"), Ok(8));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        let err = parse_size("lots").unwrap_err();
        assert_eq!(
            err,
            "\"lots\" is not a size: expected digits with an optional K/M/G suffix \
             (examples: 8, 4K, 1M, 64MiB)"
        );
    }

    #[derive(Debug, Parser)]
    struct Lab {
        #[command(flatten)]
        job: JobArgs<4>,
    }

    #[test]
    fn defaults_and_the_programs_nproc() {
        let a = Lab::try_parse_from(["lab"]).unwrap();
        assert_eq!(a.job.spawn.nproc, 4);
        assert_eq!(a.job.backend, Backend::Reference);
        assert_eq!(a.job.connect.algo, Algo::Auto);
        assert_eq!(a.job.connect.timeout().unwrap(), Duration::from_secs(120));
        assert_eq!(a.job.connect.wait.notice().unwrap(), Duration::from_secs(5));
    }

    #[test]
    fn values_parse_as_their_environment_forms() {
        let a = Lab::try_parse_from([
            "lab",
            "--backend",
            "ref",
            "--transport",
            "shm",
            "--algo",
            "ring_chunked",
            "--nproc",
            "3",
        ])
        .unwrap();
        assert_eq!(a.job.backend, Backend::Reference);
        assert_eq!(a.job.connect.transport, TransportKind::Shm);
        assert_eq!(a.job.connect.algo, Algo::RingChunked);
        assert_eq!(a.job.spawn.nproc, 3);
        let e = Lab::try_parse_from(["lab", "--backend", "nope"]).unwrap_err();
        assert!(e.to_string().contains("unknown backend"), "{e}");
    }

    #[test]
    fn a_negative_timeout_is_refused() {
        let a = Lab::try_parse_from(["lab", "--timeout=-1"]).unwrap();
        let e = a.job.connect.timeout().unwrap_err();
        assert_eq!(
            e.to_string(),
            "--timeout must be a non-negative number of seconds"
        );
    }
}
