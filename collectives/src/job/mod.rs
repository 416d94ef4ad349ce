//! The two lines every ringside program starts with: become a rank of a job
//! (spawning local ranks when run plainly, joining a launcher's job otherwise),
//! then connect a communicator. With the `clap` feature, [`JobArgs`] declares
//! the flags for both (`--nproc --backend --transport --algo --timeout`) once
//! for every program.
//!
//! ```no_run
//! # fn main() -> collectives::Result<()> {
//! use collectives::job::{self, Start};
//! use std::time::Duration;
//! let rdv = match job::start(4, Duration::from_secs(60))? {
//!     Start::Done(report) => std::process::exit(report.exit_code()),
//!     Start::Rank(rdv) => rdv,
//! };
//! let comm = job::communicator(&rdv, collectives::Backend::Reference, &job::options(&rdv)?)?;
//! # Ok(()) }
//! ```

#[cfg(feature = "clap")]
mod flags;

use std::net::IpAddr;
use std::time::Duration;

use crate::algorithms::Algo;
use crate::backends::{self, Options};
use crate::error::{Error, Result};
use crate::launch::{self, LaunchReport, Role};
use crate::rendezvous::env::{self, Rendezvous};
use crate::transport::TransportKind;
use crate::{Backend, Communicator};

#[cfg(feature = "clap")]
pub use flags::{ConnectArgs, JobArgs, Joined, SpawnArgs};

/// Either this process launched the ranks (and they have finished), or it is one.
pub enum Start {
    /// We were the launcher; this is how the job ended.
    Done(LaunchReport),
    /// We are a rank, connected to the job's store.
    Rank(Box<Rendezvous>),
}

/// Spawns `nproc` local ranks of this program (like `mp.spawn`), or joins the
/// job the environment describes (torchrun, mpirun, srun, `ringside launch`).
/// Installs the Ctrl-C handler that stops every rank.
pub fn start(nproc: usize, timeout: Duration) -> Result<Start> {
    launch::install_interrupt_handler()?;
    match launch::init(Some(nproc))? {
        Role::Launcher(report) => Ok(Start::Done(report)),
        Role::Rank(info) => Ok(Start::Rank(Box::new(env::connect(&info, timeout)?))),
    }
}

/// Default options for this job: its token, and listening on all interfaces
/// when the master is on another host (loopback otherwise).
pub fn options(rdv: &Rendezvous) -> Result<Options> {
    let mut opts = Options::new(rdv.info.token.bytes())?;
    let loopback = rdv.info.master_addr == "localhost"
        || rdv
            .info
            .master_addr
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if !loopback {
        opts.listen_ip = IpAddr::from([0, 0, 0, 0]);
    }
    Ok(opts)
}

/// Connects a communicator of `backend` among the job's ranks.
pub fn communicator(
    rdv: &Rendezvous,
    backend: Backend,
    opts: &Options,
) -> Result<Box<dyn Communicator>> {
    backends::connect(
        backend,
        rdv.store(),
        rdv.info.rank,
        rdv.info.world_size,
        opts,
    )
}

/// A failure to become a rank or to connect, saying which step failed (the
/// cause is its [`source`](std::error::Error::source)).
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// `--timeout` was negative, not a number, or too large.
    #[error("--timeout must be a non-negative number of seconds")]
    Timeout(#[source] std::time::TryFromFloatSecsError),
    /// Spawning the local ranks, or joining the launcher's job, failed.
    #[error("starting the ranks")]
    Start(#[source] Error),
    /// The job's options (from the environment) are unusable.
    #[error(transparent)]
    Options(Error),
    /// The communicator did not connect.
    #[error("connecting the {backend} backend ({transport} transport)")]
    Connect {
        /// The backend asked for.
        backend: Backend,
        /// The reference backend's transport asked for (`auto` included).
        transport: &'static str,
        /// Why.
        #[source]
        source: Error,
    },
}

/// [`start`], for programs that go on only as a rank: `Ok(Err(code))` when
/// this process launched the ranks and the job ended with exit `code`.
pub fn start_rank(
    nproc: usize,
    timeout: Duration,
) -> std::result::Result<std::result::Result<Box<Rendezvous>, i32>, JoinError> {
    match start(nproc, timeout).map_err(JoinError::Start)? {
        Start::Done(report) => Ok(Err(report.exit_code())),
        Start::Rank(rdv) => Ok(Ok(rdv)),
    }
}

/// [`communicator`] with these settings over the job's defaults; `prefix`
/// keeps the store keys of several communicators apart.
pub fn connect(
    rdv: &Rendezvous,
    backend: Backend,
    transport: TransportKind,
    algo: Algo,
    timeout: Duration,
    prefix: &str,
) -> std::result::Result<Box<dyn Communicator>, JoinError> {
    let mut opts = options(rdv).map_err(JoinError::Options)?;
    opts.transport = transport;
    opts.algo = algo;
    opts.timeout = timeout;
    opts.prefix = prefix.to_owned();
    communicator(rdv, backend, &opts).map_err(|source| JoinError::Connect {
        backend,
        transport: transport.name(),
        source,
    })
}
