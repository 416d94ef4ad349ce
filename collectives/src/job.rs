//! The two lines every ringside program starts with: become a rank of a job
//! (spawning local ranks when run plainly, joining a launcher's job otherwise),
//! then connect a communicator.
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

use std::net::IpAddr;
use std::time::Duration;

use crate::backends::{self, Options};
use crate::error::Result;
use crate::launch::{self, LaunchReport, Role};
use crate::rendezvous::env::{self, Rendezvous};
use crate::{Backend, Communicator};

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
