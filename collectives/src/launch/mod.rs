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
//! - each rank runs in its own process group, and signals go to the whole
//!   group, so a rank's own children (`sh -c 'sleep 60'`) stop with it;
//!   when a rank exits, whatever it left running in its group is killed;
//! - each rank gets `PR_SET_PDEATHSIG(SIGKILL)`, so if the launcher itself is
//!   killed the ranks die too (their children can then survive: only a
//!   launcher that exits normally cleans up whole groups);
//! - with [`install_interrupt_handler`], Ctrl-C / SIGTERM / SIGHUP to the
//!   launcher stops every rank the same way and the report's exit code is
//!   128 + the signal (130 for Ctrl-C).
//!
//! Ranks get `/dev/null` as stdin: being in their own process groups, a
//! rank reading the terminal would be stopped by the shell's job control.
//!
//! Multi-node: run the launcher once per node with the same `nnodes`,
//! `master_addr`, `master_port` and **the same token** on every node (pass
//! `RINGSIDE_JOB_TOKEN` or `--token`; make one with `openssl rand -hex 16`).

use std::collections::VecDeque;
use std::ffi::OsString;
use std::fmt;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{ChildStderr, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::rendezvous::env::{DEFAULT_MASTER_ADDR, DEFAULT_MASTER_PORT, Overrides, RankInfo};
use crate::rendezvous::store::{TOKEN_VAR, Token};

mod group;

pub use group::{Group, supervised};

/// How many stderr lines per rank a report keeps.
pub const TAIL_LINES: usize = 20;
/// The default time ranks get between SIGTERM and SIGKILL.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);
/// How often the supervisor looks at its children.
const POLL: Duration = Duration::from_millis(20);
/// A forwarded line longer than this is split (bounds the launcher's memory).
const MAX_LINE: u64 = 64 * 1024;
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

/// How a rank's process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this code.
    Code(i32),
    /// A signal killed it.
    Signal(i32),
    /// Its status could not be read.
    Unknown,
}

impl Exit {
    /// Whether it exited with code 0.
    pub fn success(self) -> bool {
        self == Exit::Code(0)
    }

    /// The shell's view: the code, or 128 + the signal.
    pub fn shell_code(self) -> i32 {
        match self {
            Exit::Code(c) => c,
            Exit::Signal(s) => 128 + s,
            Exit::Unknown => 1,
        }
    }
}

/// How any child process ended (for programs that supervise children of
/// their own, such as Hogwild's workers), in the launcher's words.
impl From<std::process::ExitStatus> for Exit {
    fn from(st: std::process::ExitStatus) -> Exit {
        match (st.code(), st.signal()) {
            (Some(c), _) => Exit::Code(c),
            (None, Some(s)) => Exit::Signal(s),
            (None, None) => Exit::Unknown,
        }
    }
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Exit::Code(c) => write!(f, "exited with code {c}"),
            Exit::Signal(s) => write!(f, "was killed by signal {s} ({})", signal_name(s)),
            Exit::Unknown => f.write_str("ended with an unknown status"),
        }
    }
}

/// The name of a signal number (`SIGKILL`), or `signal N`.
pub fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        _ => return format!("signal {sig}"),
    };
    name.to_owned()
}

/// How the launcher ended a rank that was still running.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// It exited after SIGTERM.
    Terminated,
    /// It outlived the grace period (or a second Ctrl-C) and got SIGKILL.
    Killed,
}

/// What became of one rank.
#[derive(Clone, Debug)]
pub struct RankOutcome {
    /// Global rank.
    pub rank: usize,
    /// Rank on this node.
    pub local_rank: usize,
    /// Its process id.
    pub pid: u32,
    /// How it ended.
    pub exit: Exit,
    /// Set if the launcher stopped it (after another rank failed or an interrupt).
    pub stopped: Option<Stopped>,
    /// Its last stderr lines (at most [`TAIL_LINES`]).
    pub stderr_tail: Vec<String>,
}

impl RankOutcome {
    /// "rank 1 (pid 4242) was killed by signal 9 (SIGKILL)".
    pub fn describe(&self) -> String {
        format!("rank {} (pid {}) {}", self.rank, self.pid, self.exit)
    }
}

/// The result of a launch: every rank's outcome and what ended the job.
#[derive(Clone, Debug)]
pub struct LaunchReport {
    /// One entry per local rank, in local-rank order.
    pub ranks: Vec<RankOutcome>,
    /// Index into `ranks` of the rank whose failure ended the job.
    pub failed: Option<usize>,
    /// The signal (SIGINT, SIGTERM, SIGHUP) that made the launcher stop the job.
    pub interrupted: Option<i32>,
}

impl LaunchReport {
    /// Whether every rank exited with code 0.
    pub fn success(&self) -> bool {
        self.exit_code() == 0
    }

    /// The rank whose failure ended the job.
    pub fn failure(&self) -> Option<&RankOutcome> {
        self.failed.and_then(|i| self.ranks.get(i))
    }

    /// The rank the failed rank blames, when its error says so and that rank was
    /// still running when the launcher stopped it: a frozen rank never exits by
    /// itself, so the first to exit is the one that timed out waiting for it (or
    /// lost it). Read from the error texts of ringside's transports and store
    /// ("… waiting for rank N …", "lost rank N: …"), the last such line winning.
    pub fn blamed(&self) -> Option<(&RankOutcome, &str)> {
        let failed = self.failure()?;
        failed.stderr_tail.iter().rev().find_map(|line| {
            let n = blamed_in(line).filter(|&n| n != failed.rank)?;
            let culprit = self.ranks.iter().find(|r| r.rank == n)?;
            culprit
                .stopped
                .is_some()
                .then_some((culprit, line.as_str()))
        })
    }

    /// The launcher's exit code: 128 + signal if interrupted (130 for
    /// Ctrl-C), else the failed rank's code (128 + signal if a signal killed
    /// it), else 0.
    pub fn exit_code(&self) -> i32 {
        if let Some(sig) = self.interrupted {
            return 128 + sig;
        }
        if let Some(f) = self.failure() {
            let c = f.exit.shell_code();
            // A code of 0 cannot mark a failure; keep the launcher's exit non-zero.
            return if c == 0 { 1 } else { c };
        }
        if self.ranks.iter().all(|r| r.exit.success()) {
            0
        } else {
            1
        }
    }
}

impl fmt::Display for LaunchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(sig) = self.interrupted {
            writeln!(f, "interrupted by {}; stopped all ranks", signal_name(sig))?;
        }
        if let Some(r) = self.failure() {
            if let Some((culprit, _)) = self.blamed() {
                writeln!(
                    f,
                    "rank {} stopped responding: rank {} gave up waiting for it and exited \
                     first (its error below); rank {} was still running when stopped",
                    culprit.rank, r.rank, culprit.rank
                )?;
            }
            writeln!(f, "{}", r.describe())?;
            if r.stderr_tail.is_empty() {
                writeln!(f, "rank {} wrote nothing to stderr", r.rank)?;
            } else {
                writeln!(
                    f,
                    "last {} stderr lines of rank {}:",
                    r.stderr_tail.len(),
                    r.rank
                )?;
                for line in &r.stderr_tail {
                    writeln!(f, "  | {line}")?;
                }
            }
        }
        let stopped: Vec<String> = self
            .ranks
            .iter()
            .filter_map(|r| match r.stopped {
                Some(Stopped::Terminated) => Some(format!("{} (SIGTERM)", r.rank)),
                Some(Stopped::Killed) => Some(format!("{} (SIGKILL)", r.rank)),
                None => None,
            })
            .collect();
        if !stopped.is_empty() {
            writeln!(f, "stopped ranks: {}", stopped.join(", "))?;
        }
        if self.failed.is_none() && self.interrupted.is_none() {
            if self.success() {
                writeln!(f, "all {} ranks exited successfully", self.ranks.len())?;
            } else {
                for r in self.ranks.iter().filter(|r| !r.exit.success()) {
                    writeln!(f, "{}", r.describe())?;
                }
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Interrupts

/// Number of `spawn` calls supervising right now.
static SUPERVISING: AtomicUsize = AtomicUsize::new(0);
/// The last interrupt signal received while supervising (0: none).
static PENDING: AtomicI32 = AtomicI32::new(0);
/// Interrupts received while supervising; a second one skips the grace period.
static INTERRUPTS: AtomicUsize = AtomicUsize::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(sig: libc::c_int) {
    // Only async-signal-safe work here: atomics, signal(), raise().
    if SUPERVISING.load(Ordering::SeqCst) > 0 {
        PENDING.store(sig, Ordering::SeqCst);
        INTERRUPTS.fetch_add(1, Ordering::SeqCst);
    } else {
        // Not launching anything: behave as if no handler were installed,
        // so a rank that shares the launcher's code still dies on SIGTERM.
        // SAFETY: signal() and raise() are async-signal-safe.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
    }
}

/// Makes SIGINT (Ctrl-C), SIGTERM and SIGHUP stop the ranks of a running
/// [`spawn`] cleanly (SIGTERM, grace period, SIGKILL; exit code 128 +
/// signal) instead of killing the launcher outright. Outside a `spawn`
/// these signals keep their default effect. Call it once, early in a
/// launcher's `main`; calling it again does nothing. The library never
/// installs it by itself.
pub fn install_interrupt_handler() -> Result<()> {
    if INSTALLED.swap(true, Ordering::SeqCst) {
        return Ok(());
    }
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value;
        // we set a handler that only touches atomics and async-signal-safe
        // calls, and pass valid pointers.
        let rc = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut())
        };
        if rc != 0 {
            INSTALLED.store(false, Ordering::SeqCst);
            return Err(Error::io(
                format!("installing a handler for {}", signal_name(sig)),
                std::io::Error::last_os_error(),
            ));
        }
    }
    Ok(())
}

/// Counts this thread as supervising while alive (also on early return).
struct Supervising;

impl Supervising {
    fn start() -> Supervising {
        PENDING.store(0, Ordering::SeqCst);
        INTERRUPTS.store(0, Ordering::SeqCst);
        SUPERVISING.fetch_add(1, Ordering::SeqCst);
        Supervising
    }
}

impl Drop for Supervising {
    fn drop(&mut self) {
        SUPERVISING.fetch_sub(1, Ordering::SeqCst);
    }
}

// ---------------------------------------------------------------------------
// Spawning

/// One started rank (its process is the same index of the [`Group`]).
struct Running {
    rank: usize,
    local_rank: usize,
    pid: u32,
    stopped: Option<Stopped>,
    tail: Arc<Mutex<VecDeque<String>>>,
    reader: Option<JoinHandle<()>>,
}

/// Forwards a rank's stderr as `[rank N] line`, keeping the last lines.
fn forward(rank: usize, pipe: ChildStderr, tail: Arc<Mutex<VecDeque<String>>>) {
    let mut reader = BufReader::new(pipe);
    let mut line = Vec::new();
    let mut backtrace = BacktraceFilter::default();
    loop {
        line.clear();
        match (&mut reader).take(MAX_LINE).read_until(b'\n', &mut line) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
        let text = String::from_utf8_lossy(line.strip_suffix(b"\n").unwrap_or(&line));
        let text = text.strip_suffix('\r').unwrap_or(&text).to_owned();
        {
            // One write per line, under the lock, so ranks' lines never mix.
            let mut err = std::io::stderr().lock();
            let _ = writeln!(err, "[rank {rank}] {text}");
        }
        let Some(kept) = backtrace.keep(text) else {
            continue;
        };
        let mut t = tail.lock().unwrap_or_else(|e| e.into_inner());
        if t.len() == TAIL_LINES {
            t.pop_front();
        }
        t.push_back(kept);
    }
}

/// The rank a line of an error blames: `N` in "waiting for rank N" or "lost rank N".
fn blamed_in(line: &str) -> Option<usize> {
    ["waiting for rank ", "lost rank "]
        .iter()
        .find_map(|marker| {
            let at = line.find(marker)? + marker.len();
            let digits: String = line[at..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse().ok()
        })
}

/// Keeps a backtrace out of a rank's stderr tail (the lines are still forwarded):
/// with `RUST_BACKTRACE=1` in the environment, the last 20 lines of a failed rank
/// were all frames, and the error itself was cut off.
#[derive(Default)]
struct BacktraceFilter {
    inside: bool,
}

impl BacktraceFilter {
    /// The line to keep in the tail for `text`, if any: `(backtrace omitted)` for the
    /// header of a backtrace, nothing for its frames (indented) and its closing note.
    fn keep(&mut self, text: String) -> Option<String> {
        let t = text.trim();
        if t.eq_ignore_ascii_case("stack backtrace:") {
            self.inside = true;
            return Some("(backtrace omitted; the rank's full stderr is above)".into());
        }
        if self.inside {
            if text.starts_with(char::is_whitespace) || t.is_empty() {
                return None;
            }
            self.inside = false;
            if t.starts_with("note: Some details are omitted") {
                return None;
            }
        }
        Some(text)
    }
}

/// Picks a port that is free on 127.0.0.1 right now.
fn free_port() -> Result<u16> {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| Error::io("picking a free port on 127.0.0.1", e))
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
        let reader = group.child_mut(i).stderr.take().and_then(|pipe| {
            let tail = Arc::clone(&tail);
            std::thread::Builder::new()
                .name(format!("ringside-rank{rank}-stderr"))
                .spawn(move || forward(rank, pipe, tail))
                .ok()
        });
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

// ---------------------------------------------------------------------------
// init

/// What [`init`] made of this process.
#[derive(Debug)]
pub enum Role {
    /// Run as this rank.
    Rank(RankInfo),
    /// This process launched the ranks (copies of itself), which have all
    /// ended; exit with `report.exit_code()`.
    Launcher(LaunchReport),
}

/// The `mp.spawn`-style entry point for programs:
/// - started by a launcher (ringside, torchrun, mpirun, srun — see
///   [`crate::rendezvous::env`]) → [`Role::Rank`] from the environment;
/// - else with `nproc > 1` → runs `nproc` copies of this executable with the
///   same arguments under [`spawn`] and returns [`Role::Launcher`];
/// - else → [`Role::Rank`], rank 0 of a world of one.
///
/// Call [`install_interrupt_handler`] before `init` so Ctrl-C stops the
/// copies cleanly; ranks are unaffected by it.
pub fn init(nproc: Option<usize>) -> Result<Role> {
    if RankInfo::launched_from_env()? {
        return Ok(Role::Rank(RankInfo::from_env(&Overrides::default())?));
    }
    match nproc {
        Some(0) => Err(Error::InvalidArgument(
            "the number of processes must be at least 1".into(),
        )),
        Some(n) if n > 1 => {
            let exe = std::env::current_exe()
                .map_err(|e| Error::io("finding this program's executable to re-run it", e))?;
            let spec = LaunchSpec::new(exe, std::env::args_os().skip(1), n);
            Ok(Role::Launcher(spawn(&spec)?))
        }
        _ => Ok(Role::Rank(RankInfo::from_env(&Overrides::default())?)),
    }
}

#[cfg(test)]
mod tests;
