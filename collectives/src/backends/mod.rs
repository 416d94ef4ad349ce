//! Backends behind [`crate::Communicator`], chosen at run time by name.

mod capabilities;
mod checks;
pub mod debug;
pub mod disabled;
#[cfg(feature = "gloo")]
pub mod gloo;
mod guard;
#[cfg(feature = "mpi")]
pub mod mpi;
#[cfg(feature = "nccl")]
pub mod nccl;
pub mod reference;
mod scratch;

use std::net::IpAddr;
use std::time::Duration;

use crate::algorithms::Algo;
use crate::error::{Error, Result};
use crate::flight::{Flight, FlightSettings, SharedStore};
use crate::rendezvous::Store;
use crate::transport::shm::ShmTransport;
use crate::transport::tcp::TcpTransport;
use crate::transport::{Transport, TransportKind, TransportOptions};
use crate::{Backend, Communicator};
use reference::ReferenceComm;

/// The thread level to ask `MPI_Init_thread` for: `single`, `funneled`,
/// `serialized` or `multiple` (the default, as mpi4py's `rc.thread_level`).
/// Below `multiple`, ringside serializes its own MPI calls with a lock; that
/// is all `serialized` asks, while `single` and `funneled` also promise that
/// only one thread (the main one) calls MPI, which a program calling ringside
/// from several threads does not keep (OpenMPI 4.1 does not check; the
/// watchdog's `MPI_Abort` comes from a thread of its own). Why lower it at
/// all: OpenMPI 4.1 takes its internal locks at every level above `single`,
/// about 0.2 µs per small call (the `peers` runner's `--mpi-thread-level`
/// measures it; the README has the figures). Read once, when MPI starts.
/// Defined outside the `mpi` feature so that programs which start MPI jobs
/// without linking MPI (the `peers` runner) can set it.
pub const MPI_THREAD_LEVEL_VAR: &str = "RINGSIDE_MPI_THREAD_LEVEL";

/// The values [`MPI_THREAD_LEVEL_VAR`] takes, lowest level first (MPI's
/// order).
pub const MPI_THREAD_LEVELS: [&str; 4] = ["single", "funneled", "serialized", "multiple"];

/// Every wait's bound when `RINGSIDE_TIMEOUT` does not set one ([`Options::new`]).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// How to build a communicator.
#[derive(Clone, Debug)]
pub struct Options {
    /// Reference backend: which transport (`Auto` = shared memory when every
    /// rank is on this host).
    pub transport: TransportKind,
    /// Reference backend: all_reduce algorithm (`Auto` = by size).
    pub algo: Algo,
    /// Bound on every wait.
    pub timeout: Duration,
    /// The job token (from the launcher), checked on every connection.
    pub token: [u8; 16],
    /// TCP: the local address to listen on and advertise.
    pub listen_ip: IpAddr,
    /// Store key prefix, so several communicators can share one store.
    pub prefix: String,
    /// Reference backend: the flight recorder's switch and notice time
    /// (`RINGSIDE_FLIGHT_RECORDER`, `RINGSIDE_NOTICE`; see [`crate::flight`]).
    pub flight: FlightSettings,
    /// Reference backend: the job's store, kept by the flight recorder so a
    /// rank whose wait lasts can ask where the others are and fail a deadlock
    /// early. Without it, a lasting wait still prints its notice.
    pub flight_store: Option<SharedStore>,
    /// Gloo, MPI, NCCL: check every collective's fingerprint against every
    /// rank's through the store first (`RINGSIDE_DEBUG_COLLECTIVES=1`,
    /// `--debug-collectives`; see [`debug`]). The reference backend checks
    /// in its own messages and ignores it.
    pub debug_collectives: bool,
    /// Ranks per node for the reference backend's `--algo hierarchical`:
    /// [`crate::job::options`] sets the launcher's local world size (torchrun's
    /// `LOCAL_WORLD_SIZE`, OpenMPI's, Slurm's); `None` reads `LOCAL_WORLD_SIZE`.
    pub per_node: Option<usize>,
    /// This rank's place among the ranks on its host (the launcher's
    /// `LOCAL_RANK`), set with `per_node` by [`crate::job::options`]: the Gloo
    /// backend binds each local rank to its share of the CPUs
    /// (`sys::affinity`) where the host's ranks share a scheduling group (its
    /// module docs, "Placement"). `None`: unknown, and Gloo does not bind.
    pub local_rank: Option<usize>,
}

impl Options {
    /// Defaults: auto transport and algorithm, `RINGSIDE_TIMEOUT` seconds (300 if
    /// unset), loopback listening, the flight recorder on with a notice after
    /// `RINGSIDE_NOTICE` seconds (5 if unset) and no store for it.
    pub fn new(token: [u8; 16]) -> Result<Options> {
        let timeout = match std::env::var("RINGSIDE_TIMEOUT") {
            Ok(s) => Duration::from_secs_f64(s.parse::<f64>().map_err(|_| {
                Error::InvalidArgument(format!("RINGSIDE_TIMEOUT={s:?} is not a number of seconds"))
            })?),
            Err(_) => DEFAULT_TIMEOUT,
        };
        let transport = match std::env::var("RINGSIDE_TRANSPORT") {
            Ok(s) => TransportKind::parse(&s).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "RINGSIDE_TRANSPORT={s:?}: expected auto, tcp or shm"
                ))
            })?,
            Err(_) => TransportKind::Auto,
        };
        Ok(Options {
            transport,
            algo: Algo::from_env()?,
            timeout,
            token,
            listen_ip: IpAddr::from([127, 0, 0, 1]),
            prefix: String::new(),
            flight: FlightSettings::from_env()?,
            flight_store: None,
            debug_collectives: std::env::var("RINGSIDE_DEBUG_COLLECTIVES").is_ok_and(|v| {
                matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "on" | "true")
            }),
            per_node: None,
            local_rank: None,
        })
    }
}

/// Connects a communicator of `backend` among `world` ranks that share `store`.
pub fn connect(
    backend: Backend,
    store: &dyn Store,
    rank: usize,
    world: usize,
    opts: &Options,
) -> Result<Box<dyn Communicator>> {
    match backend {
        Backend::Reference => Ok(Box::new(reference(store, rank, world, opts)?)),
        #[cfg(feature = "gloo")]
        Backend::Gloo => gloo::connect(store, rank, world, opts),
        #[cfg(not(feature = "gloo"))]
        Backend::Gloo => disabled::connect("gloo"),
        #[cfg(feature = "mpi")]
        Backend::Mpi => mpi::connect(store, rank, world, opts),
        #[cfg(not(feature = "mpi"))]
        Backend::Mpi => disabled::connect("mpi"),
        #[cfg(feature = "nccl")]
        Backend::Nccl => nccl::connect(store, rank, world, opts),
        #[cfg(not(feature = "nccl"))]
        Backend::Nccl => disabled::connect("nccl"),
    }
}

/// The library of `backend` called bare, with nothing of ringside around it,
/// for timing beside ringside's own call of it
/// ([`crate::bench::all_reduce_f32_beside`]) in a job of `world` ranks, a
/// barrier and the call after it waiting at most `timeout`; made at the same
/// point on every rank. MPI only: its binding's cost per call is
/// a target (`peers`' `mpi +us`), small enough that only one process sees it
/// sharply.
pub fn bare_all_reduce(
    backend: Backend,
    rank: usize,
    world: usize,
    timeout: Duration,
) -> Result<Box<dyn crate::bench::BareAllReduce>> {
    match backend {
        #[cfg(feature = "mpi")]
        Backend::Mpi => Ok(Box::new(mpi::Bare::new(rank, world, timeout)?)),
        #[cfg(not(feature = "mpi"))]
        Backend::Mpi => {
            let _ = (rank, world, timeout);
            Err(Error::NotCompiled { feature: "mpi" })
        }
        other => Err(Error::InvalidArgument(format!(
            "a bare library call is timed beside ringside's for the mpi backend only, not {other}"
        ))),
    }
}

/// For binaries that also link libtorch, first thing in `main` (before
/// threads or libtorch start): re-executes the program with Debian's libgloo
/// preloaded, so the Gloo backend binds to it and not to libtorch's bundled
/// copy (see `backends::gloo::preload`). Does nothing when no re-exec is needed or
/// possible, or without the `gloo` feature.
pub fn ensure_gloo_first() {
    #[cfg(feature = "gloo")]
    gloo::preload::ensure_gloo_first();
}

/// Connects the reference backend, resolving `TransportKind::Auto`.
pub fn reference(
    store: &dyn Store,
    rank: usize,
    world: usize,
    opts: &Options,
) -> Result<ReferenceComm> {
    if !Backend::Reference.algorithms().contains(&opts.algo) {
        return Err(reference::unsupported_algo(opts.algo));
    }
    let topts = TransportOptions {
        timeout: opts.timeout,
        prefix: opts.prefix.clone(),
        token: opts.token,
        listen_ip: opts.listen_ip,
        local: opts.local_rank.zip(opts.per_node),
    };
    // Before the transport connects: once it has, every rank's flight key
    // exists and reading it never waits.
    let flight = if opts.flight.enabled {
        Some(Flight::new(
            rank,
            world,
            opts.flight,
            opts.flight_store.clone(),
            &opts.prefix,
        )?)
    } else {
        None
    };
    let kind = match opts.transport {
        TransportKind::Auto if all_on_this_host(store, rank, world, &opts.prefix)? => {
            TransportKind::Shm
        }
        TransportKind::Auto => TransportKind::Tcp,
        k => k,
    };
    let (t, name): (Box<dyn Transport>, _) = match kind {
        TransportKind::Shm => (
            Box::new(ShmTransport::connect(store, rank, world, &topts)?),
            "shm",
        ),
        _ => (
            Box::new(TcpTransport::connect(store, rank, world, &topts)?),
            "tcp",
        ),
    };
    let mut comm = ReferenceComm::new(t, opts.algo, name);
    comm.set_per_node(opts.per_node);
    if let Some(f) = flight {
        comm.record(f);
    }
    Ok(comm)
}

/// Whether every rank runs on this host (same hostname and boot id).
fn all_on_this_host(store: &dyn Store, rank: usize, world: usize, prefix: &str) -> Result<bool> {
    let me = host_identity();
    store.set(&format!("{prefix}host/{rank}"), me.as_bytes())?;
    for r in 0..world {
        if store.get(&format!("{prefix}host/{r}"))? != me.as_bytes() {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Hostname plus kernel boot id: two containers sharing a hostname are still
/// told apart.
fn host_identity() -> String {
    let mut name = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates or truncates.
    let rc = unsafe { libc::gethostname(name.as_mut_ptr().cast(), name.len()) };
    let host = if rc == 0 {
        let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        String::from_utf8_lossy(&name[..end]).into_owned()
    } else {
        String::from("?")
    };
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    format!("{host}/{}", boot.trim())
}
