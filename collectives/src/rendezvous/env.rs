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
//!   launcher's job id and the master address ([`Token::derive`], weaker than
//!   a random token), else (a single process) a random one.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::rendezvous::Store;
use crate::rendezvous::barrier::{arrive, await_arrivals, join};
use crate::rendezvous::store::{StoreServer, TOKEN_VAR, TcpStore, Token, env_var};

/// The default `MASTER_ADDR`.
pub const DEFAULT_MASTER_ADDR: &str = "127.0.0.1";
/// The default `MASTER_PORT` (torchrun's).
pub const DEFAULT_MASTER_PORT: u16 = 29500;

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

/// The address rank 0's store listens on: the master address itself if it
/// is a loopback or wildcard address, else every interface (other hosts must
/// reach it by whatever name MASTER_ADDR gives).
pub fn bind_addr(master_addr: &str, port: u16) -> SocketAddr {
    let ip = match master_addr.parse::<IpAddr>() {
        Ok(ip) if ip.is_loopback() || ip.is_unspecified() => ip,
        Ok(IpAddr::V6(_)) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        Ok(IpAddr::V4(_)) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
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
    let server = if info.rank == 0 {
        let server = StoreServer::bind(
            bind_addr(&info.master_addr, info.master_port),
            info.token,
            info.world_size,
        )?;
        info.master_port = server.local_addr().port();
        Some(server)
    } else {
        if info.master_port == 0 {
            return Err(Error::Rendezvous(format!(
                "rank {} cannot find the store: MASTER_PORT is 0",
                info.rank
            )));
        }
        None
    };
    let store = TcpStore::connect(
        &info.master_addr,
        info.master_port,
        &info.token,
        info.rank,
        info.world_size,
        timeout,
    )?;
    join(
        &store,
        "ringside/rendezvous/join",
        info.rank,
        info.world_size,
        deadline.remaining(),
    )?;
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
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k: &str| map.get(k).cloned()
    }

    fn info(pairs: &[(&str, &str)]) -> Result<RankInfo> {
        RankInfo::from_vars(&vars(pairs), &Overrides::default())
    }

    const TOKEN: &str = "00112233445566778899aabbccddeeff";

    #[test]
    fn ringside_launcher_vars() {
        let i = info(&[
            ("RANK", "3"),
            ("WORLD_SIZE", "4"),
            ("LOCAL_RANK", "1"),
            ("LOCAL_WORLD_SIZE", "2"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "1234"),
            ("RINGSIDE_JOB_TOKEN", TOKEN),
        ])
        .unwrap();
        assert_eq!(i.launcher, Launcher::Ringside);
        assert_eq!(
            (i.rank, i.world_size, i.local_rank, i.local_world_size),
            (3, 4, 1, 2)
        );
        assert_eq!((i.master_addr.as_str(), i.master_port), ("10.0.0.1", 1234));
        assert_eq!(i.token, Token::parse(TOKEN).unwrap());
    }

    #[test]
    fn torchrun_vars_derive_a_token_from_the_run_id() {
        let base = [
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("LOCAL_RANK", "1"),
            ("LOCAL_WORLD_SIZE", "2"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "29400"),
            ("TORCHELASTIC_RUN_ID", "abc"),
        ];
        let i = info(&base).unwrap();
        assert_eq!(i.launcher, Launcher::Torchrun);
        assert_eq!((i.rank, i.world_size, i.master_port), (1, 2, 29400));
        // Regression: under torchrun's agent store, MASTER_PORT is taken by torchrun.
        let mut agent = base.to_vec();
        agent.push(("TORCHELASTIC_USE_AGENT_STORE", "True"));
        assert_eq!(info(&agent).unwrap().master_port, 29401);
        let mut other = base;
        other[6] = ("TORCHELASTIC_RUN_ID", "xyz");
        assert_ne!(info(&other).unwrap().token, i.token);
        assert_eq!(info(&base).unwrap().token, i.token);
    }

    #[test]
    fn openmpi_vars_with_defaults() {
        let i = info(&[
            ("OMPI_COMM_WORLD_RANK", "2"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
            ("OMPI_MCA_ess_base_jobid", "77"),
        ])
        .unwrap();
        assert_eq!(i.launcher, Launcher::OpenMpi);
        assert_eq!(
            (i.rank, i.world_size, i.local_rank, i.local_world_size),
            (2, 4, 0, 2)
        );
        assert_eq!(i.master_addr, DEFAULT_MASTER_ADDR);
        assert_eq!(i.master_port, DEFAULT_MASTER_PORT);
    }

    #[test]
    fn pmi_vars_local_rank_optional() {
        let i = info(&[("PMI_RANK", "1"), ("PMI_SIZE", "3")]).unwrap();
        assert_eq!(i.launcher, Launcher::Pmi);
        assert_eq!(
            (i.rank, i.world_size, i.local_rank, i.local_world_size),
            (1, 3, 1, 3)
        );
        let j = info(&[
            ("PMI_RANK", "1"),
            ("PMI_SIZE", "3"),
            ("MPI_LOCALRANKID", "0"),
            ("MPI_LOCALNRANKS", "1"),
        ])
        .unwrap();
        assert_eq!((j.local_rank, j.local_world_size), (0, 1));
        // Same job, same derived token on every rank.
        let k = info(&[("PMI_RANK", "2"), ("PMI_SIZE", "3")]).unwrap();
        assert_eq!(i.token, k.token);
    }

    #[test]
    fn slurm_step_vars_and_master_from_nodelist() {
        let i = info(&[
            ("SLURM_JOB_ID", "99"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_PROCID", "5"),
            ("SLURM_NTASKS", "6"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_NODEID", "2"),
            ("SLURM_STEP_TASKS_PER_NODE", "2(x2),1"),
            ("SLURM_STEP_NUM_NODES", "3"),
            ("SLURM_STEP_NODELIST", "gpu[07-09]"),
        ]);
        // local rank 1 on a node with one task is inconsistent: say so.
        let e = i.unwrap_err().to_string();
        assert!(e.contains("local rank 1"), "{e}");

        let i = info(&[
            ("SLURM_JOB_ID", "99"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_PROCID", "3"),
            ("SLURM_NTASKS", "5"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_NODEID", "1"),
            ("SLURM_STEP_TASKS_PER_NODE", "2(x2),1"),
            ("SLURM_STEP_NUM_NODES", "3"),
            ("SLURM_STEP_NODELIST", "gpu[07-09]"),
        ])
        .unwrap();
        assert_eq!(i.launcher, Launcher::Slurm);
        assert_eq!(
            (i.rank, i.world_size, i.local_rank, i.local_world_size),
            (3, 5, 1, 2)
        );
        assert_eq!(i.master_addr, "gpu07");
    }

    #[test]
    fn slurm_batch_script_is_not_a_rank() {
        let i = info(&[
            ("SLURM_JOB_ID", "99"),
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "8"),
        ])
        .unwrap();
        assert_eq!(i.launcher, Launcher::Single);
        assert_eq!((i.rank, i.world_size), (0, 1));
    }

    #[test]
    fn torchrun_wins_over_slurm_and_mpi() {
        let i = info(&[
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_RANK", "0"),
            ("OMPI_COMM_WORLD_SIZE", "1"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "1"),
        ])
        .unwrap();
        assert_eq!(i.launcher, Launcher::Torchrun);
        assert_eq!(i.rank, 1);
    }

    #[test]
    fn nothing_set_is_a_single_process_on_a_free_port() {
        let i = info(&[]).unwrap();
        assert_eq!(i.launcher, Launcher::Single);
        assert_eq!(
            (i.rank, i.world_size, i.local_rank, i.local_world_size),
            (0, 1, 0, 1)
        );
        assert_eq!(i.master_port, 0);
    }

    #[test]
    fn parse_errors_are_clear() {
        let e = info(&[("RANK", "abc"), ("WORLD_SIZE", "2")]).unwrap_err();
        assert_eq!(e.to_string(), "rendezvous: RANK=abc is not a number");
        let e = info(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_PORT", "70000")]).unwrap_err();
        assert!(e.to_string().contains("MASTER_PORT=70000"), "{e}");
        let e = info(&[("RANK", "2"), ("WORLD_SIZE", "2")]).unwrap_err();
        assert!(e.to_string().contains("out of range"), "{e}");
        let e = info(&[("RANK", "0")]).unwrap_err();
        assert!(e.to_string().contains("WORLD_SIZE is not"), "{e}");
        let e = info(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "1"),
            ("RINGSIDE_JOB_TOKEN", "x"),
        ])
        .unwrap_err();
        assert!(e.to_string().contains("RINGSIDE_JOB_TOKEN"), "{e}");
        let e = info(&[("RANK", "0"), ("WORLD_SIZE", "0")]).unwrap_err();
        assert!(e.to_string().contains("at least 1"), "{e}");
    }

    #[test]
    fn overrides_win() {
        let t = Token::generate().unwrap();
        let ov = Overrides {
            rank: Some(1),
            world_size: Some(3),
            master_addr: Some("h".into()),
            master_port: Some(4000),
            token: Some(t),
            ..Overrides::default()
        };
        let env = vars(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_PORT", "5")]);
        let i = RankInfo::from_vars(&env, &ov).unwrap();
        assert_eq!((i.rank, i.world_size), (1, 3));
        assert_eq!((i.master_addr.as_str(), i.master_port), ("h", 4000));
        assert_eq!(i.token, t);

        // Arguments alone make a multi-rank job with an agreed token.
        let ov = Overrides {
            rank: Some(1),
            world_size: Some(2),
            ..Overrides::default()
        };
        let a = RankInfo::from_vars(&vars(&[]), &ov).unwrap();
        let b = RankInfo::from_vars(
            &vars(&[]),
            &Overrides {
                rank: Some(0),
                ..ov
            },
        )
        .unwrap();
        assert_eq!(a.launcher, Launcher::Ringside);
        assert_eq!(a.master_port, DEFAULT_MASTER_PORT);
        assert_eq!(a.token, b.token);

        let e = RankInfo::from_vars(
            &vars(&[]),
            &Overrides {
                rank: Some(2),
                ..Overrides::default()
            },
        )
        .unwrap_err();
        assert!(e.to_string().contains("no world size"), "{e}");
    }

    #[test]
    fn slurm_list_helpers() {
        assert_eq!(tasks_on_node("2(x3),1", 0), Some(2));
        assert_eq!(tasks_on_node("2(x3),1", 2), Some(2));
        assert_eq!(tasks_on_node("2(x3),1", 3), Some(1));
        assert_eq!(tasks_on_node("2(x3),1", 4), None);
        assert_eq!(tasks_on_node("4", 0), Some(4));
        assert_eq!(first_host("node[03-05,9],gpu1").as_deref(), Some("node03"));
        assert_eq!(first_host("a1,a2").as_deref(), Some("a1"));
        assert_eq!(first_host("solo").as_deref(), Some("solo"));
        assert_eq!(first_host("x,n[1-2]").as_deref(), Some("x"));
        assert_eq!(first_host("rack[2]-n[1-4]").as_deref(), Some("rack2-n1"));
        assert_eq!(first_host("[").as_deref(), None);
    }

    #[test]
    fn bind_addr_keeps_loopback_and_opens_others() {
        assert_eq!(bind_addr("127.0.0.1", 5).to_string(), "127.0.0.1:5");
        assert_eq!(bind_addr("localhost", 5).to_string(), "127.0.0.1:5");
        assert_eq!(bind_addr("10.1.2.3", 5).to_string(), "0.0.0.0:5");
        assert_eq!(bind_addr("node7", 5).to_string(), "0.0.0.0:5");
        assert_eq!(bind_addr("::1", 5).to_string(), "[::1]:5");
        assert_eq!(bind_addr("fe80::1", 5).to_string(), "[::]:5");
    }

    #[test]
    fn connect_single_rank_and_a_pair_of_threads() {
        let single = info(&[]).unwrap();
        let r = connect(&single, Duration::from_secs(5)).unwrap();
        assert!(r.is_host());
        assert_ne!(r.info.master_port, 0);
        r.store().set("x", b"1").unwrap();
        r.close(Duration::from_secs(1)).unwrap();

        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let t = Token::generate().unwrap();
        std::thread::scope(|s| {
            for rank in 0..2 {
                s.spawn(move || {
                    let i = RankInfo {
                        rank,
                        world_size: 2,
                        local_rank: rank,
                        local_world_size: 2,
                        master_addr: "127.0.0.1".into(),
                        master_port: port,
                        token: t,
                        launcher: Launcher::Ringside,
                    };
                    let r = connect(&i, Duration::from_secs(5)).unwrap();
                    assert_eq!(r.is_host(), rank == 0);
                    r.store().set(&format!("hi{rank}"), b"x").unwrap();
                    r.store().get(&format!("hi{}", 1 - rank)).unwrap();
                    r.close(Duration::from_secs(5)).unwrap();
                });
            }
        });
    }

    #[test]
    fn connect_names_the_missing_rank() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let i = RankInfo {
            rank: 0,
            world_size: 2,
            local_rank: 0,
            local_world_size: 2,
            master_addr: "127.0.0.1".into(),
            master_port: port,
            token: Token::generate().unwrap(),
            launcher: Launcher::Ringside,
        };
        let e = connect(&i, Duration::from_millis(300)).unwrap_err();
        assert!(e.to_string().contains("ranks [1] to join"), "{e}");
    }

    /// Regression: rank 0 left the closing barrier and dropped the store while
    /// a rank that had arrived earlier was still polling it ("the store ...
    /// closed the connection"), failing a finished job under load.
    #[test]
    fn close_does_not_pull_the_store_from_a_rank_still_leaving() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let t = Token::generate().unwrap();
        let results: Vec<Result<()>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|rank| {
                    s.spawn(move || {
                        let i = RankInfo {
                            rank,
                            world_size: 4,
                            local_rank: rank,
                            local_world_size: 4,
                            master_addr: "127.0.0.1".into(),
                            master_port: port,
                            token: t,
                            launcher: Launcher::Ringside,
                        };
                        let r = connect(&i, Duration::from_secs(5))?;
                        // Ranks reach the end at different times.
                        std::thread::sleep(Duration::from_millis(40 * rank as u64));
                        r.close(Duration::from_secs(5))
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (rank, r) in results.into_iter().enumerate() {
            assert!(r.is_ok(), "rank {rank}: {r:?}");
        }
    }
}
