//! Starting and supervising ranks: the engine of `ringside launch`, and
//! [`init`], the `mp.spawn`-style entry point for programs.
//!
//! [`spawn`] starts `nproc_per_node` copies of a program with the
//! torchrun-compatible variables (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`,
//! `LOCAL_WORLD_SIZE`, `GROUP_RANK`, `MASTER_ADDR`, `MASTER_PORT`) plus
//! `RINGSIDE_JOB_TOKEN`, forwards their stderr line by line as `[rank N] …`,
//! and watches them. The first rank to fail (non-zero exit or a signal) ends
//! the job: the others get SIGTERM, then SIGKILL after the grace period, and
//! the report says who failed and how, with its last stderr lines.
//!
//! Nothing outlives the launcher:
//! - each rank runs in its own session and process group (as torchrun's do:
//!   the scheduler then shares the CPU with a rank as with a program of its
//!   own, see [`supervised`]), and signals go to the whole group, so a rank's
//!   own children (`sh -c 'sleep 60'`) stop with it;
//!   when a rank exits, whatever it left running in its group is killed;
//! - each rank gets `PR_SET_PDEATHSIG(SIGKILL)`, so if the launcher itself is
//!   killed the ranks die too (their children can then survive: only a
//!   launcher that exits normally cleans up whole groups);
//! - with [`install_interrupt_handler`], Ctrl-C / SIGTERM / SIGHUP to the
//!   launcher stops every rank the same way and the report's exit code is
//!   128 + the signal (130 for Ctrl-C).
//!
//! Ranks get `/dev/null` as stdin: in sessions of their own they have no
//! terminal to read.
//!
//! Multi-node: run the launcher once per node with the same `nnodes`,
//! `master_addr`, `master_port` and **the same token** on every node (pass
//! `RINGSIDE_JOB_TOKEN` or `--token`; make one with `openssl rand -hex 16`).

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::rendezvous::env::{DEFAULT_MASTER_ADDR, DEFAULT_MASTER_PORT};
use crate::rendezvous::store::{TOKEN_VAR, Token};

mod blame;
pub mod capacity;
mod exit;
mod group;
pub(crate) mod hang_table;
mod init;
mod interrupt;
mod load;
mod output;
mod port;
mod report;

pub use exit::{Exit, Stopped, signal_name};
pub use group::{Group, supervised};
pub use init::{Role, SELF_LAUNCHED, init};
pub use interrupt::install_interrupt_handler;
pub use load::Load;
pub use output::TAIL_LINES;
pub use port::free_port;
pub use report::{LaunchReport, RankOutcome};

use interrupt::{INTERRUPTS, PENDING, Supervising};
#[cfg(test)]
use output::BacktraceFilter;
use output::forward;

/// The default time ranks get between SIGTERM and SIGKILL.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);
/// How often the supervisor looks at its children.
const POLL: Duration = Duration::from_millis(20);
/// How long to wait for the last stderr bytes after every rank has exited.
const DRAIN: Duration = Duration::from_secs(2);

/// What to launch.
#[derive(Clone, Debug)]
pub struct LaunchSpec {
    /// The program every rank runs.
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Ranks on this node.
    pub nproc_per_node: usize,
    /// Nodes in the job (each runs one launcher).
    pub nnodes: usize,
    /// This node's index, `0..nnodes`; its ranks are
    /// `node_rank * nproc_per_node ..`.
    pub node_rank: usize,
    /// Host of rank 0.
    pub master_addr: String,
    /// Port of rank 0's store; `None`: a free port on 127.0.0.1 for a single
    /// node, 29500 for several (every node must agree).
    pub master_port: Option<u16>,
    /// The job token; `None`: a fresh random one (single node only).
    pub token: Option<Token>,
    /// Extra environment variables for every rank.
    pub env: Vec<(OsString, OsString)>,
    /// Time between SIGTERM and SIGKILL when stopping ranks.
    pub grace: Duration,
    /// The variables each rank learns its place from ([`torchrun_env`]; the
    /// workshop's lab 8 plugs the learner's in here).
    pub rank_env: RankEnv,
}

/// Computes one rank's launcher variables (the job token is added by the
/// launcher itself), or why it cannot: the launch then stops with that reason
/// before starting the rank.
pub type RankEnv = fn(&RankSlot<'_>) -> std::result::Result<Vec<(String, String)>, String>;

/// What a launcher knows when it starts one of its ranks.
#[derive(Clone, Copy, Debug)]
pub struct RankSlot<'a> {
    /// The launch.
    pub spec: &'a LaunchSpec,
    /// This rank's index on its node, `0..nproc_per_node`.
    pub local_rank: usize,
    /// The port of rank 0's store, as every node agreed.
    pub master_port: u16,
}

// ANCHOR: torchrun_env
/// torchrun's variables: a node's ranks are numbered after the ranks of the
/// nodes before it, so `RANK` = node_rank · nproc_per_node + local_rank of
/// `WORLD_SIZE` = nnodes · nproc_per_node; `GROUP_RANK` is the node's index;
/// every rank finds rank 0's store at `MASTER_ADDR:MASTER_PORT`.
pub fn torchrun_env(slot: &RankSlot<'_>) -> std::result::Result<Vec<(String, String)>, String> {
    let spec = slot.spec;
    let rank = spec.node_rank * spec.nproc_per_node + slot.local_rank;
    Ok(vec![
        ("RANK".into(), rank.to_string()),
        (
            "WORLD_SIZE".into(),
            (spec.nnodes * spec.nproc_per_node).to_string(),
        ),
        ("LOCAL_RANK".into(), slot.local_rank.to_string()),
        ("LOCAL_WORLD_SIZE".into(), spec.nproc_per_node.to_string()),
        ("GROUP_RANK".into(), spec.node_rank.to_string()),
        ("MASTER_ADDR".into(), spec.master_addr.clone()),
        ("MASTER_PORT".into(), slot.master_port.to_string()),
    ])
}
// ANCHOR_END: torchrun_env

impl LaunchSpec {
    /// `nproc_per_node` local ranks of `program args…` on one node, with
    /// defaults for everything else.
    pub fn new<S: Into<OsString>>(
        program: impl Into<OsString>,
        args: impl IntoIterator<Item = S>,
        nproc_per_node: usize,
    ) -> LaunchSpec {
        LaunchSpec {
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
            nproc_per_node,
            nnodes: 1,
            node_rank: 0,
            master_addr: DEFAULT_MASTER_ADDR.to_owned(),
            master_port: None,
            token: None,
            env: Vec::new(),
            grace: DEFAULT_GRACE,
            rank_env: torchrun_env,
        }
    }
}

/// One started rank (its process is the same index of the [`Group`]).
struct Running {
    rank: usize,
    local_rank: usize,
    pid: u32,
    stopped: Option<Stopped>,
    tail: Arc<Mutex<VecDeque<String>>>,
    reader: Option<JoinHandle<()>>,
}

fn check(spec: &LaunchSpec) -> Result<()> {
    if spec.program.is_empty() {
        return Err(Error::InvalidArgument("no program to launch".into()));
    }
    if spec.nproc_per_node == 0 {
        return Err(Error::InvalidArgument(
            "nproc_per_node must be at least 1".into(),
        ));
    }
    if spec.nnodes == 0 {
        return Err(Error::InvalidArgument("nnodes must be at least 1".into()));
    }
    if spec.node_rank >= spec.nnodes {
        return Err(Error::InvalidArgument(format!(
            "node rank {} is out of range for {} nodes (0..{})",
            spec.node_rank, spec.nnodes, spec.nnodes
        )));
    }
    Ok(())
}

/// Starts the ranks of `spec` on this node, supervises them until all have
/// ended, and reports. Returns `Err` only if the job could not start (bad
/// spec, program not found); a failing rank is an `Ok` report with a
/// non-zero [`LaunchReport::exit_code`]. Prints what it does to stderr:
/// forwarded rank output, the first failure, and a summary if the job failed.
///
/// Call it from a thread that lives until it returns (it does not return
/// earlier): `PR_SET_PDEATHSIG` fires when the spawning *thread* ends.
pub fn spawn(spec: &LaunchSpec) -> Result<LaunchReport> {
    check(spec)?;
    // torchrun_env multiplies them: refuse what would overflow there.
    spec.nnodes
        .checked_mul(spec.nproc_per_node)
        .ok_or_else(|| Error::InvalidArgument("nnodes × nproc_per_node overflows".into()))?;
    // Refuse up front what this machine cannot host, naming the limit,
    // rather than losing a rank to it half-way through starting them.
    capacity::check(spec.nproc_per_node, spec.nnodes * spec.nproc_per_node)?;
    let token = match (spec.token, spec.nnodes) {
        (Some(t), _) => t,
        (None, 1) => Token::generate()?,
        (None, _) => {
            return Err(Error::InvalidArgument(format!(
                "a multi-node launch needs the same job token on every node: pass --token \
                 (or set {TOKEN_VAR}) to one value everywhere, e.g. from `openssl rand -hex 16`"
            )));
        }
    };
    let master_port = match spec.master_port {
        Some(p) => p,
        None if spec.nnodes == 1 => free_port()?,
        None => DEFAULT_MASTER_PORT,
    };

    let guard = Supervising::start();
    let mut group = Group::new();
    let mut ranks: Vec<Running> = Vec::with_capacity(spec.nproc_per_node);
    for local_rank in 0..spec.nproc_per_node {
        let rank = spec.node_rank * spec.nproc_per_node + local_rank;
        let mut cmd = Command::new(&spec.program);
        let slot = RankSlot {
            spec,
            local_rank,
            master_port,
        };
        let vars = match (spec.rank_env)(&slot) {
            Ok(v) => v,
            Err(why) => {
                group.kill_all();
                drop(guard);
                return Err(Error::InvalidArgument(format!(
                    "the variables of rank {rank}: {why}"
                )));
            }
        };
        cmd.args(&spec.args)
            .env_remove("TORCHELASTIC_RUN_ID")
            .envs(vars)
            .env(TOKEN_VAR, token.to_string())
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::inherit())
            .stderr(Stdio::piped());
        let i = match group.spawn(&mut cmd) {
            Ok(i) => i,
            Err(e) => {
                group.kill_all();
                drop(guard);
                return Err(Error::io(
                    format!(
                        "cannot start rank {rank} ({})",
                        spec.program.to_string_lossy()
                    ),
                    e,
                ));
            }
        };
        let pid = group.pid(i);
        let tail = Arc::new(Mutex::new(VecDeque::with_capacity(TAIL_LINES)));
        let reader = match group.child_mut(i).stderr.take().map(|pipe| {
            let tail = Arc::clone(&tail);
            std::thread::Builder::new()
                .name(format!("ringside-rank{rank}-stderr"))
                .spawn(move || forward(rank, pipe, tail))
        }) {
            None => None,
            Some(Ok(h)) => Some(h),
            // Without its reader the rank's stderr pipe is closed: it would
            // die of its first message and say nothing ("rank 866 exited
            // with code 1 … wrote nothing to stderr"). Stop here and say why.
            Some(Err(e)) => {
                group.kill_all();
                drop(guard);
                return Err(Error::io(
                    format!(
                        "cannot start a thread to read rank {rank}'s output (the thread \
                         limit, `ulimit -u`, or memory); nothing was left running"
                    ),
                    e,
                ));
            }
        };
        ranks.push(Running {
            rank,
            local_rank,
            pid,
            stopped: None,
            tail,
            reader,
        });
    }

    let (failed, interrupted) = supervise(&mut group, &mut ranks, spec.grace);
    drop(guard);

    // Every rank and its group are gone, so the pipes close and the readers
    // finish; bound the wait anyway in case a rank's child escaped its group.
    let drain_until = Instant::now() + DRAIN;
    for r in &mut ranks {
        if let Some(h) = r.reader.take() {
            while !h.is_finished() && Instant::now() < drain_until {
                std::thread::sleep(Duration::from_millis(5));
            }
            if h.is_finished() {
                let _ = h.join();
            }
        }
    }
    let report = LaunchReport {
        ranks: ranks
            .iter()
            .enumerate()
            .map(|(i, r)| RankOutcome {
                rank: r.rank,
                local_rank: r.local_rank,
                pid: r.pid,
                exit: group.exit(i).unwrap_or(Exit::Unknown),
                stopped: r.stopped,
                stderr_tail: r
                    .tail
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                    .cloned()
                    .collect(),
            })
            .collect(),
        failed,
        interrupted,
    };
    if !report.success() {
        let mut err = std::io::stderr().lock();
        for line in report.to_string().lines() {
            let _ = writeln!(err, "ringside launch: {line}");
        }
    }
    Ok(report)
}

/// Used when starting a later rank failed: stop the ones already running.
/// Watches the ranks until all have ended; returns the index of the rank
/// whose failure ended the job and the interrupt signal, if any.
fn supervise(
    group: &mut Group,
    ranks: &mut [Running],
    grace: Duration,
) -> (Option<usize>, Option<i32>) {
    let mut failed = None;
    let mut interrupted = None;
    // Set once we start stopping ranks: when to escalate to SIGKILL.
    let mut kill_at: Option<Instant> = None;
    let mut killed = false;
    loop {
        for i in group.reap() {
            let (r, exit) = (&ranks[i], group.exit(i).unwrap_or(Exit::Unknown));
            if !exit.success() && failed.is_none() && kill_at.is_none() && r.stopped.is_none() {
                failed = Some(i);
                let mut err = std::io::stderr().lock();
                let _ = writeln!(
                    err,
                    "ringside launch: rank {} (pid {}) {}; stopping the other ranks \
                     (SIGTERM, SIGKILL after {:?})",
                    r.rank, r.pid, exit, grace
                );
            }
        }
        if group.all_exited() {
            return (failed, interrupted);
        }
        let sig = PENDING.load(Ordering::SeqCst);
        if sig != 0 && interrupted.is_none() && failed.is_none() {
            interrupted = Some(sig);
        }
        if kill_at.is_none() && (failed.is_some() || interrupted.is_some()) {
            for i in group.signal_running(libc::SIGTERM) {
                ranks[i].stopped = Some(Stopped::Terminated);
            }
            kill_at = Some(Instant::now() + grace);
        }
        let impatient = INTERRUPTS.load(Ordering::SeqCst) > 1;
        if !killed && kill_at.is_some_and(|t| Instant::now() >= t || impatient) {
            for i in group.signal_running(libc::SIGKILL) {
                ranks[i].stopped = Some(Stopped::Killed);
            }
            killed = true;
        }
        std::thread::sleep(POLL);
    }
}

#[cfg(test)]
mod tests;
