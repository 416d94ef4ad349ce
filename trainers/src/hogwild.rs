//! Hogwild!: several processes train one set of parameters that lives in shared
//! memory, each updating it whenever it likes, without locks (PyTorch's
//! `model.share_memory()` + `torch.multiprocessing` example).
//!
//! The parent builds an MLP, puts its trainable parameters in one shared-memory
//! region, and starts `workers` copies of a program (its own executable, re-run with
//! [`ENV_ROLE`] set; see [`Launcher`] and [`worker_from_env`]). Each worker maps the
//! region, points its model's parameters at it (`Tensor::from_blob` + `set_data`, so
//! libtorch's SGD writes straight into the shared pages), trains on its shard of a
//! synthetic data set and counts its steps in its own slot of the region's header.
//! The parent waits, then evaluates the shared parameters.
//!
//! PyTorch's two sharing strategies are both here ([`Sharing`]):
//!
//! * **file descriptor** (`file_descriptor`, PyTorch's default on Linux): the region
//!   is an anonymous `memfd_create` file. A worker connects to the parent over a Unix
//!   socket in the abstract namespace (no file either) and receives the descriptor as
//!   `SCM_RIGHTS` ancillary data; the parent checks with `SO_PEERCRED` that the peer
//!   is one of its workers. Nothing can leak: the memory goes away when the last
//!   process holding the descriptor or a mapping ends, however it ends.
//! * **file system** (`file_system`): the region is a named file,
//!   `/dev/shm/ringside-hogwild-<parent pid>-<n>`, that workers open by name. The
//!   parent unlinks it as soon as every worker has attached (or died), and on any exit
//!   path of [`run`]. If the parent itself is killed before that, the file stays: the
//!   next [`run`] (or [`remove_stale_shm`]) removes every such file whose owner pid is
//!   no longer alive.
//!
//! A worker killed mid-run (tests use [`KillWorker`] to SIGKILL one) is reported by
//! the parent with its signal and the number of steps it had done; its updates up to
//! then stay in the shared parameters.
//!
//! Region layout: a 64-byte header (`magic`, total length, parameter count, worker
//! count), one 64-byte slot per worker (attached pid, steps done: atomics, each on its
//! own cache line), then the `f32` parameters in name order.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tch::nn::{self, ModuleT, OptimizerConfig};
use tch::{Device, Kind, Tensor};

use crate::data_parallel::cross_entropy;
use crate::models::{self, MlpConfig};
use crate::{Error, Result};

/// Set (to the worker's rank) in a worker's environment: "you are a Hogwild worker".
pub const ENV_ROLE: &str = "RINGSIDE_HOGWILD_WORKER";
/// The run's [`HogwildConfig`], encoded by [`HogwildConfig::encode`].
pub const ENV_CONFIG: &str = "RINGSIDE_HOGWILD_CONFIG";
/// The shared-memory file name (file system) or abstract socket name (descriptor).
pub const ENV_SHARED: &str = "RINGSIDE_HOGWILD_SHARED";
/// The parent's pid: a worker stops if its parent is gone.
pub const ENV_PARENT: &str = "RINGSIDE_HOGWILD_PARENT";
/// Where named shared-memory files live (what `shm_open` uses on Linux).
pub const SHM_DIR: &str = "/dev/shm";
/// The start of every shared-memory file and socket name of this module.
pub const SHM_PREFIX: &str = "ringside-hogwild-";

const MAGIC: u64 = u64::from_le_bytes(*b"RSHOGWLD");
const SLOT: usize = 64;
/// The most workers a region has slots for.
pub const MAX_WORKERS: usize = 256;

/// How the workers get the shared memory (PyTorch's `torch.multiprocessing` sharing
/// strategies).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Sharing {
    /// An anonymous memory file whose descriptor is sent over a Unix socket.
    FileDescriptor,
    /// A named file in `/dev/shm`, opened by name.
    FileSystem,
}

impl Sharing {
    fn name(self) -> &'static str {
        match self {
            Sharing::FileDescriptor => "file_descriptor",
            Sharing::FileSystem => "file_system",
        }
    }
}

/// Fault injection for tests: worker `rank` sends itself SIGKILL after `after_steps`
/// optimizer steps (0: before it attaches to the shared memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KillWorker {
    /// The worker to kill.
    pub rank: usize,
    /// Steps it does first.
    pub after_steps: usize,
}

/// What to train and how.
#[derive(Debug, Clone, PartialEq)]
pub struct HogwildConfig {
    /// Worker processes, `1..=MAX_WORKERS`.
    pub workers: usize,
    /// SGD steps each worker takes.
    pub steps: usize,
    /// Examples per step.
    pub batch: usize,
    /// SGD learning rate.
    pub lr: f64,
    /// Hidden layer widths of the MLP (784 → … → 10).
    pub hidden: Vec<i64>,
    /// Size of the synthetic data set ([`crate::data::synthetic`]); worker `r` trains
    /// on examples `r, r + workers, …`, the parent evaluates on all of them.
    pub samples: usize,
    /// Seed of the synthetic data set.
    pub data_seed: u64,
    /// How the workers get the shared memory.
    pub sharing: Sharing,
    /// How long the whole run may take before the parent kills the workers.
    pub timeout: Duration,
    /// Fault injection (tests).
    pub kill_worker: Option<KillWorker>,
}

impl Default for HogwildConfig {
    /// 2 workers × 100 steps of 16 on 1,024 synthetic examples, MLP 784-32-10.
    fn default() -> Self {
        HogwildConfig {
            workers: 2,
            steps: 100,
            batch: 16,
            lr: 0.05,
            hidden: vec![32],
            samples: 1024,
            data_seed: 1,
            sharing: Sharing::FileDescriptor,
            timeout: Duration::from_secs(120),
            kill_worker: None,
        }
    }
}

impl HogwildConfig {
    /// Checks the numbers are usable.
    pub fn validate(&self) -> Result<()> {
        let bad = |what: String| Err(Error::InvalidArgument(what));
        if self.workers == 0 || self.workers > MAX_WORKERS {
            return bad(format!(
                "workers must be 1..={MAX_WORKERS}, got {}",
                self.workers
            ));
        }
        if self.steps == 0 || self.batch == 0 {
            return bad("steps and batch must be at least 1".into());
        }
        if self.samples < self.workers {
            return bad(format!(
                "{} samples cannot give each of {} workers one",
                self.samples, self.workers
            ));
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return bad(format!(
                "the learning rate must be positive, got {}",
                self.lr
            ));
        }
        if self.hidden.iter().any(|&h| h <= 0) {
            return bad(format!("hidden widths must be positive: {:?}", self.hidden));
        }
        if let Some(k) = self.kill_worker {
            if k.rank >= self.workers {
                return bad(format!("cannot kill worker {} of {}", k.rank, self.workers));
            }
        }
        Ok(())
    }

    /// The model every process builds.
    pub fn blueprint(&self) -> models::Blueprint {
        models::mlp(&MlpConfig {
            hidden: self.hidden.clone(),
            ..Default::default()
        })
    }

    /// One line for the environment: `key=value` pairs separated by `;`.
    pub fn encode(&self) -> String {
        let hidden: Vec<String> = self.hidden.iter().map(i64::to_string).collect();
        let mut s = format!(
            "workers={};steps={};batch={};lr={};hidden={};samples={};data_seed={};sharing={};timeout_ms={}",
            self.workers,
            self.steps,
            self.batch,
            self.lr,
            hidden.join(","),
            self.samples,
            self.data_seed,
            self.sharing.name(),
            self.timeout.as_millis()
        );
        if let Some(k) = self.kill_worker {
            s.push_str(&format!(";kill={}@{}", k.rank, k.after_steps));
        }
        s
    }

    /// The inverse of [`encode`](Self::encode).
    pub fn decode(s: &str) -> Result<HogwildConfig> {
        let bad = |what: &str| Error::InvalidArgument(format!("hogwild config {s:?}: {what}"));
        let num = |v: &str, key: &str| {
            v.parse::<u64>()
                .map_err(|_| bad(&format!("{key}={v} is not a number")))
        };
        let mut c = HogwildConfig::default();
        for pair in s.split(';').filter(|p| !p.is_empty()) {
            let (key, v) = pair
                .split_once('=')
                .ok_or_else(|| bad(&format!("{pair:?} is not key=value")))?;
            match key {
                "workers" => c.workers = num(v, key)? as usize,
                "steps" => c.steps = num(v, key)? as usize,
                "batch" => c.batch = num(v, key)? as usize,
                "samples" => c.samples = num(v, key)? as usize,
                "data_seed" => c.data_seed = num(v, key)?,
                "timeout_ms" => c.timeout = Duration::from_millis(num(v, key)?),
                "lr" => c.lr = v.parse().map_err(|_| bad(&format!("lr={v}")))?,
                "hidden" => {
                    c.hidden = v
                        .split(',')
                        .filter(|h| !h.is_empty())
                        .map(|h| h.parse().map_err(|_| bad(&format!("hidden={v}"))))
                        .collect::<Result<_>>()?
                }
                "sharing" => {
                    c.sharing = match v {
                        "file_descriptor" => Sharing::FileDescriptor,
                        "file_system" => Sharing::FileSystem,
                        _ => return Err(bad(&format!("unknown sharing {v}"))),
                    }
                }
                "kill" => {
                    let (r, n) = v.split_once('@').ok_or_else(|| bad("kill=RANK@STEPS"))?;
                    c.kill_worker = Some(KillWorker {
                        rank: num(r, key)? as usize,
                        after_steps: num(n, key)? as usize,
                    });
                }
                _ => return Err(bad(&format!("unknown key {key}"))),
            }
        }
        c.validate()?;
        Ok(c)
    }
}

/// The program the parent starts as workers: usually its own executable, whose
/// `main` calls [`worker_from_env`] first. A test binary passes libtest arguments
/// that select a test which does the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launcher {
    /// The executable.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
}

impl Launcher {
    /// This process's executable, without arguments.
    pub fn current_exe() -> Result<Launcher> {
        Ok(Launcher {
            program: std::env::current_exe().map_err(|e| os("finding this executable", e))?,
            args: Vec::new(),
        })
    }

    /// This process's executable with `args`.
    pub fn current_exe_with<I, S>(args: I) -> Result<Launcher>
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        let mut l = Launcher::current_exe()?;
        l.args = args.into_iter().map(Into::into).collect();
        Ok(l)
    }
}

/// How one worker process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerOutcome {
    /// Its rank.
    pub rank: usize,
    /// Its process id.
    pub pid: u32,
    /// Whether it attached to the shared memory (wrote its pid into its slot).
    pub attached: bool,
    /// Steps it counted in shared memory.
    pub steps: u64,
    /// `None`: exited with status 0; else what went wrong ("killed by signal 9
    /// (SIGKILL)", "exited with code 101", "did not finish in time").
    pub failure: Option<String>,
    /// The end of its standard error.
    pub stderr_tail: String,
}

/// What a [`run`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct HogwildReport {
    /// One per worker, by rank.
    pub workers: Vec<WorkerOutcome>,
    /// Mean loss of the initial parameters over the whole data set.
    pub initial_loss: f64,
    /// Mean loss of the shared parameters after the workers ended.
    pub final_loss: f64,
    /// Trainable scalars shared.
    pub parameters: usize,
    /// The largest change of any shared parameter.
    pub max_change: f64,
    /// The named file used (file system sharing), already removed.
    pub shm_path: Option<PathBuf>,
    /// Stale files of dead parents removed before starting.
    pub stale_removed: Vec<PathBuf>,
    /// From creating the region to the last worker's end.
    pub elapsed: Duration,
}

impl HogwildReport {
    /// The report if every worker finished, else an error describing each failure.
    pub fn into_result(self) -> Result<HogwildReport> {
        let failures: Vec<String> = self
            .workers
            .iter()
            .filter_map(|w| {
                w.failure.as_ref().map(|f| {
                    let tail = w.stderr_tail.trim();
                    let tail = if tail.is_empty() {
                        String::new()
                    } else {
                        format!("; its stderr ended with: {tail}")
                    };
                    format!(
                        "worker {} (pid {}) {f} after {} steps{tail}",
                        w.rank, w.pid, w.steps
                    )
                })
            })
            .collect();
        if failures.is_empty() {
            Ok(self)
        } else {
            Err(Error::Worker(failures.join("; ")))
        }
    }
}

/// Runs a Hogwild training: creates the shared parameters, starts the workers with
/// `launcher`, waits for them, evaluates. Fails if any worker failed.
pub fn run(config: &HogwildConfig, launcher: &Launcher) -> Result<HogwildReport> {
    run_report(config, launcher)?.into_result()
}

/// [`run`], but returns the report even when workers failed (errors only for what
/// stops the parent itself).
pub fn run_report(config: &HogwildConfig, launcher: &Launcher) -> Result<HogwildReport> {
    config.validate()?;
    let stale_removed = remove_stale_shm()?;

    // The parent's copy of the model: initial parameters, then evaluation.
    let vs = nn::VarStore::new(Device::Cpu);
    let model = config.blueprint().build(&vs.root());
    let params = trainable(&vs);
    let floats: usize = params.iter().map(|(_, t)| t.numel()).sum();
    let len = params_offset(config.workers) + 4 * floats;
    let data = crate::data::synthetic(config.samples, config.data_seed)?;
    let initial_loss = eval_loss(&model, &data)?;

    let start = Instant::now();
    let name = unique_name();
    let (region, shared, mut named) = match config.sharing {
        Sharing::FileDescriptor => {
            let fd = memfd(len)?;
            let region = Mapping::new(fd.as_raw_fd(), len)?;
            let addr = SocketAddr::from_abstract_name(name.as_bytes())
                .map_err(|e| os("naming the abstract socket", e))?;
            let listener =
                UnixListener::bind_addr(&addr).map_err(|e| os("binding the abstract socket", e))?;
            listener
                .set_nonblocking(true)
                .map_err(|e| os("making the socket non-blocking", e))?;
            (region, Shared::Fd { fd, listener }, None)
        }
        Sharing::FileSystem => {
            let (file, guard) = create_named(&name, len)?;
            let region = Mapping::new(file.as_raw_fd(), len)?;
            (region, Shared::Named, Some(guard))
        }
    };
    let mut shared = Some(shared);
    region.init(config.workers, floats)?;
    tch::no_grad(|| -> Result<()> {
        for (view, (_, p)) in region.param_views(&params)?.into_iter().zip(&params) {
            view.shallow_clone().f_copy_(p)?;
        }
        Ok(())
    })?;
    let initial: Vec<Tensor> = tch::no_grad(|| {
        params
            .iter()
            .map(|(_, p)| {
                let mut copy = p.f_empty_like()?;
                copy.f_copy_(p)?;
                Ok(copy)
            })
            .collect::<Result<_>>()
    })?;

    let mut children = Children::spawn(config, launcher, &name)?;
    let deadline = start + config.timeout;
    let mut timed_out = false;
    loop {
        children.poll()?;
        if let Some(Shared::Fd { fd, listener }) = &shared {
            serve_descriptors(listener, &mut children, fd.as_raw_fd(), len);
        }
        let all_attached_or_gone =
            (0..config.workers).all(|r| region.attached(r).unwrap_or(0) != 0 || children.exited(r));
        if all_attached_or_gone {
            // Nobody else will open the memory by name or ask for its descriptor.
            if let Some(guard) = named.as_mut() {
                guard.unlink()?;
            }
            shared = None;
        }
        if children.all_exited() {
            break;
        }
        if Instant::now() >= deadline {
            timed_out = true;
            children.kill_all();
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let elapsed = start.elapsed();
    drop(shared);
    if let Some(guard) = named.as_mut() {
        guard.unlink()?;
    }

    // Read the shared parameters back into the parent's model.
    tch::no_grad(|| -> Result<()> {
        for (view, (_, p)) in region.param_views(&params)?.into_iter().zip(&params) {
            p.shallow_clone().f_copy_(&view)?;
        }
        Ok(())
    })?;
    let final_loss = eval_loss(&model, &data)?;
    let mut max_change: f64 = 0.0;
    for ((_, p), p0) in params.iter().zip(&initial) {
        let d = p.f_sub(p0)?.f_abs()?.f_max()?.f_double_value(&[])?;
        max_change = max_change.max(d);
    }
    let workers = children.outcomes(&region, timed_out)?;
    Ok(HogwildReport {
        workers,
        initial_loss,
        final_loss,
        parameters: floats,
        max_change,
        shm_path: named.map(|g| g.path.clone()),
        stale_removed,
        elapsed,
    })
}

/// What one worker did.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerReport {
    /// Its rank.
    pub rank: usize,
    /// Steps done.
    pub steps: usize,
    /// The loss of its last batch.
    pub last_loss: f64,
}

/// In a process started by [`run`] ([`ENV_ROLE`] set): attaches to the shared
/// memory, trains, and returns `Some(report)`; the caller should then exit (with a
/// failure status on error). In any other process: `None`, and nothing happens.
pub fn worker_from_env() -> Option<Result<WorkerReport>> {
    let rank = std::env::var(ENV_ROLE).ok()?;
    Some(worker(&rank))
}

fn worker(rank: &str) -> Result<WorkerReport> {
    let env = |key: &str| {
        std::env::var(key).map_err(|_| Error::InvalidArgument(format!("{key} is not set")))
    };
    let rank: usize = rank
        .parse()
        .map_err(|_| Error::InvalidArgument(format!("{ENV_ROLE}={rank} is not a rank")))?;
    let config = HogwildConfig::decode(&env(ENV_CONFIG)?)?;
    let name = env(ENV_SHARED)?;
    let parent: i32 = env(ENV_PARENT)?
        .parse()
        .map_err(|_| Error::InvalidArgument(format!("{ENV_PARENT} is not a pid")))?;
    if rank >= config.workers {
        return Err(Error::InvalidArgument(format!(
            "rank {rank} of {} workers",
            config.workers
        )));
    }
    // Die with the parent rather than train on as an orphan. The parent may have
    // died before the call: then our parent is already someone else.
    // SAFETY: prctl with PR_SET_PDEATHSIG takes a signal number; getppid cannot fail.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
    }
    if unsafe { libc::getppid() } != parent {
        return Err(Error::Worker(format!("parent {parent} is gone")));
    }
    let kill_after = config
        .kill_worker
        .filter(|k| k.rank == rank)
        .map(|k| k.after_steps);
    if kill_after == Some(0) {
        kill_self();
    }

    let region = match config.sharing {
        Sharing::FileDescriptor => {
            let (fd, len) = receive_descriptor(&name, rank, config.timeout)?;
            Mapping::new(fd.as_raw_fd(), len)?
            // `fd` closes here; the mapping keeps the memory.
        }
        Sharing::FileSystem => {
            let path = Path::new(SHM_DIR).join(&name);
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .map_err(|source| Error::Io {
                    path: path.clone(),
                    source,
                })?;
            let len = file
                .metadata()
                .map_err(|source| Error::Io { path, source })?
                .len() as usize;
            Mapping::new(file.as_raw_fd(), len)?
        }
    };
    tch::set_num_threads(1);
    // The model, the views into the region and the optimizer must go before the
    // region is unmapped: they live in this inner function.
    let report = train_worker(&config, rank, &region, kill_after)?;
    drop(region);
    Ok(report)
}

fn train_worker(
    config: &HogwildConfig,
    rank: usize,
    region: &Mapping,
    kill_after: Option<usize>,
) -> Result<WorkerReport> {
    let vs = nn::VarStore::new(Device::Cpu);
    let model = config.blueprint().build(&vs.root());
    let params = trainable(&vs);
    region.check(config.workers, params.iter().map(|(_, t)| t.numel()).sum())?;
    for (view, (_, p)) in region.param_views(&params)?.into_iter().zip(&params) {
        // The parameter keeps its identity (and its own `.grad`), but its numbers are
        // now the shared ones: SGD's in-place update writes into shared memory.
        p.shallow_clone().f_set_data(&view)?;
    }
    region
        .slot(rank, 0)?
        .store(u64::from(std::process::id()), Ordering::SeqCst);

    let data = crate::data::synthetic(config.samples, config.data_seed)?;
    let shard: Vec<usize> = (rank..config.samples).step_by(config.workers).collect();
    let mut opt = nn::Sgd::default().build(&vs, config.lr)?;
    let steps = region.slot(rank, 8)?;
    let mut last_loss = f64::NAN;
    for step in 0..config.steps {
        let idx: Vec<usize> = (0..config.batch)
            .map(|j| shard[(step * config.batch + j) % shard.len()])
            .collect();
        let (x, y) = data.batch(&idx)?;
        let loss = cross_entropy(&model.forward_t(&x, true), &y)?;
        opt.zero_grad();
        loss.f_backward()?;
        opt.step();
        last_loss = loss.f_double_value(&[])?;
        steps.fetch_add(1, Ordering::SeqCst);
        if kill_after == Some(step + 1) {
            kill_self();
        }
    }
    Ok(WorkerReport {
        rank,
        steps: config.steps,
        last_loss,
    })
}

/// Fault injection: SIGKILL, exactly what an OOM killer or `kill -9` does (no
/// destructors, no clean-up).
fn kill_self() {
    // SAFETY: raise only sends a signal to this process.
    unsafe {
        libc::raise(libc::SIGKILL);
    }
}

/// Removes the named shared-memory files of this module whose owner (the pid in the
/// name) is no longer running: what a killed parent left behind. Returns them.
pub fn remove_stale_shm() -> Result<Vec<PathBuf>> {
    remove_stale_in(Path::new(SHM_DIR))
}

/// [`remove_stale_shm`] in another folder.
pub fn remove_stale_in(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        // No /dev/shm: nothing can be stale there.
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(Error::Io {
                path: dir.to_owned(),
                source,
            });
        }
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(owner_pid) else {
            continue;
        };
        if pid_alive(pid) {
            continue;
        }
        let path = entry.path();
        match std::fs::remove_file(&path) {
            Ok(()) => removed.push(path),
            // Another process cleaned it up first.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(source) => return Err(Error::Io { path, source }),
        }
    }
    Ok(removed)
}

/// The pid in `ringside-hogwild-<pid>-<n>`, if `name` has that form.
pub fn owner_pid(name: &str) -> Option<i32> {
    let rest = name.strip_prefix(SHM_PREFIX)?;
    let (pid, n) = rest.split_once('-')?;
    n.parse::<u64>().ok()?;
    pid.parse().ok().filter(|&p: &i32| p > 0)
}

fn pid_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists and may be signalled.
    let r = unsafe { libc::kill(pid, 0) };
    // EPERM: it exists but belongs to someone else.
    r == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

fn unique_name() -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{SHM_PREFIX}{}-{n}", std::process::id())
}

fn os(what: &str, source: io::Error) -> Error {
    Error::Os {
        what: what.to_owned(),
        source,
    }
}

/// The trainable variables in name order: the layout of the shared parameters.
fn trainable(vs: &nn::VarStore) -> Vec<(String, Tensor)> {
    let mut v: Vec<(String, Tensor)> = vs
        .variables()
        .into_iter()
        .filter(|(_, t)| t.requires_grad())
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

fn eval_loss(model: &models::Stage, data: &crate::data::Dataset) -> Result<f64> {
    tch::no_grad(|| cross_entropy(&model.forward_t(&data.images, false), &data.labels))?
        .f_double_value(&[])
        .map_err(Into::into)
}

fn params_offset(workers: usize) -> usize {
    SLOT + SLOT * workers
}

fn memfd(len: usize) -> Result<OwnedFd> {
    // SAFETY: the name is a valid C string; the result is checked before use.
    let fd = unsafe { libc::memfd_create(c"ringside-hogwild".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(os("memfd_create", io::Error::last_os_error()));
    }
    // SAFETY: memfd_create returned a new descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let file = File::from(fd);
    file.set_len(len as u64)
        .map_err(|e| os("sizing the memory file", e))?;
    Ok(file.into())
}

/// A named shared-memory file that is removed when dropped (or earlier).
#[derive(Debug)]
struct NamedShm {
    path: PathBuf,
    linked: bool,
}

impl NamedShm {
    fn unlink(&mut self) -> Result<()> {
        if self.linked {
            self.linked = false;
            match std::fs::remove_file(&self.path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(Error::Io {
                        path: self.path.clone(),
                        source,
                    });
                }
            }
        }
        Ok(())
    }
}

impl Drop for NamedShm {
    fn drop(&mut self) {
        // Errors have nowhere to go in drop; `unlink` was already tried on the
        // normal paths, where they are reported.
        let _ = self.unlink();
    }
}

fn create_named(name: &str, len: usize) -> Result<(File, NamedShm)> {
    let path = Path::new(SHM_DIR).join(name);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(|source| Error::Io {
            path: path.clone(),
            source,
        })?;
    let guard = NamedShm {
        path: path.clone(),
        linked: true,
    };
    file.set_len(len as u64)
        .map_err(|source| Error::Io { path, source })?;
    Ok((file, guard))
}

/// A shared, read-write mapping of a whole memory file.
#[derive(Debug)]
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

impl Mapping {
    fn new(fd: RawFd, len: usize) -> Result<Mapping> {
        if len < SLOT {
            return Err(Error::InvalidArgument(format!(
                "a shared region of {len} bytes is too small"
            )));
        }
        // SAFETY: a fresh mapping chosen by the kernel; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(os(
                "mmap of the shared parameters",
                io::Error::last_os_error(),
            ));
        }
        NonNull::new(p.cast::<u8>())
            .map(|ptr| Mapping { ptr, len })
            .ok_or_else(|| os("mmap returned null", io::Error::other("null mapping")))
    }

    /// The 8-byte atomic at `offset` (a multiple of 8 inside the header or slots).
    fn atomic(&self, offset: usize) -> Result<&AtomicU64> {
        if offset % 8 != 0 || offset + 8 > self.len {
            return Err(Error::InvalidArgument(format!(
                "offset {offset} is outside the {}-byte region",
                self.len
            )));
        }
        // SAFETY: in bounds and 8-aligned (mmap returns page-aligned memory); every
        // process touches these words only through atomics, so sharing them is sound.
        Ok(unsafe { &*self.ptr.as_ptr().add(offset).cast::<AtomicU64>() })
    }

    fn slot(&self, rank: usize, field: usize) -> Result<&AtomicU64> {
        self.atomic(SLOT + SLOT * rank + field)
    }

    fn attached(&self, rank: usize) -> Result<u64> {
        Ok(self.slot(rank, 0)?.load(Ordering::SeqCst))
    }

    fn init(&self, workers: usize, floats: usize) -> Result<()> {
        self.atomic(8)?.store(self.len as u64, Ordering::SeqCst);
        self.atomic(16)?.store(floats as u64, Ordering::SeqCst);
        self.atomic(24)?.store(workers as u64, Ordering::SeqCst);
        for r in 0..workers {
            self.slot(r, 0)?.store(0, Ordering::SeqCst);
            self.slot(r, 8)?.store(0, Ordering::SeqCst);
        }
        // Written last: a reader that sees the magic sees a complete header.
        self.atomic(0)?.store(MAGIC, Ordering::SeqCst);
        Ok(())
    }

    /// Checks that the region holds what this process expects.
    fn check(&self, workers: usize, floats: usize) -> Result<()> {
        let got = (
            self.atomic(0)?.load(Ordering::SeqCst),
            self.atomic(8)?.load(Ordering::SeqCst),
            self.atomic(16)?.load(Ordering::SeqCst),
            self.atomic(24)?.load(Ordering::SeqCst),
        );
        let want = (
            MAGIC,
            (params_offset(workers) + 4 * floats) as u64,
            floats as u64,
            workers as u64,
        );
        if got != want || self.len as u64 != want.1 {
            return Err(Error::InvalidArgument(format!(
                "the shared region does not match this model: (magic, bytes, floats, \
                 workers) = {got:x?}, expected {want:x?} in a {}-byte mapping",
                self.len
            )));
        }
        Ok(())
    }

    /// Tensors over the parameter area, one per `(name, parameter)`, same shapes.
    ///
    /// They borrow the mapping's memory without a lifetime: callers drop them (and
    /// anything they were `set_data` into) before the mapping.
    fn param_views(&self, params: &[(String, Tensor)]) -> Result<Vec<Tensor>> {
        let mut offset = params_offset_from_len(self)?;
        params
            .iter()
            .map(|(name, p)| {
                let bytes = 4 * p.numel();
                if p.kind() != Kind::Float || offset + bytes > self.len {
                    return Err(Error::InvalidArgument(format!(
                        "{name} ({:?}, {} values) does not fit the shared region",
                        p.kind(),
                        p.numel()
                    )));
                }
                // SAFETY: `offset..offset + bytes` lies inside the mapping (checked)
                // and is 4-aligned; the mapping outlives the tensor (see above).
                let t = unsafe {
                    Tensor::f_from_blob(
                        self.ptr.as_ptr().add(offset),
                        &p.size(),
                        &[],
                        Kind::Float,
                        Device::Cpu,
                    )
                }?;
                offset += bytes;
                Ok(t)
            })
            .collect()
    }
}

fn params_offset_from_len(region: &Mapping) -> Result<usize> {
    let workers = region.atomic(24)?.load(Ordering::SeqCst) as usize;
    if workers == 0 || workers > MAX_WORKERS {
        return Err(Error::InvalidArgument(format!(
            "the shared region's header says {workers} workers"
        )));
    }
    Ok(params_offset(workers))
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: exactly the range mmap returned; the tensors over it are gone.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// How the parent shares the region while workers attach.
enum Shared {
    /// The memory file's descriptor and the socket that hands it out.
    Fd { fd: OwnedFd, listener: UnixListener },
    /// The named file (its guard is kept separately, until unlinked).
    Named,
}

/// The worker processes, reaped as they end.
struct Children {
    procs: Vec<ChildProc>,
}

struct ChildProc {
    child: Child,
    exit: Option<ExitStatus>,
    /// Whether this worker already received the descriptor.
    served: bool,
    stderr: Option<JoinHandle<String>>,
}

impl Children {
    fn spawn(config: &HogwildConfig, launcher: &Launcher, name: &str) -> Result<Children> {
        let encoded = config.encode();
        let mut children = Children { procs: Vec::new() };
        for rank in 0..config.workers {
            let mut child = Command::new(&launcher.program)
                .args(&launcher.args)
                .env(ENV_ROLE, rank.to_string())
                .env(ENV_CONFIG, &encoded)
                .env(ENV_SHARED, name)
                .env(ENV_PARENT, std::process::id().to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| os(&format!("starting {}", launcher.program.display()), e))?;
            let stderr = child.stderr.take().map(|mut err| {
                std::thread::spawn(move || {
                    let mut buf = Vec::new();
                    let _ = err.read_to_end(&mut buf);
                    String::from_utf8_lossy(&buf).into_owned()
                })
            });
            children.procs.push(ChildProc {
                child,
                exit: None,
                served: false,
                stderr,
            });
        }
        Ok(children)
    }

    fn poll(&mut self) -> Result<()> {
        for p in self.procs.iter_mut().filter(|p| p.exit.is_none()) {
            p.exit = p
                .child
                .try_wait()
                .map_err(|e| os("waiting for a worker", e))?;
        }
        Ok(())
    }

    fn exited(&self, rank: usize) -> bool {
        self.procs.get(rank).is_none_or(|p| p.exit.is_some())
    }

    fn all_exited(&self) -> bool {
        self.procs.iter().all(|p| p.exit.is_some())
    }

    /// SIGKILLs the workers still running (only processes this run started) and
    /// reaps them.
    fn kill_all(&mut self) {
        for p in self.procs.iter_mut().filter(|p| p.exit.is_none()) {
            let _ = p.child.kill();
            p.exit = p.child.wait().ok();
        }
    }

    fn outcomes(&mut self, region: &Mapping, timed_out: bool) -> Result<Vec<WorkerOutcome>> {
        let mut out = Vec::new();
        for (rank, p) in self.procs.iter_mut().enumerate() {
            let stderr = p
                .stderr
                .take()
                .and_then(|h| h.join().ok())
                .unwrap_or_default();
            let tail: String = {
                let chars: Vec<char> = stderr.chars().collect();
                chars[chars.len().saturating_sub(1500)..].iter().collect()
            };
            let failure = match p.exit {
                _ if timed_out && p.exit.is_some_and(|s| s.signal() == Some(libc::SIGKILL)) => {
                    Some("did not finish in time and was killed".to_owned())
                }
                Some(s) if s.success() => None,
                Some(s) => Some(describe(s)),
                None => Some("could not be waited for".to_owned()),
            };
            out.push(WorkerOutcome {
                rank,
                pid: p.child.id(),
                attached: region.attached(rank)? != 0,
                steps: region.slot(rank, 8)?.load(Ordering::SeqCst),
                failure,
                stderr_tail: tail,
            });
        }
        Ok(out)
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        // On an early error: no worker outlives the run.
        self.kill_all();
    }
}

fn describe(s: ExitStatus) -> String {
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exited with code {c}"),
        (None, Some(sig)) => {
            let name = match sig {
                libc::SIGKILL => " (SIGKILL)",
                libc::SIGTERM => " (SIGTERM)",
                libc::SIGSEGV => " (SIGSEGV)",
                libc::SIGABRT => " (SIGABRT)",
                libc::SIGBUS => " (SIGBUS)",
                libc::SIGINT => " (SIGINT)",
                _ => "",
            };
            format!("was killed by signal {sig}{name}")
        }
        (None, None) => format!("ended with status {s}"),
    }
}

/// Answers every pending connection on the descriptor socket. A connection that is
/// not one of our waiting workers, or that misbehaves, is dropped: that worker (if it
/// is one) then fails and is reported by its exit status.
fn serve_descriptors(listener: &UnixListener, children: &mut Children, fd: RawFd, len: usize) {
    while let Ok((stream, _)) = listener.accept() {
        let _ = serve_one(stream, children, fd, len);
    }
}

fn serve_one(
    mut stream: UnixStream,
    children: &mut Children,
    fd: RawFd,
    len: usize,
) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    let pid = peer_pid(&stream)?;
    let mut rank = [0u8; 8];
    stream.read_exact(&mut rank)?;
    let rank = u64::from_le_bytes(rank) as usize;
    let Some(p) = children.procs.get_mut(rank) else {
        return Err(io::Error::other("no such rank"));
    };
    // Only the worker process we started for this rank gets the memory.
    if p.served || i64::from(p.child.id()) != i64::from(pid) {
        return Err(io::Error::other("not our worker"));
    }
    send_fd(&stream, fd, &(len as u64).to_le_bytes())?;
    p.served = true;
    Ok(())
}

fn peer_pid(stream: &UnixStream) -> io::Result<i32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut size = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `size` are valid for writing and sized for SO_PEERCRED.
    let r = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &mut size,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.pid)
}

/// Sends `payload` with `fd` attached as `SCM_RIGHTS`: the receiver gets its own
/// descriptor for the same open file.
fn send_fd(stream: &UnixStream, fd: RawFd, payload: &[u8]) -> io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: payload.as_ptr().cast_mut().cast(),
        iov_len: payload.len(),
    };
    // SAFETY: CMSG_SPACE is arithmetic.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    // u64 words: the control buffer must be aligned for `cmsghdr`.
    let mut control = vec![0u64; space.div_ceil(8)];
    // SAFETY: an all-zero msghdr is a valid empty message.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: msg_control points at `space` bytes, enough for one header with one fd
    // (CMSG_SPACE), so CMSG_FIRSTHDR is non-null and CMSG_DATA is in bounds.
    let sent = unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null() {
            return Err(io::Error::other("no room for the control message"));
        }
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
        libc::sendmsg(stream.as_raw_fd(), &msg, libc::MSG_NOSIGNAL)
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    if sent as usize != payload.len() {
        return Err(io::Error::other("short sendmsg"));
    }
    Ok(())
}

/// Receives `payload.len()` bytes and the descriptor sent with them.
fn recv_fd(stream: &UnixStream, payload: &mut [u8]) -> io::Result<OwnedFd> {
    let mut iov = libc::iovec {
        iov_base: payload.as_mut_ptr().cast(),
        iov_len: payload.len(),
    };
    // SAFETY: arithmetic.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    let mut control = vec![0u64; space.div_ceil(8)];
    // SAFETY: an all-zero msghdr is a valid empty message.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: buffers as described by `msg`, all live for the call.
    let got = unsafe { libc::recvmsg(stream.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if got < 0 {
        return Err(io::Error::last_os_error());
    }
    if got as usize != payload.len() {
        return Err(io::Error::other(format!(
            "expected {} bytes with the descriptor, got {got}",
            payload.len()
        )));
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(io::Error::other("the control message was truncated"));
    }
    // SAFETY: the kernel filled `control` and set msg_controllen; CMSG_FIRSTHDR
    // returns null when there is no header, which is checked.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null()
            || (*cmsg).cmsg_level != libc::SOL_SOCKET
            || (*cmsg).cmsg_type != libc::SCM_RIGHTS
        {
            return Err(io::Error::other("no descriptor came with the message"));
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>());
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// The worker's side of the descriptor hand-over: connect, say who we are, receive
/// the descriptor and the region's length.
fn receive_descriptor(name: &str, rank: usize, timeout: Duration) -> Result<(OwnedFd, usize)> {
    let addr = SocketAddr::from_abstract_name(name.as_bytes())
        .map_err(|e| os("naming the abstract socket", e))?;
    let mut stream = UnixStream::connect_addr(&addr)
        .map_err(|e| os(&format!("connecting to the parent's socket {name:?}"), e))?;
    let io_err = |e| os("receiving the shared memory's descriptor", e);
    stream.set_read_timeout(Some(timeout)).map_err(io_err)?;
    stream.set_write_timeout(Some(timeout)).map_err(io_err)?;
    stream
        .write_all(&(rank as u64).to_le_bytes())
        .map_err(io_err)?;
    let mut len = [0u8; 8];
    let fd = recv_fd(&stream, &mut len).map_err(io_err)?;
    let len = u64::from_le_bytes(len) as usize;
    // The descriptor must really be a file of that size, not whatever came along.
    let file = File::from(fd);
    let size = file.metadata().map_err(io_err)?.len() as usize;
    if size != len {
        return Err(Error::InvalidArgument(format!(
            "the descriptor's file has {size} bytes, the parent said {len}"
        )));
    }
    Ok((OwnedFd::from(file), len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_round_trips_through_the_environment_encoding() {
        let c = HogwildConfig {
            workers: 3,
            steps: 7,
            batch: 5,
            lr: 0.125,
            hidden: vec![16, 8],
            samples: 99,
            data_seed: 42,
            sharing: Sharing::FileSystem,
            timeout: Duration::from_millis(1234),
            kill_worker: Some(KillWorker {
                rank: 2,
                after_steps: 3,
            }),
        };
        assert_eq!(HogwildConfig::decode(&c.encode()).unwrap(), c);
        let d = HogwildConfig::default();
        assert_eq!(HogwildConfig::decode(&d.encode()).unwrap(), d);
        for bad in [
            "workers=0",
            "steps=x",
            "nope=1",
            "sharing=pipes",
            "lr=-1",
            "kill=5@1",
        ] {
            assert!(HogwildConfig::decode(bad).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn owner_pid_parses_only_our_names() {
        assert_eq!(owner_pid("ringside-hogwild-123-0"), Some(123));
        assert_eq!(owner_pid("ringside-hogwild-123-x"), None);
        assert_eq!(owner_pid("ringside-hogwild-0-1"), None);
        assert_eq!(owner_pid("torch_123_456"), None);
        assert_eq!(owner_pid("ringside-hogwild-abc-1"), None);
    }

    #[test]
    fn a_descriptor_sent_over_a_socket_maps_the_same_memory() {
        let fd = memfd(4096).unwrap();
        let a = Mapping::new(fd.as_raw_fd(), 4096).unwrap();
        let (left, right) = UnixStream::pair().unwrap();
        send_fd(&left, fd.as_raw_fd(), &4096u64.to_le_bytes()).unwrap();
        drop(fd);
        let mut len = [0u8; 8];
        let got = recv_fd(&right, &mut len).unwrap();
        assert_eq!(u64::from_le_bytes(len), 4096);
        let b = Mapping::new(got.as_raw_fd(), 4096).unwrap();
        a.atomic(128).unwrap().store(77, Ordering::SeqCst);
        assert_eq!(b.atomic(128).unwrap().load(Ordering::SeqCst), 77);
        assert!(a.atomic(4096).is_err() && a.atomic(3).is_err());
    }

    #[test]
    fn region_header_is_checked() {
        let fd = memfd(params_offset(2) + 40).unwrap();
        let m = Mapping::new(fd.as_raw_fd(), params_offset(2) + 40).unwrap();
        m.init(2, 10).unwrap();
        m.check(2, 10).unwrap();
        assert!(m.check(2, 11).is_err());
        assert!(m.check(3, 10).is_err());
    }
}
