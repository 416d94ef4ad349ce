//! The two lines every ringside program starts with: become a rank of a job
//! (spawning local ranks when run plainly, joining a launcher's job otherwise),
//! then connect a communicator. With the `clap` feature, `JobArgs` declares
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
use std::sync::Arc;
use std::time::Duration;

use crate::algorithms::Algo;
use crate::backends::{self, Options};
use crate::error::{Error, Result};
use crate::flight::SharedStore;
use crate::launch::{self, LaunchReport, Role};
use crate::rendezvous::env::{self, Rendezvous};
use crate::rendezvous::store::TcpStore;
use crate::transport::TransportKind;
use crate::{Backend, Communicator};

#[cfg(feature = "clap")]
pub use flags::{
    ConnectArgs, JobArgs, Joined, LoadArgs, SizeArgs, SpawnArgs, TimeoutArgs, parse_size,
};

/// Whether the on/off variable `var` (a `RINGSIDE_*` switch that is on by
/// default) is set to `0`, `off` or `false`.
pub fn switched_off(var: &str) -> bool {
    std::env::var(var).is_ok_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "0" | "off" | "false"
        )
    })
}

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

/// Default options for this job: its token, and, when the master is on
/// another host, listening on this host's address on the route to it (the
/// interface the kernel would send the master's packets from), loopback
/// otherwise. Peers connect to the address a rank advertises, so it must be
/// one they can reach: `0.0.0.0` cannot be advertised (the TCP transport
/// refuses it, and multi-node jobs over the reference backend failed so).
pub fn options(rdv: &Rendezvous) -> Result<Options> {
    let mut opts = Options::new(rdv.info.token.bytes())?;
    // Whichever launcher said it: nodes for `--algo hierarchical`.
    opts.per_node = Some(rdv.info.local_world_size);
    opts.local_rank = Some(rdv.info.local_rank);
    let loopback = rdv.info.master_addr == "localhost"
        || rdv
            .info
            .master_addr
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if !loopback {
        opts.listen_ip = address_towards(&rdv.info.master_addr, rdv.info.master_port)?;
    }
    Ok(opts)
}

/// This host's address on the route to `host:port`: a UDP socket "connected"
/// there (which sends nothing) reports the source address the kernel chose.
pub fn address_towards(host: &str, port: u16) -> Result<IpAddr> {
    use std::net::{ToSocketAddrs, UdpSocket};
    let io = |what: &str, e| {
        Error::io(
            format!("finding this host's address towards {host}: {what}"),
            e,
        )
    };
    let target = (host, port)
        .to_socket_addrs()
        .map_err(|e| io("resolving it", e))?
        .next()
        .ok_or_else(|| Error::InvalidArgument(format!("{host} resolves to no address")))?;
    let any: IpAddr = if target.is_ipv4() {
        IpAddr::from([0, 0, 0, 0])
    } else {
        IpAddr::from([0u16; 8])
    };
    let socket = UdpSocket::bind((any, 0)).map_err(|e| io("binding a socket", e))?;
    socket.connect(target).map_err(|e| io("no route", e))?;
    Ok(socket
        .local_addr()
        .map_err(|e| io("reading the socket", e))?
        .ip())
}

/// Connects a communicator of `backend` among the job's ranks. The reference
/// backend's flight recorder gets its own connection to the job's store
/// (unless `opts` brings one), so a rank whose wait lasts can ask where the
/// others are (see [`crate::flight`]).
pub fn communicator(
    rdv: &Rendezvous,
    backend: Backend,
    opts: &Options,
) -> Result<Box<dyn Communicator>> {
    let (rank, world) = (rdv.info.rank, rdv.info.world_size);
    if backend != Backend::Reference && opts.debug_collectives && world > 1 {
        let inner = backends::connect(backend, rdv.store(), rank, world, opts)?;
        let store = flight_store(rdv, opts.timeout).ok_or_else(|| {
            Error::Rendezvous(
                "--debug-collectives: cannot open a connection to the job's store".into(),
            )
        })?;
        return Ok(Box::new(backends::debug::DebugCollectives::new(
            inner,
            store.0,
            &opts.prefix,
            opts.timeout,
        )));
    }
    if backend != Backend::Reference {
        return backends::connect(backend, rdv.store(), rank, world, opts);
    }
    // with_flight_recorder leaves a lone rank or a disabled recorder alone.
    let mut opts = opts.clone();
    with_flight_recorder(rdv, &mut opts);
    backends::connect(backend, rdv.store(), rank, world, &opts)
}

/// What [`communicator`] adds to `opts` for a launched reference rank, for a
/// program that builds its reference communicator by hand (lab 6 plugs the
/// learner's algorithms into one): the recorder's own connection to the job's
/// store, so a wait can ask where the other ranks are and name a deadlock in
/// seconds, and the failed call's row for the launcher's hang table. Without
/// it, lab 6's ring of receives-before-sends sat out the whole timeout.
pub fn with_flight_recorder(rdv: &Rendezvous, opts: &mut Options) {
    if !opts.flight.enabled || rdv.info.world_size == 1 {
        return;
    }
    // A launched rank's failed call leaves its row for the launcher's table.
    opts.flight.report_to_launcher = true;
    if opts.flight_store.is_none() {
        opts.flight_store = flight_store(rdv, opts.timeout);
    }
}

/// A second connection to the job's store for the flight recorder: the
/// rendezvous owns the first, and the recorder's responder thread outlives
/// any borrow of it. Best effort: without it the recorder still prints its
/// notices, it only cannot ask the other ranks where they are.
fn flight_store(rdv: &Rendezvous, timeout: Duration) -> Option<SharedStore> {
    let i = &rdv.info;
    TcpStore::connect(
        &i.master_addr,
        i.master_port,
        &i.token,
        i.rank,
        i.world_size,
        timeout,
    )
    .ok()
    .map(|s| SharedStore(Arc::new(s)))
}

/// A failure to become a rank or to connect, saying which step failed (the
/// cause is its [`source`](std::error::Error::source)).
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// `--timeout` was negative, not a number, or too large.
    #[error("--timeout must be a non-negative number of seconds")]
    Timeout(#[source] std::time::TryFromFloatSecsError),
    /// `--notice` was negative, not a number, or too large.
    #[error("--notice must be a non-negative number of seconds")]
    Notice(#[source] std::time::TryFromFloatSecsError),
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
    connect_with(rdv, backend, &opts)
}

/// [`communicator`] with `opts` as they are, failing with the step's name.
pub fn connect_with(
    rdv: &Rendezvous,
    backend: Backend,
    opts: &Options,
) -> std::result::Result<Box<dyn Communicator>, JoinError> {
    communicator(rdv, backend, opts).map_err(|source| JoinError::Connect {
        backend,
        transport: opts.transport.name(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The source address towards this host's loopback is loopback; towards an
    /// unresolvable name it is a clear error (the multi-node options used to
    /// advertise 0.0.0.0, which no peer can connect to).
    #[test]
    fn address_towards_the_master_is_a_routable_source_address() {
        assert_eq!(
            address_towards("127.0.0.1", 29500).unwrap(),
            IpAddr::from([127, 0, 0, 1])
        );
        assert!(
            !address_towards("localhost", 29500)
                .unwrap()
                .is_unspecified()
        );
        let e = address_towards("no-such-host.invalid", 29500)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no-such-host.invalid"), "{e}");
    }
}
