//! Who am I: rank, world size and the master's address, from the launcher's
//! environment variables, with explicit arguments ([`Overrides`]) on top.
//!
//! Discovery order (the first that matches wins):
//!
//! | launcher | rank / world size | local rank / local size |
//! |---|---|---|
//! | `ringside launch` | `RANK` `WORLD_SIZE` + `RINGSIDE_JOB_TOKEN` | `LOCAL_RANK` `LOCAL_WORLD_SIZE` |
//! | torchrun | `RANK` `WORLD_SIZE` | `LOCAL_RANK` `LOCAL_WORLD_SIZE` |
//! | OpenMPI `mpirun` | `OMPI_COMM_WORLD_RANK` `OMPI_COMM_WORLD_SIZE` | `OMPI_COMM_WORLD_LOCAL_RANK` `OMPI_COMM_WORLD_LOCAL_SIZE` |
//! | MPICH / Intel MPI (PMI) | `PMI_RANK` `PMI_SIZE` | `MPI_LOCALRANKID` `MPI_LOCALNRANKS` |
//! | Slurm `srun` | `SLURM_PROCID` `SLURM_STEP_NUM_TASKS` (or `SLURM_NTASKS`) | `SLURM_LOCALID`, tasks per node |
//!
//! Slurm counts only inside a job step (`SLURM_STEP_ID` set): a program run
//! directly in an `sbatch` script is not a rank of `SLURM_NTASKS`.
//!
//! Defaults when the launcher does not say:
//! - `MASTER_ADDR` is `127.0.0.1` (under multi-node `srun`, the first host of
//!   the step's node list). Multi-node `mpirun` must pass it, e.g.
//!   `mpirun -x MASTER_ADDR=node1 ...`.
//! - `MASTER_PORT` is 29500 (torchrun's default), so two jobs on one host
//!   collide unless one picks another port; a single process with no
//!   launcher uses a free port instead, since nobody else needs to find it.
//! - local rank / local size are rank / world size (one node).
//! - the job token: `RINGSIDE_JOB_TOKEN`, else one derived from the
//!   launcher's job id and the master address ([`Token::derive`]: public), which
//!   [`connect`] replaces on one host by a random one shared through a private
//!   file (`secret`), else (a single process) a random one.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::rendezvous::Store;
use crate::rendezvous::barrier::{arrive, await_arrivals, join};
use crate::rendezvous::store::{StoreServer, TOKEN_VAR, TcpStore, Token, env_var};

mod secret;

/// The default `MASTER_ADDR`.
pub const DEFAULT_MASTER_ADDR: &str = "127.0.0.1";
/// The default `MASTER_PORT` (torchrun's).
pub const DEFAULT_MASTER_PORT: u16 = 29500;
/// How often a rank looks again for the job's secret file, or for a fresh one
/// after the store refused the token it read.
const SECRET_PAUSE: Duration = Duration::from_millis(20);

/// Which launcher started this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Launcher {
    /// `ringside launch` or [`crate::launch::spawn`] (or explicit arguments alone).
    Ringside,
    /// PyTorch's torchrun (or anything else that sets its variables).
    Torchrun,
    /// OpenMPI's `mpirun`.
    OpenMpi,
    /// MPICH / Intel MPI (Hydra's PMI variables).
    Pmi,
    /// Slurm's `srun`.
    Slurm,
    /// No launcher: a single process, rank 0 of 1.
    Single,
}

impl Launcher {
    /// A short name for messages.
    pub const fn name(self) -> &'static str {
        match self {
            Launcher::Ringside => "ringside",
            Launcher::Torchrun => "torchrun",
            Launcher::OpenMpi => "openmpi",
            Launcher::Pmi => "pmi",
            Launcher::Slurm => "slurm",
            Launcher::Single => "single",
        }
    }
}

impl fmt::Display for Launcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Everything a rank needs to know to join its job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankInfo {
    /// This process's rank, `0..world_size`.
    pub rank: usize,
    /// Number of ranks in the job.
    pub world_size: usize,
    /// Rank among the ranks on this host (picks the GPU).
    pub local_rank: usize,
    /// Number of ranks on this host.
    pub local_world_size: usize,
    /// Host of rank 0, which runs the store.
    pub master_addr: String,
    /// Port of the store (0: rank 0 picks a free one; only for world size 1).
    pub master_port: u16,
    /// The job token the store checks.
    pub token: Token,
    /// `token` was derived from values of the environment anyone on the host can
    /// read or guess (no `RINGSIDE_JOB_TOKEN`): [`connect`] then replaces it with a
    /// random one, shared through a private file when every rank is on this host.
    pub token_derived: bool,
    /// Where this came from.
    pub launcher: Launcher,
}

/// Explicit values that win over the environment (from command-line flags).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overrides {
    /// Rank.
    pub rank: Option<usize>,
    /// World size.
    pub world_size: Option<usize>,
    /// Local rank.
    pub local_rank: Option<usize>,
    /// Local world size.
    pub local_world_size: Option<usize>,
    /// Master address.
    pub master_addr: Option<String>,
    /// Master port.
    pub master_port: Option<u16>,
    /// Job token.
    pub token: Option<Token>,
}

/// What the launcher's variables said, before overrides and defaults.
struct Found {
    launcher: Launcher,
    rank: usize,
    world_size: usize,
    local_rank: Option<usize>,
    local_world_size: Option<usize>,
}

type Get<'a> = &'a dyn Fn(&str) -> Option<String>;

fn number<T: std::str::FromStr>(get: Get<'_>, name: &str) -> Result<Option<T>> {
    match get(name) {
        None => Ok(None),
        Some(v) => v
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| Error::Rendezvous(format!("{name}={v} is not a number"))),
    }
}

fn first_number<T: std::str::FromStr>(get: Get<'_>, names: &[&str]) -> Result<Option<T>> {
    for n in names {
        if let Some(v) = number(get, n)? {
            return Ok(Some(v));
        }
    }
    Ok(None)
}

/// Both or neither of a rank variable and its world-size variable.
fn pair(get: Get<'_>, rank: &str, size: &[&str]) -> Result<Option<(usize, usize)>> {
    let r = number::<usize>(get, rank)?;
    let s = first_number::<usize>(get, size)?;
    match (r, s) {
        (Some(r), Some(s)) => Ok(Some((r, s))),
        (None, None) => Ok(None),
        (Some(_), None) => Err(Error::Rendezvous(format!(
            "{rank} is set but {} is not",
            size.join(" / ")
        ))),
        (None, Some(_)) => Err(Error::Rendezvous(format!(
            "{} is set but {rank} is not",
            size[0]
        ))),
    }
}

fn detect(get: Get<'_>) -> Result<Option<Found>> {
    if let Some((rank, world_size)) = pair(get, "RANK", &["WORLD_SIZE"])? {
        let ours = get(TOKEN_VAR).is_some() && get("TORCHELASTIC_RUN_ID").is_none();
        return Ok(Some(Found {
            launcher: if ours {
                Launcher::Ringside
            } else {
                Launcher::Torchrun
            },
            rank,
            world_size,
            local_rank: number(get, "LOCAL_RANK")?,
            local_world_size: number(get, "LOCAL_WORLD_SIZE")?,
        }));
    }
    if let Some((rank, world_size)) = pair(get, "OMPI_COMM_WORLD_RANK", &["OMPI_COMM_WORLD_SIZE"])?
    {
        return Ok(Some(Found {
            launcher: Launcher::OpenMpi,
            rank,
            world_size,
            local_rank: number(get, "OMPI_COMM_WORLD_LOCAL_RANK")?,
            local_world_size: number(get, "OMPI_COMM_WORLD_LOCAL_SIZE")?,
        }));
    }
    if let Some((rank, world_size)) = pair(get, "PMI_RANK", &["PMI_SIZE"])? {
        return Ok(Some(Found {
            launcher: Launcher::Pmi,
            rank,
            world_size,
            local_rank: number(get, "MPI_LOCALRANKID")?,
            local_world_size: number(get, "MPI_LOCALNRANKS")?,
        }));
    }
    let in_step = get("SLURM_STEP_ID").is_some() || get("SLURM_STEPID").is_some();
    if !in_step {
        return Ok(None);
    }
    if let Some((rank, world_size)) = pair(
        get,
        "SLURM_PROCID",
        &["SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"],
    )? {
        return Ok(Some(Found {
            launcher: Launcher::Slurm,
            rank,
            world_size,
            local_rank: number(get, "SLURM_LOCALID")?,
            local_world_size: slurm_local_size(get)?,
        }));
    }
    Ok(None)
}

/// Tasks on this node: `SLURM_STEP_TASKS_PER_NODE` / `SLURM_TASKS_PER_NODE`
/// ("2(x3),1": two tasks on each of three nodes, then one) indexed by
/// `SLURM_NODEID`, else `SLURM_NTASKS_PER_NODE`.
fn slurm_local_size(get: Get<'_>) -> Result<Option<usize>> {
    let node: usize = number(get, "SLURM_NODEID")?.unwrap_or(0);
    for name in ["SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"] {
        if let Some(v) = get(name) {
            return tasks_on_node(&v, node).map(Some).ok_or_else(|| {
                Error::Rendezvous(format!("{name}={v} is not a tasks-per-node list"))
            });
        }
    }
    number(get, "SLURM_NTASKS_PER_NODE")
}

fn tasks_on_node(list: &str, node: usize) -> Option<usize> {
    let mut seen = 0usize;
    for part in list.split(',') {
        let (tasks, times) = match part.split_once("(x") {
            Some((t, rest)) => (t, rest.strip_suffix(')')?.trim().parse::<usize>().ok()?),
            None => (part, 1),
        };
        let tasks: usize = tasks.trim().parse().ok()?;
        seen += times;
        if node < seen {
            return Some(tasks);
        }
    }
    None
}

/// The first host of a Slurm node list: `node[03-05,9],gpu1` → `node03`,
/// `rack[2-3]-n[1-4]` → `rack2-n1`.
fn first_host(list: &str) -> Option<String> {
    let mut host = String::new();
    let mut rest = list.trim();
    loop {
        // Up to the next bracket group or the end of the first host.
        let stop = rest.find(['[', ',']).unwrap_or(rest.len());
        host.push_str(&rest[..stop]);
        if !rest[stop..].starts_with('[') {
            break;
        }
        let inner = &rest[stop + 1..];
        let close = inner.find(']')?;
        let first = inner[..close].split([',', '-']).next()?;
        host.push_str(first);
        rest = &inner[close + 1..];
    }
    (!host.is_empty()).then_some(host)
}

impl RankInfo {
    /// Reads the process environment; see [`RankInfo::from_vars`].
    pub fn from_env(overrides: &Overrides) -> Result<RankInfo> {
        RankInfo::from_vars(&env_var, overrides)
    }

    /// Works out who we are from environment variables (`get` returns a
    /// variable's value; tests pass a map) and `overrides`, which win. See the
    /// [module docs](self) for the variables and defaults.
    pub fn from_vars(
        get: &dyn Fn(&str) -> Option<String>,
        overrides: &Overrides,
    ) -> Result<RankInfo> {
        let found = detect(get)?;
        let (mut launcher, env_rank, env_world) = match &found {
            Some(f) => (f.launcher, Some(f.rank), Some(f.world_size)),
            None => (Launcher::Single, None, None),
        };
        let world_size = match (overrides.world_size, env_world) {
            (Some(w), _) | (None, Some(w)) => w,
            (None, None) if overrides.rank.is_some_and(|r| r > 0) => {
                return Err(Error::Rendezvous(
                    "a rank was given but no world size (set WORLD_SIZE or pass the world size)"
                        .into(),
                ));
            }
            (None, None) => 1,
        };
        let rank = overrides.rank.or(env_rank).unwrap_or(0);
        if found.is_none() && world_size > 1 {
            // Explicit arguments alone: ringside's own way of starting ranks.
            launcher = Launcher::Ringside;
        }
        if world_size == 0 {
            return Err(Error::Rendezvous(
                "the world size must be at least 1, not 0".into(),
            ));
        }
        if rank >= world_size {
            return Err(Error::Rendezvous(format!(
                "rank {rank} is out of range for a world of {world_size} ranks ({} launcher)",
                launcher.name()
            )));
        }
        let local_rank = overrides
            .local_rank
            .or(found.as_ref().and_then(|f| f.local_rank))
            .unwrap_or(rank);
        let local_world_size = overrides
            .local_world_size
            .or(found.as_ref().and_then(|f| f.local_world_size))
            .unwrap_or(world_size);
        if local_rank >= local_world_size {
            return Err(Error::Rendezvous(format!(
                "local rank {local_rank} is out of range for {local_world_size} ranks on this host"
            )));
        }

        let master_addr = match (overrides.master_addr.clone(), get("MASTER_ADDR")) {
            (Some(a), _) | (None, Some(a)) => a.trim().to_owned(),
            (None, None) => {
                slurm_master(get, launcher)?.unwrap_or_else(|| DEFAULT_MASTER_ADDR.to_owned())
            }
        };
        if master_addr.is_empty() {
            return Err(Error::Rendezvous("MASTER_ADDR is empty".into()));
        }
        let master_port = match overrides.master_port {
            Some(p) => p,
            None => match number::<u16>(get, "MASTER_PORT")? {
                // torchrun's agent already serves its own (c10d) store on
                // MASTER_PORT, so ringside's store takes the next port.
                Some(p) if torchrun_agent_store(get) => p.checked_add(1).ok_or_else(|| {
                    Error::Rendezvous(
                        "MASTER_PORT=65535 leaves no port for ringside's store next to torchrun's"
                            .into(),
                    )
                })?,
                Some(p) => p,
                None if launcher == Launcher::Single && world_size == 1 => 0,
                None => DEFAULT_MASTER_PORT,
            },
        };

        let token_derived = overrides.token.is_none() && get(TOKEN_VAR).is_none() && {
            launcher != Launcher::Single || world_size > 1
        };
        let token = match overrides.token {
            Some(t) => t,
            None => match Token::from_vars(get)? {
                Some(t) => t,
                None if launcher == Launcher::Single => Token::generate()?,
                None => {
                    // Hash the effective address and port, so ranks given
                    // them as arguments still agree.
                    let port = master_port.to_string();
                    let addr = master_addr.clone();
                    Token::derive(&move |k: &str| match k {
                        "MASTER_ADDR" => Some(addr.clone()),
                        "MASTER_PORT" => Some(port.clone()),
                        _ => get(k),
                    })
                }
            },
        };

        Ok(RankInfo {
            rank,
            world_size,
            local_rank,
            local_world_size,
            master_addr,
            master_port,
            token,
            token_derived,
            launcher,
        })
    }

    /// Whether the environment says a launcher started this process as a rank.
    pub fn launched_from_env() -> Result<bool> {
        Ok(detect(&env_var)?.is_some())
    }
}

/// Whether torchrun's agent hosts a store on MASTER_PORT (it does for the
/// default static and c10d rendezvous and says so in this variable).
fn torchrun_agent_store(get: &dyn Fn(&str) -> Option<String>) -> bool {
    get("TORCHELASTIC_RUN_ID").is_some()
        && get("TORCHELASTIC_USE_AGENT_STORE").is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

fn slurm_master(get: Get<'_>, launcher: Launcher) -> Result<Option<String>> {
    if launcher != Launcher::Slurm {
        return Ok(None);
    }
    let nodes: usize = first_number(
        get,
        &[
            "SLURM_STEP_NUM_NODES",
            "SLURM_NNODES",
            "SLURM_JOB_NUM_NODES",
        ],
    )?
    .unwrap_or(1);
    if nodes <= 1 {
        return Ok(None);
    }
    for name in [
        "SLURM_STEP_NODELIST",
        "SLURM_JOB_NODELIST",
        "SLURM_NODELIST",
    ] {
        if let Some(list) = get(name) {
            return first_host(&list).map(Some).ok_or_else(|| {
                Error::Rendezvous(format!(
                    "cannot find the first host in {name}={list}; set MASTER_ADDR"
                ))
            });
        }
    }
    Ok(None)
}

/// The address rank 0's store listens on: the master address itself when it is
/// an IP address (the store listens only where it was told, not on every
/// interface), except an IPv6 link-local one, which needs a scope to bind; for a
/// host name, every interface: Debian maps a machine's own name to 127.0.1.1 in
/// `/etc/hosts`, so binding the resolved name would hide the store from the other
/// hosts that reach it by that name.
pub fn bind_addr(master_addr: &str, port: u16) -> SocketAddr {
    let ip = match master_addr.parse::<IpAddr>() {
        Ok(IpAddr::V6(v6)) if v6.is_unicast_link_local() => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        Ok(ip) => ip,
        Err(_) if master_addr.eq_ignore_ascii_case("localhost") => IpAddr::V4(Ipv4Addr::LOCALHOST),
        Err(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
    };
    SocketAddr::new(ip, port)
}

/// A joined job: the store client, and on rank 0 the store server.
#[derive(Debug)]
pub struct Rendezvous {
    /// This rank's connection to the store.
    pub store: TcpStore,
    /// Kept alive on rank 0: dropping it shuts the store down.
    server: Option<StoreServer>,
    /// Who we are (on a world of one, `master_port` is the port actually used).
    pub info: RankInfo,
}

/// Hosts the store on rank 0, connects every rank to it and waits until all
/// `world_size` ranks have arrived, all within `timeout`.
///
/// Rank 0 serves the store for as long as the returned [`Rendezvous`] lives;
/// call [`Rendezvous::close`] at the end so it does not leave early.
pub fn connect(info: &RankInfo, timeout: Duration) -> Result<Rendezvous> {
    let deadline = Deadline::after(timeout);
    let mut info = info.clone();
    // A derived token is public: on one host, share a random one privately instead
    // (see `secret`); across hosts, say once that the store is open.
    let one_host = info.local_world_size == info.world_size;
    let secret = if info.token_derived && info.world_size > 1 && one_host {
        Some(secret::path_in(&secret::private_dir()?, &info.token))
    } else {
        if info.token_derived && info.rank == 0 && !one_host {
            eprintln!(
                "ringside: no RINGSIDE_JOB_TOKEN: the store on {}:{} accepts anyone who can \
                 reach it and knows this job's id and address; set RINGSIDE_JOB_TOKEN to the \
                 same random value on every rank (e.g. `openssl rand -hex 16`) to close it",
                info.master_addr, info.master_port
            );
        }
        None
    };
    // Rank 0 binds before it publishes anything: if the port is taken (another
    // job, another program) it fails with nothing written for the others to read.
    // `published` removes the secret on every way out of this function.
    let (server, published) = if info.rank == 0 {
        if secret.is_some() {
            info.token = Token::generate()?;
        }
        let server = StoreServer::bind(
            bind_addr(&info.master_addr, info.master_port),
            info.token,
            info.world_size,
        )?;
        info.master_port = server.local_addr().port();
        let published = match &secret {
            Some(path) => Some(secret::publish(path, &info.token)?),
            None => None,
        };
        (Some(server), published)
    } else {
        if info.master_port == 0 {
            return Err(Error::Rendezvous(format!(
                "rank {} cannot find the store: MASTER_PORT is 0",
                info.rank
            )));
        }
        (None, None)
    };
    let store = loop {
        if info.rank != 0
            && let Some(path) = &secret
        {
            // Rank 0 may not have written it yet, or a stale one of an earlier job
            // may still be there: a refused token means read it again.
            match secret::read(path) {
                Some(t) => info.token = t,
                None if !deadline.expired() => {
                    std::thread::sleep(SECRET_PAUSE);
                    continue;
                }
                None => {
                    return Err(deadline.error(format!(
                        "rank 0 to publish the job's secret in {} (set RINGSIDE_JOB_TOKEN on \
                         every rank to skip it)",
                        path.display()
                    )));
                }
            }
        }
        match TcpStore::connect(
            &info.master_addr,
            info.master_port,
            &info.token,
            info.rank,
            info.world_size,
            deadline.remaining(),
        ) {
            // Not after the last pause: the refusal is the error to report, not
            // the dial that would find no time left.
            Err(Error::Auth(_)) if secret.is_some() && deadline.remaining() > SECRET_PAUSE => {
                std::thread::sleep(SECRET_PAUSE);
            }
            other => break other?,
        }
    };
    join(
        &store,
        "ringside/rendezvous/join",
        info.rank,
        info.world_size,
        deadline.remaining(),
    )?;
    // Every rank is in: nobody needs the file any more.
    drop(published);
    info.token_derived = false;
    Ok(Rendezvous {
        store,
        server,
        info,
    })
}

impl Rendezvous {
    /// The store, as the trait transports take.
    pub fn store(&self) -> &dyn Store {
        &self.store
    }

    /// Whether this rank hosts the store.
    pub fn is_host(&self) -> bool {
        self.server.is_some()
    }

    /// Leaves the job's store without pulling it from under anyone: every
    /// other rank says it is done with the store and leaves at once; rank 0,
    /// which hosts it, waits (up to `timeout`) for all of them before dropping it.
    pub fn close(self, timeout: Duration) -> Result<()> {
        const PREFIX: &str = "ringside/rendezvous/close";
        if !self.is_host() {
            // After this `add` returns this rank never touches the store again,
            // so the host may stop serving the moment it has counted us.
            arrive(&self.store, PREFIX, self.info.rank)?;
            return Ok(());
        }
        // Our own marker only, not the count: a timeout then names just the others.
        self.store
            .add(&format!("{PREFIX}/rank/{}", self.info.rank), 1)?;
        let arrived = self.store.add(&format!("{PREFIX}/count"), 0)?;
        let others = self.info.world_size.saturating_sub(1);
        await_arrivals(
            &self.store,
            PREFIX,
            arrived,
            others,
            self.info.world_size,
            timeout,
        )
    }
}

#[cfg(test)]
mod tests;
